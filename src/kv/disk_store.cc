#include "kv/disk_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/log.h"

namespace fathom::kv {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kSuffix = ".fkv";

Status write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(std::strerror(errno));
    done += size_t(n);
  }
  return Status::ok();
}

Result<std::string> read_all(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path);
    return io_error(path + ": " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return io_error(path + ": " + std::strerror(errno));
  }
  std::string out(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return io_error(path + ": " + std::strerror(errno));
    }
    if (n == 0) break;  // shrank under us: the reader's checks see a short object
    done += size_t(n);
  }
  out.resize(done);
  ::close(fd);
  return out;
}

}  // namespace

DiskStore::DiskStore(DiskStoreOptions options) : opt_(std::move(options)) {}

Result<std::unique_ptr<DiskStore>> DiskStore::open(const DiskStoreOptions& options) {
  if (options.dir.empty()) return invalid_argument("the KV store needs a directory");
  if (options.budget_bytes <= 0) return invalid_argument("the KV store's disk budget must be > 0");
  auto s = std::unique_ptr<DiskStore>(new DiskStore(options));
  FATHOM_RETURN_IF_ERROR(s->rebuild_index());
  s->writes_ = std::make_unique<WriteQueue>(
      options.queue_bytes,
      [p = s.get()](const StoreKey& k, const std::string& v) { return p->write_object(k, v); });
  return s;
}

DiskStore::~DiskStore() = default;

std::string DiskStore::path_of(const StoreKey& key) const {
  const std::string h = key.hex();
  return opt_.dir + "/" + h.substr(0, 2) + "/" + h + std::string(kSuffix);
}

Status DiskStore::rebuild_index() {
  std::error_code ec;
  fs::create_directories(opt_.dir + "/tmp", ec);
  if (ec) return io_error("cannot create " + opt_.dir + ": " + ec.message());
  // Writes a crash interrupted: never renamed into place, never read.
  for (const auto& e : fs::directory_iterator(opt_.dir + "/tmp", ec)) fs::remove(e.path(), ec);
  struct Found {
    StoreKey key;
    int64_t bytes;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  for (const auto& shard : fs::directory_iterator(opt_.dir, ec)) {
    const std::string name = shard.path().filename().string();
    if (name.size() != 2 || !shard.is_directory(ec)) continue;
    for (const auto& f : fs::directory_iterator(shard.path(), ec)) {
      const std::string fn = f.path().filename().string();
      StoreKey k;
      if (fn.size() != 32 + kSuffix.size() || fn.substr(32) != kSuffix ||
          !StoreKey::from_hex(fn.substr(0, 32), &k) || fn.substr(0, 2) != name)
        continue;
      struct stat st;
      if (::stat(f.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      found.push_back(
          {k, int64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
    }
  }
  if (ec) return io_error("cannot read " + opt_.dir + ": " + ec.message());
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::lock_guard<std::mutex> lock(mu_);
  for (const Found& f : found) index_put(f.key, f.bytes);
  evict_over_budget();
  return Status::ok();
}

void DiskStore::index_put(const StoreKey& key, int64_t bytes) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    stats_.bytes -= it->second.bytes;
    lru_.erase(it->second.lru);
    index_.erase(it);
  }
  lru_.push_back(key);
  index_[key] = Entry{bytes, std::prev(lru_.end())};
  stats_.bytes += bytes;
  stats_.objects = int64_t(index_.size());
}

void DiskStore::index_remove(StoreKey key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  stats_.bytes -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  stats_.objects = int64_t(index_.size());
  ::unlink(path_of(key).c_str());
}

void DiskStore::evict_over_budget() {
  while (stats_.bytes > opt_.budget_bytes && !lru_.empty()) {
    index_remove(lru_.front());
    ++stats_.evictions;
  }
}

bool DiskStore::contains(const StoreKey& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(key) != 0) return true;
  }
  return writes_->pending(key);
}

Result<std::string> DiskStore::get(const StoreKey& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) {
      ++stats_.misses;
      return not_found("no KV object " + key.hex());
    }
    lru_.splice(lru_.end(), lru_, it->second.lru);  // the most recently used
  }
  const std::string path = path_of(key);
  Result<std::string> r = read_all(path);
  std::lock_guard<std::mutex> lock(mu_);
  if (!r.is_ok()) {
    ++stats_.misses;
    if (r.status().code() == StatusCode::kNotFound) index_remove(key);  // removed behind our back
    return r.status();
  }
  ++stats_.hits;
  stats_.bytes_read += int64_t(r->size());
  // Recency survives a restart: the index is rebuilt in modification-time order.
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return r;
}

bool DiskStore::put(const StoreKey& key, std::string value) {
  if (int64_t(value.size()) > opt_.budget_bytes) {  // could never be kept
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.dropped_writes;
    return false;
  }
  return writes_->push(key, std::move(value));
}

void DiskStore::erase(const StoreKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key)) ++stats_.erased;
  index_remove(key);
}

void DiskStore::flush() { writes_->flush(); }

StoreStats DiskStore::stats() const {
  const WriteQueue::Stats w = writes_->stats();
  std::lock_guard<std::mutex> lock(mu_);
  StoreStats s = stats_;
  s.queued_bytes = w.queued_bytes;
  s.dropped_writes += w.dropped;
  s.writes = w.writes;
  s.write_errors = w.errors;
  s.bytes_written = w.bytes_written;
  return s;
}

Status DiskStore::write_object(const StoreKey& key, const std::string& value) {
  const std::string final_path = path_of(key);
  const std::string tmp =
      opt_.dir + "/tmp/" + key.hex() + "." + std::to_string(++tmp_counter_) + ".tmp";
  Status st = Status::ok();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    st = io_error(tmp + ": " + std::strerror(errno));
  } else {
    st = write_all(fd, value);
    if (::close(fd) != 0 && st.is_ok()) st = io_error(tmp + ": " + std::strerror(errno));
  }
  if (st.is_ok()) {
    std::error_code ec;
    fs::create_directories(fs::path(final_path).parent_path(), ec);
    if (::rename(tmp.c_str(), final_path.c_str()) != 0)
      st = io_error(final_path + ": " + std::strerror(errno));
  }
  // One line when writes start failing (a full disk) and one when they work again.
  if (!st.is_ok()) {
    ::unlink(tmp.c_str());
    if (!writes_failing_)
      log_warn("kv store: disk writes fail (blocks stay uncached there until they work): " +
               st.message());
    writes_failing_ = true;
    return st;
  }
  if (writes_failing_) log_info("kv store: disk writes work again");
  writes_failing_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  index_put(key, int64_t(value.size()));
  evict_over_budget();
  return Status::ok();
}

}  // namespace fathom::kv
