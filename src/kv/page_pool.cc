#include "kv/page_pool.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace fathom::kv {

PageRef& PageRef::operator=(const PageRef& o) {
  if (this != &o) {
    PageRef copy(o);
    *this = std::move(copy);
  }
  return *this;
}

PageRef& PageRef::operator=(PageRef&& o) noexcept {
  if (this != &o) {
    reset();
    p_ = o.p_;
    o.p_ = nullptr;
  }
  return *this;
}

void PageRef::reset() {
  if (p_ && p_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) p_->pool->release(p_);
  p_ = nullptr;
}

PagePool::PagePool(int64_t page_bytes, int64_t max_pages)
    : page_bytes_((page_bytes + 63) / 64 * 64), max_pages_(max_pages) {}

PagePool::~PagePool() {
  for (Page* p : all_) {
    std::free(p->data);
    delete p;
  }
}

Result<PageRef> PagePool::allocate() {
  Page* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (max_pages_ > 0 && in_use_ >= max_pages_)
      return Status(StatusCode::kResourceExhausted, "the KV pool is full (" +
                                                        std::to_string(max_pages_) + " pages of " +
                                                        std::to_string(page_bytes_) + " bytes)");
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    } else {
      p = new Page();
      p->pool = this;
      p->data = static_cast<float*>(std::aligned_alloc(64, size_t(page_bytes_)));
      if (p->data == nullptr) {
        delete p;
        return Status(StatusCode::kResourceExhausted, "out of memory for a KV page");
      }
      all_.push_back(p);
    }
    ++in_use_;
  }
  std::memset(p->data, 0, size_t(page_bytes_));
  return PageRef(p);
}

void PagePool::release(Page* p) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(p);
  --in_use_;
}

int64_t PagePool::available() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (max_pages_ <= 0) return std::numeric_limits<int64_t>::max() / 4;
  return max_pages_ - in_use_;
}

PoolStats PagePool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return PoolStats{page_bytes_, max_pages_, in_use_, int64_t(all_.size())};
}

PagedRows::PagedRows(PagePool* pool, int64_t row_floats)
    : pool_(pool),
      width_(row_floats),
      per_page_(pool->page_bytes() / int64_t(sizeof(float)) / row_floats) {}

int64_t PagedRows::pages_to_grow(int64_t n) const {
  const int64_t have = int64_t(pages_.size()) * per_page_;
  const int64_t need = rows_ + n - have;
  return need <= 0 ? 0 : (need + per_page_ - 1) / per_page_;
}

Status PagedRows::grow(int64_t n) {
  if (per_page_ < 1) return invalid_argument("a KV row is wider than a page");
  const int64_t extra = pages_to_grow(n);
  std::vector<PageRef> fresh;
  for (int64_t i = 0; i < extra; ++i) {
    FATHOM_ASSIGN_OR_RETURN(PageRef p, pool_->allocate());
    fresh.push_back(std::move(p));
  }
  for (auto& p : fresh) pages_.push_back(std::move(p));
  rows_ += n;
  return Status::ok();
}

void PagedRows::truncate(int64_t n) {
  if (n >= rows_ || n < 0) return;
  const int64_t keep_pages = (n + per_page_ - 1) / per_page_;
  pages_.resize(size_t(keep_pages));
  if (n % per_page_ != 0)
    std::memset(row(n), 0, size_t((per_page_ - n % per_page_) * width_) * sizeof(float));
  rows_ = n;
}

Status PagedRows::append_pages(const std::vector<PageRef>& pages, int64_t rows) {
  if (rows_ % per_page_ != 0 || int64_t(pages_.size()) * per_page_ != rows_)
    return internal_error("shared KV pages appended to a table that does not end on a page");
  if (rows > int64_t(pages.size()) * per_page_)
    return internal_error("more rows than the shared KV pages hold");
  pages_.insert(pages_.end(), pages.begin(), pages.end());
  rows_ += rows;
  return Status::ok();
}

Result<PagedRows> PagedRows::copy_to(PagePool* pool) const {
  if (pool->page_bytes() != pool_->page_bytes())
    return invalid_argument("KV pages copied into a pool of another page size");
  PagedRows out(pool, width_);
  for (const PageRef& page : pages_) {
    FATHOM_ASSIGN_OR_RETURN(PageRef p, pool->allocate());
    std::memcpy(p.data(), page.data(), size_t(pool_->page_bytes()));
    out.pages_.push_back(std::move(p));
  }
  out.rows_ = rows_;
  return out;
}

int64_t PagedRows::pages_to_fork() const { return per_page_ > 0 && rows_ % per_page_ != 0 ? 1 : 0; }

Result<PagedRows> PagedRows::fork() const {
  PagedRows out(pool_, width_);
  out.rows_ = rows_;
  out.pages_ = pages_;
  if (pages_to_fork() > 0) {
    const size_t last = size_t(rows_ / per_page_);
    FATHOM_ASSIGN_OR_RETURN(PageRef p, pool_->allocate());
    std::memcpy(p.data(), pages_[last].data(), size_t(pool_->page_bytes()));
    out.pages_[last] = std::move(p);
  }
  return out;
}

int64_t PagedRows::bytes() const {
  return int64_t(pages_.size()) * (pool_ ? pool_->page_bytes() : 0);
}

}  // namespace fathom::kv
