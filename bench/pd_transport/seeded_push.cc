#include "seeded_push.h"

#include <cstring>

#include "kv/block_format.h"

namespace fathom::bench {
namespace {

// splitmix64: a fast, well-mixed generator; only reproducibility matters here.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

std::string random_bytes(SplitMix& g, size_t n) {
  std::string out(n, '\0');
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = g.next();
    std::memcpy(out.data() + i, &v, 8);
  }
  if (i < n) {
    const uint64_t v = g.next();
    std::memcpy(out.data() + i, &v, n - i);
  }
  return out;
}

std::string make_object(SplitMix& g, const kv::ObjectHeader& h, uint64_t object_bytes) {
  const std::string data = random_bytes(g, size_t(object_bytes - kMinObjectBytes));
  kv::ObjectWriter w;
  w.add(/*tag=*/1, /*rows=*/uint32_t(h.block_tokens), data.data(), data.size());
  return w.finish(h);
}

}  // namespace

Result<SeededPush> make_seeded_push(uint64_t stream_bytes, uint64_t block_bytes,
                                    uint64_t window_bytes, uint64_t seed) {
  if (block_bytes < kMinObjectBytes || window_bytes < kMinObjectBytes)
    return invalid_argument("objects must be at least " + std::to_string(kMinObjectBytes) +
                            " bytes");
  if (block_bytes > kv::kMaxFramePayload)
    return invalid_argument("a block object larger than a frame may carry");
  // Frames: one per object (kFrameHeaderBytes each) and the end frame (its header + 16).
  const uint64_t end_frame = kv::kFrameHeaderBytes + 16;
  const uint64_t fixed = end_frame + kv::kFrameHeaderBytes + window_bytes;
  const uint64_t per_block = kv::kFrameHeaderBytes + block_bytes;
  if (stream_bytes < fixed + per_block)
    return invalid_argument("a push of " + std::to_string(stream_bytes) +
                            " bytes cannot hold one block of " + std::to_string(block_bytes) +
                            " and a window of " + std::to_string(window_bytes) + " bytes");
  const uint64_t n = (stream_bytes - fixed) / per_block;
  const uint64_t window = stream_bytes - end_frame - kv::kFrameHeaderBytes - n * per_block;
  if (window > kv::kMaxFramePayload)
    return invalid_argument("the window object would exceed a frame's limit");
  if (n > (uint64_t(1) << 31)) return invalid_argument("too many blocks");

  SplitMix g{seed};
  SeededPush p;
  p.expect.model = kv::Fingerprint{g.next(), g.next()};
  p.expect.block_tokens = 128;
  p.expect.chain.resize(size_t(n));
  for (uint64_t& k : p.expect.chain) k = g.next();
  p.blocks.reserve(size_t(n));
  kv::ObjectHeader h;
  h.block_tokens = p.expect.block_tokens;
  h.model = p.expect.model;
  for (uint64_t i = 0; i < n; ++i) {
    h.kind = kv::ObjectKind::kBlock;
    h.key = p.expect.chain[size_t(i)];
    h.parent = i > 0 ? p.expect.chain[size_t(i - 1)] : 0;
    h.index = uint32_t(i + 1);
    p.blocks.push_back(make_object(g, h, block_bytes));
  }
  h.kind = kv::ObjectKind::kWindow;  // at block n: its key, parent and index
  p.window = make_object(g, h, window);
  p.stream = kv::encode_push(p.blocks, p.window);
  if (p.stream.size() != stream_bytes)
    return internal_error("built a push of " + std::to_string(p.stream.size()) + " bytes, not " +
                          std::to_string(stream_bytes));
  p.expect.max_stream_bytes = stream_bytes;
  return p;
}

Status compare_push(const kv::VerifiedPush& got, const SeededPush& want) {
  if (got.blocks.size() != want.blocks.size())
    return corrupt(std::to_string(got.blocks.size()) + " blocks arrived, not " +
                   std::to_string(want.blocks.size()));
  for (size_t i = 0; i < want.blocks.size(); ++i)
    if (got.blocks[i] != want.blocks[i])
      return corrupt("block " + std::to_string(i + 1) + " differs from the one sent");
  if (got.window != want.window || got.window_block != want.blocks.size())
    return corrupt("the window object differs from the one sent");
  return Status::ok();
}

}  // namespace fathom::bench
