// Fixed-size KV pages from a pool with a budget. A PagePool hands out pages of one size
// (page_bytes, 64-byte aligned) up to max_pages and reuses released ones; a PageRef is a
// counted reference to one page, so a prefix-cache block and every sequence that resumed from
// it can hold the same page. PagedRows lays rows of a fixed float width over pages: a growing
// table (compressed KV and index keys) or a fixed ring (sliding-window KV).
//
// PagePool's methods may be called from any thread (one lock per page allocated or freed,
// never per token). PageRef counts atomically. A PagedRows belongs to one sequence and one
// thread at a time; readers on other threads may read rows while nobody appends.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/status.h"

namespace fathom::kv {

class PagePool;

struct Page {
  PagePool* pool = nullptr;
  std::atomic<int32_t> refs{0};
  float* data = nullptr;
};

// A counted reference to one page; the page goes back to its pool with the last reference.
class PageRef {
 public:
  PageRef() = default;
  PageRef(const PageRef& o) : p_(o.p_) { retain(); }
  PageRef(PageRef&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  PageRef& operator=(const PageRef& o);
  PageRef& operator=(PageRef&& o) noexcept;
  ~PageRef() { reset(); }

  void reset();
  float* data() const { return p_->data; }
  explicit operator bool() const { return p_ != nullptr; }
  // References held now (1 = this one only).
  int32_t use_count() const { return p_ ? p_->refs.load(std::memory_order_acquire) : 0; }

 private:
  friend class PagePool;
  explicit PageRef(Page* p) : p_(p) { retain(); }
  void retain() {
    if (p_) p_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  Page* p_ = nullptr;
};

struct PoolStats {
  int64_t page_bytes = 0, max_pages = 0, pages_in_use = 0, pages_allocated = 0;
};

class PagePool {
 public:
  // max_pages = 0: no limit (a private pool for a caller that runs one sequence).
  PagePool(int64_t page_bytes, int64_t max_pages);
  ~PagePool();
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  // A zero-filled page, or kResourceExhausted when max_pages are in use.
  Result<PageRef> allocate();
  int64_t page_bytes() const { return page_bytes_; }
  int64_t max_pages() const { return max_pages_; }
  // Pages that can still be allocated (max_pages - in use; a large number when unlimited).
  int64_t available() const;
  PoolStats stats() const;

 private:
  friend class PageRef;
  void release(Page* p);
  const int64_t page_bytes_, max_pages_;
  mutable std::mutex mu_;
  std::vector<Page*> all_, free_;  // guarded by mu_
  int64_t in_use_ = 0;             // guarded by mu_
};

// Rows of `row_floats` floats laid over pages of a pool (rows never straddle pages).
class PagedRows {
 public:
  PagedRows() = default;
  PagedRows(PagePool* pool, int64_t row_floats);

  bool initialised() const { return pool_ != nullptr; }
  int64_t size() const { return rows_; }
  int64_t rows_per_page() const { return per_page_; }
  float* row(int64_t i) { return pages_[size_t(i / per_page_)].data() + (i % per_page_) * width_; }
  const float* row(int64_t i) const {
    return pages_[size_t(i / per_page_)].data() + (i % per_page_) * width_;
  }
  // Adds n zeroed rows at the end; kResourceExhausted (nothing added) when the pool is full.
  Status grow(int64_t n);
  // Drops the rows from n on (n <= size()): pages no row uses any more go back to the pool,
  // dropped rows left in the last page are zeroed. REQUIRES: the dropped rows were appended
  // by this table, never in a page it shares.
  void truncate(int64_t n);
  // Pages needed to grow by n rows.
  int64_t pages_to_grow(int64_t n) const;
  const std::vector<PageRef>& pages() const { return pages_; }
  // Appends whole shared pages (the rows of a cached prefix block); the table must end on a
  // page boundary.
  Status append_pages(const std::vector<PageRef>& pages, int64_t rows);
  // A copy of every page into new pages of `pool` (same page size).
  Result<PagedRows> copy_to(PagePool* pool) const;
  // A table of the same rows for another sequence that appends on its own (n samples of one
  // prompt): it shares every full page (REQUIRES: rows there are never rewritten) and gets a
  // copy of a partially filled last page, the one both will append to. Takes pages_to_fork()
  // pages from this table's pool.
  Result<PagedRows> fork() const;
  int64_t pages_to_fork() const;
  int64_t bytes() const;

 private:
  PagePool* pool_ = nullptr;
  int64_t width_ = 0, per_page_ = 0, rows_ = 0;
  std::vector<PageRef> pages_;
};

}  // namespace fathom::kv
