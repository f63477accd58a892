// Random V4.1 checkpoints in the official layout (config.json + model.safetensors with the
// official tensor names, dtypes and quantisation formats, plus engram_tables.json), for tests,
// demos and benchmarks: `tiny` has the golden checkpoint's shapes, `demo` the same shapes
// with the full 129,280-token vocabulary (so it runs with the real DeepSeek tokenizer),
// `small` is sized for kernel benchmarks (about 1.6 GB, 32k vocabulary) and `medium` is the
// benchmark model the server can serve (small's geometry, the full vocabulary, 32 experts:
// about 2.4 GB). Weights follow the golden data's
// initialisation (Gaussian masters scaled per role, quantised with power-of-two block
// scales); the same preset and seed give the same bytes. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "model/config.h"

namespace fathom::model {

// The configuration of a named preset: tiny, demo, small or medium.
Result<ModelConfig> preset_config(const std::string& name);

// The flat (inference/config.json) spelling of a configuration.
std::string config_to_json(const ModelConfig& c);

// Writes DIR/config.json, DIR/model.safetensors and DIR/engram_tables.json (the Engram
// compressed-token map is a seeded random map like the golden one, not derived from a
// tokenizer). engram_compressed_vocab_size and engram_num_embeddings are derived here and
// override the given values. `progress(done_bytes, total_bytes)` is called as tensors are
// written (may be empty).
Status write_random_checkpoint(ModelConfig c, uint64_t seed, const std::string& dir,
                               const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace fathom::model
