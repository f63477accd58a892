#include "kv/disk_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/log.h"

namespace fathom::kv {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kSuffix = ".fkv";
constexpr std::string_view kClassPrefix = "class-";

timespec to_timespec(int64_t ms) {
  timespec ts;
  ts.tv_sec = time_t(ms / 1000);
  ts.tv_nsec = long(ms % 1000) * 1000000;
  return ts;
}

// The modification time of a file is its object's last use (the access time is left alone).
bool set_last_use(const std::string& path, int64_t ms) {
  const timespec t[2] = {{0, UTIME_OMIT}, to_timespec(ms)};
  return ::utimensat(AT_FDCWD, path.c_str(), t, 0) == 0;
}

bool is_hex2(const std::string& s) {
  if (s.size() != 2) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

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

// The object file at `path`: kNotFound when absent; kCorrupt, without reading it, when it is
// not a regular file (a FIFO would block the open, a device read forever) or is longer than
// max_bytes (0: no bound), so a file put there by anyone costs no more than an object.
Result<std::string> read_all(const std::string& path, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path);
    return io_error(path + ": " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return io_error(path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return corrupt(path + ": not a regular file");
  }
  if (max_bytes > 0 && st.st_size > max_bytes) {
    ::close(fd);
    return corrupt(path + ": " + std::to_string(st.st_size) +
                   " bytes, more than the largest object (" + std::to_string(max_bytes) + ")");
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

DiskStore::DiskStore(DiskStoreOptions options)
    : opt_(std::move(options)), clock_(opt_.clock ? opt_.clock : &system_clock()) {
  for (const auto& c : opt_.retention.classes()) stats_.classes.push_back({c.name});
}

Result<std::unique_ptr<DiskStore>> DiskStore::open(const DiskStoreOptions& options) {
  if (options.dir.empty()) return invalid_argument("the KV store needs a directory");
  if (options.budget_bytes <= 0) return invalid_argument("the KV store's disk budget must be > 0");
  auto s = std::unique_ptr<DiskStore>(new DiskStore(options));
  FATHOM_RETURN_IF_ERROR(s->rebuild_index());
  s->writes_ = std::make_unique<WriteQueue>(
      options.queue_bytes, [p = s.get()](const StoreKey& k, const std::string& v,
                                         RetentionClass c) { return p->write_object(k, v, c); });
  return s;
}

DiskStore::~DiskStore() = default;

std::string DiskStore::path_of(const StoreKey& key, RetentionClass cls) const {
  const std::string h = key.hex();
  return opt_.dir + "/" + std::string(kClassPrefix) + opt_.retention.name(cls) + "/" +
         h.substr(0, 2) + "/" + h + std::string(kSuffix);
}

std::string DiskStore::path_of(const StoreKey& key) const {
  const std::optional<RetentionClass> c = class_of(key);
  return c ? path_of(key, *c) : std::string();
}

std::optional<RetentionClass> DiskStore::class_of(const StoreKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return it->second.cls;
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
    RetentionClass cls;
    int64_t last_use_ms;
  };
  std::vector<Found> found;
  // The objects of one shard directory (<2 hex>/<32 hex>.fkv) of class `cls`; with `move_to`
  // (the layout before retention classes) each is first moved into that class's directory.
  auto scan_shard = [&](const fs::path& shard, RetentionClass cls, bool move) {
    const std::string name = shard.filename().string();
    std::error_code e2;
    if (!is_hex2(name) || !fs::is_directory(shard, e2)) return;
    for (const auto& f : fs::directory_iterator(shard, e2)) {
      const std::string fn = f.path().filename().string();
      StoreKey k;
      if (fn.size() != 32 + kSuffix.size() || fn.substr(32) != kSuffix ||
          !StoreKey::from_hex(fn.substr(0, 32), &k) || fn.substr(0, 2) != name)
        continue;
      std::string path = f.path().string();
      struct stat st;
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      // Longer than any object of this model: not indexed, so never read (nor deleted: a
      // model with larger objects may share the directory); a write of that key replaces it.
      if (opt_.max_object_bytes > 0 && st.st_size > opt_.max_object_bytes) continue;
      if (move) {
        const std::string to = path_of(k, cls);
        struct stat there;
        if (::stat(to.c_str(), &there) == 0) {  // the class already holds it: keep that one
          ::unlink(path.c_str());
          continue;
        }
        fs::create_directories(fs::path(to).parent_path(), e2);
        if (::rename(path.c_str(), to.c_str()) != 0) continue;  // mtime moves with it
      }
      found.push_back({k, int64_t(st.st_size), cls,
                       int64_t(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000});
    }
    if (move) fs::remove(shard, e2);  // only when empty
  };
  std::vector<fs::path> legacy;
  for (const auto& top : fs::directory_iterator(opt_.dir, ec)) {
    const std::string name = top.path().filename().string();
    std::error_code e2;
    if (is_hex2(name)) {
      legacy.push_back(top.path());
      continue;
    }
    if (name.rfind(kClassPrefix, 0) != 0 || !top.is_directory(e2)) continue;
    const std::optional<RetentionClass> cls = opt_.retention.find(name.substr(kClassPrefix.size()));
    if (!cls) {
      log_warn("kv store: " + top.path().string() + " names no configured retention class (" +
               opt_.retention.names() + "); its objects are left there and not used");
      continue;
    }
    for (const auto& shard : fs::directory_iterator(top.path(), e2))
      scan_shard(shard.path(), *cls, false);
  }
  if (ec) return io_error("cannot read " + opt_.dir + ": " + ec.message());
  for (const fs::path& p : legacy) scan_shard(p, opt_.retention.default_class(), true);
  // Oldest use first, so that equal expiries keep their order of use.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.last_use_ms < b.last_use_ms; });
  std::lock_guard<std::mutex> lock(mu_);
  for (const Found& f : found) {
    auto it = index_.find(f.key);
    if (it != index_.end()) {
      // In two classes (a crash between a move's steps): the longer class keeps it.
      if (it->second.cls >= f.cls) {
        ::unlink(path_of(f.key, f.cls).c_str());
        continue;
      }
      ::unlink(path_of(f.key, it->second.cls).c_str());
    }
    index_put(f.key, f.bytes, f.cls, f.last_use_ms);
  }
  evict_over_budget(now_ms());
  return Status::ok();
}

void DiskStore::index_put(const StoreKey& key, int64_t bytes, RetentionClass cls,
                          int64_t last_use_ms) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    stats_.bytes -= it->second.bytes;
    expiry_.erase({it->second.expiry_ms, it->second.seq, key});
    index_.erase(it);
  }
  const int64_t expiry = last_use_ms + opt_.retention.ttl_ms(cls);
  const uint64_t seq = ++seq_;
  index_[key] = Entry{bytes, expiry, seq, cls};
  expiry_.insert({expiry, seq, key});
  stats_.bytes += bytes;
  stats_.objects = int64_t(index_.size());
}

void DiskStore::index_remove(StoreKey key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  const RetentionClass cls = it->second.cls;
  stats_.bytes -= it->second.bytes;
  expiry_.erase({it->second.expiry_ms, it->second.seq, key});
  index_.erase(it);
  stats_.objects = int64_t(index_.size());
  ::unlink(path_of(key, cls).c_str());
}

void DiskStore::remove_expired(int64_t now) {
  while (!expiry_.empty() && expiry_.begin()->expiry_ms <= now) {
    const StoreKey k = expiry_.begin()->key;
    ++stats_.expirations;
    ++stats_.classes[index_[k].cls].expirations;
    index_remove(k);
  }
}

void DiskStore::evict_over_budget(int64_t now) {
  remove_expired(now);
  while (stats_.bytes > opt_.budget_bytes && !expiry_.empty()) {
    const StoreKey k = expiry_.begin()->key;
    ++stats_.evictions;
    ++stats_.classes[index_[k].cls].evictions;
    index_remove(k);
  }
}

bool DiskStore::contains(const StoreKey& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      if (it->second.expiry_ms > now_ms()) return true;
      ++stats_.expirations;
      ++stats_.classes[it->second.cls].expirations;
      index_remove(key);
    }
  }
  return writes_->pending(key);
}

