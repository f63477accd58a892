// The KV store's view of a V4.1 block: the model fingerprint, and cached blocks and their
// window side objects to and from kv/block_format.h objects (section tags in model/v41.h).
#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>

#include "model/kv_object_sizes.h"
#include "model/layout.h"
#include "model/v41_internal.h"

namespace fathom::model {
namespace {

constexpr uint32_t kTokens = 0x01, kPublished = 0x02, kEntries = 0x100;
constexpr uint32_t kWindowState = 0x10, kWindowFloor = 0x11, kMainHidden = 0x12, kRing = 0x200;

// Bumped when what a block holds, or how KV is computed, changes meaning.
constexpr std::string_view kKvLayout = "fathom-v41-kv-1";

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::ostringstream o;
  o << f.rdbuf();
  return o.str();
}

template <typename T>
void put_values(kv::ObjectWriter& w, uint32_t tag, const std::vector<T>& v) {
  w.add(tag, uint32_t(v.size()), v.data(), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> values(const kv::Section& s) {
  std::vector<T> v(s.bytes.size() / sizeof(T));
  std::memcpy(v.data(), s.bytes.data(), v.size() * sizeof(T));
  return v;
}

Status bad_section(const std::string& what) {
  return kv::block_fault(kv::BlockFault::kBadSection, what);
}

// The section `tag` with exactly `rows` rows of `row_bytes` each.
Result<const kv::Section*> section(const kv::DecodedObject& d, uint32_t tag, int64_t rows,
                                   int64_t row_bytes) {
  const kv::Section* s = d.find(tag);
  if (s == nullptr) return bad_section("section " + std::to_string(tag) + " is missing");
  if (int64_t(s->rows) != rows || int64_t(s->bytes.size()) != rows * row_bytes)
    return bad_section("section " + std::to_string(tag) + " has " + std::to_string(s->rows) +
                       " rows in " + std::to_string(s->bytes.size()) + " bytes, expected " +
                       std::to_string(rows) + " x " + std::to_string(row_bytes));
  return s;
}

static_assert(std::endian::native == std::endian::little,
              "the KV store's objects are little-endian and copied as they are");

}  // namespace

std::vector<KvSectionShape> kv_block_sections(const ModelConfig& c, int64_t block_tokens) {
  std::vector<KvSectionShape> out = {{kTokens, block_tokens, int64_t(sizeof(int32_t))},
                                     {kPublished, 1, int64_t(sizeof(int32_t))}};
  const int64_t width = c.head_dim + c.index_head_dim;
  for (int64_t l : c.kv_source_layers)
    out.push_back({kEntries + uint32_t(l), block_tokens / c.compress_ratios[size_t(l)],
                   width * int64_t(sizeof(float))});
  return out;
}

std::vector<KvSectionShape> kv_window_sections(const ModelConfig& c, int64_t position) {
  const int64_t in = c.dim * int64_t(c.dspark_target_layer_ids.size());
  std::vector<KvSectionShape> out = {
      {kWindowState, 2, int64_t(sizeof(int64_t))},
      {kWindowFloor, c.n_layers + c.n_mtp_layers, int64_t(sizeof(int64_t))},
      {kMainHidden, in > 0 ? std::min(position, c.window_size) : 0, in * int64_t(sizeof(float))}};
  for (int64_t l = 0; l < c.n_layers; ++l)
    out.push_back({kRing + uint32_t(l), c.window_size, c.head_dim * int64_t(sizeof(float))});
  return out;
}

int64_t kv_object_bytes(const std::vector<KvSectionShape>& sections) {
  std::vector<int64_t> bytes;
  for (const KvSectionShape& s : sections) bytes.push_back(s.bytes());
  return kv::encoded_object_bytes(bytes);
}

KvStoreSizes kv_store_sizes(const ModelConfig& c, int64_t block_tokens) {
  KvStoreSizes z;
  z.block_tokens = block_tokens;
  const std::vector<KvSectionShape> block = kv_block_sections(c, block_tokens);
  z.block_bytes = kv_object_bytes(block);
  for (const KvSectionShape& s : block)
    if (s.tag >= kEntries) z.block_source_bytes.push_back({int64_t(s.tag - kEntries), s.bytes()});
  z.window_bytes = kv_object_bytes(kv_window_sections(c, std::max(c.window_size, block_tokens)));
  const ModelSizes m = model_sizes(c);
  for (int64_t l : c.kv_source_layers) {
    const int64_t b = block_tokens / c.compress_ratios[size_t(l)] *
                      (m.compressed_entry_bytes + m.indexer_entry_bytes);
    z.packed_block_source_bytes.push_back({l, b});
    z.packed_block_bytes += b;
  }
  z.encoder_layers = c.kv_source_layers.empty() ? c.n_layers : c.kv_source_layers.back();
  z.window_entries = c.window_size + c.dspark_block_size + 1;
  z.packed_window_bytes = z.encoder_layers * z.window_entries * m.swa_entry_bytes;
  z.hit_reserve_tokens = c.window_size + c.dspark_block_size + 1;
  return z;
}

kv::Fingerprint model_fingerprint(const std::string& dir, const ModelWeights& w,
                                  const ModelOptions& options, const std::string& engram_source) {
  kv::FingerprintBuilder fb;
  fb.add(kKvLayout);
  fb.add(file_bytes(dir + "/config.json"));
  fb.add(file_bytes(dir + "/inference/config.json"));
  fb.add(engram_source.empty() ? std::string() : file_bytes(engram_source));
  fb.add_u64(uint64_t(options.numerics == Numerics::kFast));
  fb.add_u64(uint64_t(options.own_index_keys));
  // Every tensor's identity and a sample of its bytes: enough to tell checkpoints apart
  // (random ones of the same shapes included) without reading the weights.
  for (const auto& [name, t] : w.ck->tensors()) {
    fb.add(name);
    fb.add_u64(uint64_t(t->dtype));
    for (int64_t d : t->shape) fb.add_u64(uint64_t(d));
    fb.add_u64(t->nbytes);
    const std::string_view all(reinterpret_cast<const char*>(t->data), t->nbytes);
    const size_t n = std::min<size_t>(64, t->nbytes);
    for (size_t at : {size_t(0), t->nbytes / 3, 2 * t->nbytes / 3, t->nbytes - n})
      fb.add(all.substr(std::min(at, t->nbytes - n), n));
  }
  return fb.finish();
}

std::string V41Model::encode_block(const KvBlock& b, const kv::ObjectHeader& h,
                                   std::span<const int32_t> ids) const {
  kv::ObjectWriter w;
  w.add(kTokens, uint32_t(ids.size()), ids.data(), ids.size() * sizeof(int32_t));
  const int32_t published = b.published_keys;
  w.add(kPublished, 1, &published, sizeof published);
  // The entry sections' shapes are the ones kv_store_sizes() reports.
  for (const KvSectionShape& s : kv_block_sections(w_->cfg, h.block_tokens)) {
    if (s.tag < kEntries) continue;
    const std::vector<kv::PageRef>& pages = b.pages[size_t(s.tag - kEntries)];
    const int64_t per_page = pages.empty() ? 0 : s.rows / int64_t(pages.size());
    std::string data;
    data.reserve(size_t(s.bytes()));
    for (const kv::PageRef& p : pages)
      data.append(reinterpret_cast<const char*>(p.data()), size_t(per_page * s.row_bytes));
    w.add(s.tag, uint32_t(s.rows), data.data(), data.size());
  }
  return w.finish(h);
}

Result<std::string> V41Model::encode_window(const KvBlock& b, const kv::ObjectHeader& h) const {
  if (!b.swa) return invalid_argument("the block has no window side object");
  const ModelConfig& c = w_->cfg;
  const SequenceState& s = *b.swa;
  kv::ObjectWriter w;
  put_values(w, kWindowState, std::vector<int64_t>{s.pos, s.main_hidden_pos});
  put_values(w, kWindowFloor, s.window_floor);
  const int64_t in = c.dim * int64_t(c.dspark_target_layer_ids.size());
  w.add(kMainHidden, uint32_t(in > 0 ? int64_t(s.main_hidden.size()) / in : 0),
        s.main_hidden.data(), s.main_hidden.size() * sizeof(float));
  for (size_t i = 0; i < s.ring.size(); ++i) {
    const kv::PagedRows& r = s.ring[i];
    if (!r.initialised()) continue;
    std::string data;
    data.reserve(size_t(r.size() * c.head_dim) * sizeof(float));
    for (int64_t row = 0; row < r.size(); ++row)
      data.append(reinterpret_cast<const char*>(r.row(row)), size_t(c.head_dim) * sizeof(float));
    w.add(kRing + uint32_t(i), uint32_t(r.size()), data.data(), data.size());
  }
  return w.finish(h);
}

Result<KvBlock> V41Model::decode_block(std::string_view bytes, const kv::ObjectHeader& expect,
                                       std::span<const int32_t> ids, kv::PagePool* pool) const {
  const ModelConfig& c = w_->cfg;
  FATHOM_ASSIGN_OR_RETURN(kv::DecodedObject d, kv::decode_object(bytes, expect));
  const int64_t B = expect.block_tokens, width = c.head_dim + c.index_head_dim;
  if (int64_t(ids.size()) != B) return invalid_argument("a block's ids must fill the block");
  if (d.sections.size() != 2 + c.kv_source_layers.size())
    return bad_section(std::to_string(d.sections.size()) + " sections");
  FATHOM_ASSIGN_OR_RETURN(const kv::Section* tokens, section(d, kTokens, B, sizeof(int32_t)));
  if (std::memcmp(tokens->bytes.data(), ids.data(), ids.size_bytes()) != 0)
    return kv::block_fault(kv::BlockFault::kWrongTokens, "the block holds other token ids");
  FATHOM_ASSIGN_OR_RETURN(const kv::Section* published, section(d, kPublished, 1, 4));
  KvBlock out;
  out.pages.resize(w_->blocks.size());
  out.published_keys = values<int32_t>(*published)[0];
  if (out.published_keys < -1 || out.published_keys >= int64_t(w_->blocks.size()))
    return bad_section("published key slot " + std::to_string(out.published_keys));
  const int64_t per_page = pool->page_bytes() / int64_t(sizeof(float)) / width;
  for (const KvSectionShape& shape : kv_block_sections(c, B)) {
    if (shape.tag < kEntries) continue;
    const int64_t l = shape.tag - kEntries, rows = shape.rows;
    FATHOM_ASSIGN_OR_RETURN(const kv::Section* e, section(d, shape.tag, rows, shape.row_bytes));
    if (per_page < 1 || rows % per_page != 0)
      return invalid_argument("the pool's pages do not hold whole blocks");
    for (int64_t first = 0; first < rows; first += per_page) {
      FATHOM_ASSIGN_OR_RETURN(kv::PageRef p, pool->allocate());
      std::memcpy(p.data(), e->bytes.data() + size_t(first * width) * sizeof(float),
                  size_t(per_page * width) * sizeof(float));
      out.pages[size_t(l)].push_back(std::move(p));
      out.bytes += pool->page_bytes();
    }
  }
  return out;
}

Status V41Model::decode_window(std::string_view bytes, const kv::ObjectHeader& expect,
                               kv::PagePool* pool, KvBlock* block) const {
  const ModelConfig& c = w_->cfg;
  FATHOM_ASSIGN_OR_RETURN(kv::DecodedObject d, kv::decode_object(bytes, expect));
  const int64_t n_blocks = int64_t(w_->blocks.size());
  const int64_t P = int64_t(expect.index) * int64_t(expect.block_tokens);
  FATHOM_ASSIGN_OR_RETURN(const kv::Section* state, section(d, kWindowState, 2, 8));
  FATHOM_ASSIGN_OR_RETURN(const kv::Section* floor, section(d, kWindowFloor, n_blocks, 8));
  auto swa = std::unique_ptr<SequenceState>(new SequenceState());
  swa->pool = pool;
  const std::vector<int64_t> st = values<int64_t>(*state);
  swa->pos = st[0];
  swa->main_hidden_pos = st[1];
  swa->window_floor = values<int64_t>(*floor);
  if (swa->pos != P) return bad_section("window state at " + std::to_string(swa->pos));
  for (int64_t f : swa->window_floor)
    if (f < 0 || f > P) return bad_section("window floor " + std::to_string(f));
  const int64_t in = c.dim * int64_t(c.dspark_target_layer_ids.size());
  const kv::Section* mh = d.find(kMainHidden);
  if (mh == nullptr) return bad_section("no DSpark input rows");
  const int64_t mh_rows = mh->rows;
  if (in == 0 ? mh->bytes.size() != 0 : int64_t(mh->bytes.size()) != mh_rows * in * 4)
    return bad_section("DSpark input rows of the wrong size");
  if (swa->main_hidden_pos < 0 || swa->main_hidden_pos + (in > 0 ? mh_rows : 0) != P)
    return bad_section("DSpark input rows at the wrong position");
  swa->main_hidden = values<float>(*mh);
  size_t expected_sections = 3;
  int64_t ring_bytes = 0;
  swa->ring.resize(size_t(n_blocks));
  for (int64_t i = 0; i < n_blocks; ++i) {
    const kv::Section* r = d.find(kRing + uint32_t(i));
    if (r == nullptr) continue;
    ++expected_sections;
    FATHOM_ASSIGN_OR_RETURN(r, section(d, kRing + uint32_t(i), c.window_size, c.head_dim * 4));
    kv::PagedRows ring(pool, c.head_dim);
    FATHOM_RETURN_IF_ERROR(ring.grow(c.window_size));
    for (int64_t row = 0; row < c.window_size; ++row)
      std::memcpy(ring.row(row), r->bytes.data() + size_t(row * c.head_dim) * sizeof(float),
                  size_t(c.head_dim) * sizeof(float));
    ring_bytes += ring.bytes();
    swa->ring[size_t(i)] = std::move(ring);
  }
  if (d.sections.size() != expected_sections)
    return bad_section(std::to_string(d.sections.size()) + " sections");
  block->bytes += ring_bytes + int64_t(swa->main_hidden.size() * sizeof(float));
  block->swa = std::move(swa);
  return Status::ok();
}

}  // namespace fathom::model
