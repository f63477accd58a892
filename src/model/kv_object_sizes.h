// The KV store's objects for a V4.1 config, without a model: the sections V41Model's
// encode_block() and encode_window() write (kv/block_format.h; the encoders take their shapes
// from here), their encoded lengths, and what DeepSeek's packed layout (FP4 compressed KV,
// MXFP4 index keys, FP8 window entries; shared/spec/model-v41.md §5, serving.md §1) would
// store for the same tokens. `fathom inspect` prints them. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace fathom::model {

// One section of an object: its tag, its rows and the bytes of one row.
struct KvSectionShape {
  uint32_t tag = 0;
  int64_t rows = 0, row_bytes = 0;
  int64_t bytes() const { return rows * row_bytes; }
};

// A block object of `block_tokens` tokens: 0x01 token ids, 0x02 the published index-key slot,
// 0x100 + l the compressed entries and index keys of kv source l (float32).
std::vector<KvSectionShape> kv_block_sections(const ModelConfig& c, int64_t block_tokens);
// The window side object at a prompt boundary at `position` (> 0): 0x10 the positions, 0x11
// the window floors, 0x12 the DSpark input rows a prompt leaves (min(position, window)), and
// 0x200 + i the window ring of every backbone layer (a prompt fills no DSpark stage's ring).
std::vector<KvSectionShape> kv_window_sections(const ModelConfig& c, int64_t position);
// The encoded length of an object with these sections.
int64_t kv_object_bytes(const std::vector<KvSectionShape>& sections);

struct KvStoreSizes {
  int64_t block_tokens = 0;
  // As Fathom stores them (float32 sections, kv/block_format.h envelope).
  int64_t block_bytes = 0;
  std::vector<std::pair<int64_t, int64_t>> block_source_bytes;  // (layer, section bytes)
  int64_t window_bytes = 0;  // at a boundary at or past the window
  // DeepSeek's layout: per kv source, block_tokens / ratio entries of compressed KV + index key;
  // the window state of the encoder layers (those below the last kv source) over the window
  // plus the speculative slots.
  int64_t packed_block_bytes = 0;
  std::vector<std::pair<int64_t, int64_t>> packed_block_source_bytes;
  int64_t encoder_layers = 0, window_entries = 0;
  int64_t packed_window_bytes = 0;
  // A hit covers at most L - hit_reserve_tokens tokens of an L-token prompt (window +
  // DSpark block + 1: the tail the decoder replays).
  int64_t hit_reserve_tokens = 0;
};
KvStoreSizes kv_store_sizes(const ModelConfig& c, int64_t block_tokens = 128);

}  // namespace fathom::model