Result<std::string> DiskStore::get(const StoreKey& key, RetentionClass cls) {
  const auto start = std::chrono::steady_clock::now();
  cls = opt_.retention.resolve(cls);
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = now_ms();
    auto it = index_.find(key);
    if (it != index_.end() && it->second.expiry_ms <= now) {
      ++stats_.expirations;
      ++stats_.classes[it->second.cls].expirations;
      index_remove(key);
      it = index_.end();
    }
    if (it == index_.end()) {
      ++stats_.misses;
      ++stats_.classes[cls].misses;
      stats_.classes[cls].read_seconds.observe(seconds_since(start));
      return not_found("no KV object " + key.hex());
    }
    // The hit refreshes the object: last use now, in the longer of its class and the
    // reader's. The file says so too, for the index a restart rebuilds.
    Entry e = it->second;
    path = path_of(key, e.cls);
    if (cls > e.cls) {
      const std::string to = path_of(key, cls);
      std::error_code ec;
      fs::create_directories(fs::path(to).parent_path(), ec);
      if (::rename(path.c_str(), to.c_str()) == 0) {
        path = to;
        e.cls = cls;
      }
    }
    set_last_use(path, now);
    index_put(key, e.bytes, e.cls, now);
  }
  Result<std::string> r = read_all(path, opt_.max_object_bytes);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.classes[cls].read_seconds.observe(seconds_since(start));
  if (!r.is_ok()) {
    ++stats_.misses;
    ++stats_.classes[cls].misses;
    // Removed behind our back (not moved into another class meanwhile): forget it. Not an
    // object file at all: remove it too (a miss, and the block is written again).
    const StatusCode code = r.status().code();
    if (code == StatusCode::kNotFound || code == StatusCode::kCorrupt) {
      auto it = index_.find(key);
      if (it != index_.end() && path_of(key, it->second.cls) == path) {
        if (code == StatusCode::kCorrupt) {
          log_warn("kv store: " + r.status().message() + "; removed");
          ++stats_.erased;
        }
        index_remove(key);
      }
    }
    return r.status();
  }
  ++stats_.hits;
  ++stats_.classes[cls].hits;
  stats_.bytes_read += int64_t(r->size());
  return r;
}

