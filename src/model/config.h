// ModelConfig: a DeepSeek-V4.1 configuration, read from either published layout — the root
// config.json (Transformers layout: `text_config` + `quantization_config`) or the flat
// inference/config.json (the reference's names) — with every field validated. A model
// directory with both must have them agree. Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace fathom::model {

struct ModelConfig {
  int64_t vocab_size = 0, dim = 0, n_layers = 0, n_mtp_layers = 0;
  int64_t n_heads = 0, head_dim = 0, rope_head_dim = 0, q_lora_rank = 0;
  int64_t o_groups = 0, o_lora_rank = 0;
  int64_t moe_inter_dim = 0, n_routed_experts = 0, n_shared_experts = 0, n_activated_experts = 0;
  std::string score_func;
  double route_scale = 1.0, swiglu_limit = 0, norm_eps = 1e-20;
  double rope_theta = 10000, compress_rope_theta = 160000, rope_factor = 1, beta_fast = 32,
         beta_slow = 1;
  int64_t original_seq_len = 0;
  int64_t window_size = 0;
  std::vector<int64_t> compress_ratios;  // n_layers + n_mtp_layers entries
  std::vector<int64_t> kv_source_layers, index_source_layers;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  int64_t candidate_source_layer = -1, candidate_topk_blocks = 0, candidate_block_size = 0;
  int64_t hc_mult = 0, hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;
  std::vector<int64_t> engram_layer_ids, engram_num_embeddings;
  int64_t engram_max_ngram_size = 0, engram_vocab_size = 0, engram_n_heads = 0, engram_head_dim = 0;
  int64_t engram_pad_id = 0, engram_compressed_vocab_size = 0;
  int64_t dspark_block_size = 0, dspark_noise_token_id = 0, dspark_markov_rank = 0;
  int64_t dspark_n_routed_experts = 0, dspark_n_activated_experts = 0;
  std::vector<int64_t> dspark_target_layer_ids;
  // Fathom's own optional key: the draft stages' confidence logits are divided by these, one
  // per draft position (the sequential temperature scaling of train/train_dspark.py); empty
  // = 1.
  std::vector<double> dspark_confidence_temperatures;
  int64_t image_token_id = -1, vision_n_layers = 0;
  std::string dtype = "fp8", expert_dtype = "fp4";
  int64_t weight_block = 32;

  bool operator==(const ModelConfig&) const = default;
};

// Parses one config.json (either layout) and validates it.
Result<ModelConfig> parse_model_config(std::string_view json);
Result<ModelConfig> load_model_config_file(const std::string& path);
// Reads DIR/config.json and/or DIR/inference/config.json; with both, they must agree.
Result<ModelConfig> load_model_config_dir(const std::string& dir);

}  // namespace fathom::model
