// The DeepSeek-V4.1 checkpoint layout: every tensor the official checkpoint holds for a
// given config (name, dtype, shape), tagged with the part of the model it belongs to, and
// the checks that bind a checkpoint to it. Also the size arithmetic `fathom inspect` prints
// (parameters per part, KV bytes per token, SWA state per sequence). Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"

namespace fathom::model {

enum class Part {
  kEmbedding,
  kHead,
  kAttention,
  kRoutedExperts,
  kSharedExperts,
  kRouter,
  kMhc,
  kNorm,
  kEngramTables,
  kEngramProjections,
  kDSpark
};
const char* part_name(Part p);

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Part part;
  bool is_scale = false;  // a quantisation scale, not a parameter
  // Logical parameters (FP4: two per stored byte); 0 for scales.
  int64_t parameters() const;
};

std::vector<TensorSpec> v41_layout(const ModelConfig& c);

// The tensor `name`, present with this dtype and shape; else kNotFound / kCorrupt naming it.
Result<const TensorInfo*> find_tensor(const Checkpoint& ck, const std::string& name, DType dtype,
                                      const std::vector<int64_t>& shape);

// Every tensor of the layout present with its dtype and shape, and nothing else. The error
// names the first offending tensor.
Status check_checkpoint(const Checkpoint& ck, const std::vector<TensorSpec>& layout);

struct ModelSizes {
  int64_t params[11] = {};  // by Part
  int64_t bytes[11] = {};
  int64_t backbone_params = 0;  // embedding + head + the n_layers blocks (no DSpark, no Engram)
  int64_t dspark_params = 0;
  int64_t engram_params = 0;  // tables + projections
  int64_t engram_table_params = 0;
  int64_t total_bytes = 0;
  // Per token of context: compressed KV + indexer keys, summed over the kv-source layers.
  double global_kv_bytes_per_token = 0;
  int64_t swa_entry_bytes = 0;         // one SWA ring entry (FP8 latent + UE8M0 scales)
  int64_t swa_bytes_per_sequence = 0;  // window x (layers + DSpark stages) x entry
  int64_t compressed_entry_bytes = 0, indexer_entry_bytes = 0;
};

ModelSizes model_sizes(const ModelConfig& c);

}  // namespace fathom::model