bool DiskStore::put(const StoreKey& key, std::string value, RetentionClass cls) {
  if (int64_t(value.size()) > opt_.budget_bytes) {  // could never be kept
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.dropped_writes;
    return false;
  }
  return writes_->push(key, std::move(value), opt_.retention.resolve(cls));
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
  w.add_to(&s);
  return s;
}

Status DiskStore::write_object(const StoreKey& key, const std::string& value, RetentionClass cls) {
  cls = opt_.retention.resolve(cls);
  {
    // A re-put keeps the longer class.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) cls = std::max(cls, it->second.cls);
  }
  const int64_t now = now_ms();
  const std::string final_path = path_of(key, cls);
  const std::string tmp =
      opt_.dir + "/tmp/" + key.hex() + "." + std::to_string(++tmp_counter_) + ".tmp";
  Status st = Status::ok();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT) {  // the directory was removed: make it again
    std::error_code ec;
    fs::create_directories(opt_.dir + "/tmp", ec);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (fd < 0) {
    st = io_error(tmp + ": " + std::strerror(errno));
  } else {
    st = write_all(fd, value);
    // The last use is the clock's now (the rename keeps it).
    const timespec t[2] = {{0, UTIME_OMIT}, to_timespec(now)};
    if (st.is_ok() && ::futimens(fd, t) != 0) st = io_error(tmp + ": " + std::strerror(errno));
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
  if (writes_failing_) log_warn("kv store: disk writes work again");
  writes_failing_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end() && it->second.cls != cls) {
    // Held in another class: moved by a hit of a longer class meanwhile (the object then
    // goes there, replacing the same bytes) or written before in a shorter one (removed).
    if (it->second.cls > cls) {
      const RetentionClass to = it->second.cls;
      if (::rename(final_path.c_str(), path_of(key, to).c_str()) == 0) cls = to;
    } else {
      ::unlink(path_of(key, it->second.cls).c_str());
    }
  }
  index_put(key, int64_t(value.size()), cls, now);
  stats_.classes[cls].bytes_written += int64_t(value.size());
  evict_over_budget(now);
  return Status::ok();
}

}  // namespace fathom::kv
