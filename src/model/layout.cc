#include "model/layout.h"

#include <algorithm>
#include <set>

namespace fathom::model {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

struct Builder {
  const ModelConfig& c;
  std::vector<TensorSpec> out;

  void add(std::string name, DType dt, std::vector<int64_t> shape, Part p, bool scale = false) {
    out.push_back({std::move(name), dt, std::move(shape), p, scale});
  }
  // FP8 weight with 32x32 UE8M0 block scales.
  void fp8(const std::string& name, int64_t rows, int64_t cols, Part p) {
    add(name + ".weight", DType::kF8E4M3, {rows, cols}, p);
    add(name + ".scale", DType::kF8E8M0,
        {ceil_div(rows, c.weight_block), ceil_div(cols, c.weight_block)}, p, true);
  }
  // FP4 (E2M1 pairs in I8) weight with one UE8M0 scale per 32 along K.
  void fp4(const std::string& name, int64_t rows, int64_t cols, Part p) {
    add(name + ".weight", DType::kI8, {rows, cols / 2}, p);
    add(name + ".scale", DType::kF8E8M0, {rows, ceil_div(cols, 32)}, p, true);
  }
  void bf16(const std::string& name, std::vector<int64_t> shape, Part p) {
    add(name, DType::kBF16, std::move(shape), p);
  }
  void f32(const std::string& name, std::vector<int64_t> shape, Part p) {
    add(name, DType::kF32, std::move(shape), p);
  }

  void block(const std::string& pre, int64_t layer, int64_t experts, Part attn, Part moe,
             Part shared, Part router, Part mhc, Part norm) {
    const int64_t D = c.dim, hd = c.head_dim, qr = c.q_lora_rank, H = c.n_heads;
    const int64_t ratio = c.compress_ratios[size_t(layer)];
    fp8(pre + "attn.wq_a", qr, D, attn);
    bf16(pre + "attn.q_norm.weight", {qr}, attn);
    fp8(pre + "attn.wq_b", H * hd, qr, attn);
    fp8(pre + "attn.wkv", hd, D, attn);
    bf16(pre + "attn.kv_norm.weight", {hd}, attn);
    fp8(pre + "attn.wo_a", c.o_groups * c.o_lora_rank, H * hd / c.o_groups, attn);
    fp8(pre + "attn.wo_b", D, c.o_groups * c.o_lora_rank, attn);
    f32(pre + "attn.attn_sink", {H}, attn);
    bool backbone = layer < c.n_layers;
    if (backbone && contains(c.kv_source_layers, layer)) {
      bf16(pre + "attn.compressor.wkv.weight", {hd, D}, attn);
      if (ratio == 2) bf16(pre + "attn.compressor.wgate.weight", {hd, D}, attn);
      bf16(pre + "attn.compressor.norm.weight", {hd}, attn);
      bf16(pre + "attn.indexer.wk.weight", {c.index_head_dim, hd}, attn);
      bf16(pre + "attn.indexer.k_norm.weight", {c.index_head_dim}, attn);
    }
    if (backbone && contains(c.index_source_layers, layer)) {
      fp8(pre + "attn.indexer.wq_b", c.index_n_heads * c.index_head_dim, qr, attn);
      bf16(pre + "attn.indexer.weights_proj.weight", {c.index_n_heads, D}, attn);
    }
    bf16(pre + "attn_norm.weight", {D}, norm);
    bf16(pre + "ffn_norm.weight", {D}, norm);
    const int64_t mix = (2 + c.hc_mult) * c.hc_mult;
    for (const char* s : {"attn", "ffn"}) {
      f32(pre + "hc_" + s + "_fn", {mix, c.hc_mult * D}, mhc);
      f32(pre + "hc_" + s + "_base", {mix}, mhc);
      f32(pre + "hc_" + s + "_scale", {3}, mhc);
    }
    bf16(pre + "ffn.gate.weight", {experts, D}, router);
    f32(pre + "ffn.gate.bias", {experts}, router);
    f32(pre + "ffn.gate.bias_vl", {experts}, router);
    for (int64_t e = 0; e < experts; ++e) {
      std::string ep = pre + "ffn.experts." + std::to_string(e) + ".";
      fp4(ep + "w1", c.moe_inter_dim, D, moe);
      fp4(ep + "w2", D, c.moe_inter_dim, moe);
      fp4(ep + "w3", c.moe_inter_dim, D, moe);
    }
    if (c.n_shared_experts > 0) {
      const int64_t si = c.moe_inter_dim * c.n_shared_experts;
      fp8(pre + "ffn.shared_experts.w1", si, D, shared);
      fp8(pre + "ffn.shared_experts.w2", D, si, shared);
      fp8(pre + "ffn.shared_experts.w3", si, D, shared);
    }
  }
};

}  // namespace

const char* part_name(Part p) {
  static const char* const kNames[] = {
      "embedding", "head",  "attention",     "routed_experts",     "shared_experts", "router",
      "mhc",       "norms", "engram_tables", "engram_projections", "dspark"};
  return kNames[int(p)];
}

int64_t TensorSpec::parameters() const {
  if (is_scale) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return dtype == DType::kI8 ? 2 * n : n;
}

std::vector<TensorSpec> v41_layout(const ModelConfig& c) {
  Builder b{c, {}};
  const int64_t D = c.dim;
  b.bf16("embed.weight", {c.vocab_size, D}, Part::kEmbedding);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    std::string pre = "layers." + std::to_string(l) + ".";
    b.block(pre, l, c.n_routed_experts, Part::kAttention, Part::kRoutedExperts,
            Part::kSharedExperts, Part::kRouter, Part::kMhc, Part::kNorm);
    for (size_t k = 0; k < c.engram_layer_ids.size(); ++k) {
      if (c.engram_layer_ids[k] != l) continue;
      const int64_t ehd = c.engram_head_dim;
      b.add(pre + "engram.embed.weight", DType::kF8E4M3, {c.engram_num_embeddings[k], ehd},
            Part::kEngramTables);
      b.add(pre + "engram.embed.scale", DType::kF8E8M0,
            {c.engram_num_embeddings[k], ceil_div(ehd, 32)}, Part::kEngramTables, true);
      b.fp8(pre + "engram.wkv", (c.hc_mult + 1) * D,
            (c.engram_max_ngram_size - 1) * c.engram_n_heads * ehd, Part::kEngramProjections);
      b.bf16(pre + "engram.q_weight", {c.hc_mult, D}, Part::kEngramProjections);
      b.bf16(pre + "engram.k_weight", {c.hc_mult, D}, Part::kEngramProjections);
    }
  }
  b.bf16("norm.weight", {D}, Part::kNorm);
  b.bf16("head.weight", {c.vocab_size, D}, Part::kHead);
  for (int64_t s = 0; s < c.n_mtp_layers; ++s) {
    std::string pre = "mtp." + std::to_string(s) + ".";
    b.block(pre, c.n_layers + s, c.dspark_n_routed_experts, Part::kDSpark, Part::kDSpark,
            Part::kDSpark, Part::kDSpark, Part::kDSpark, Part::kDSpark);
    if (s == 0) {
      b.bf16(pre + "embed.weight", {c.vocab_size, D}, Part::kDSpark);
      b.fp8(pre + "main_proj", D, int64_t(c.dspark_target_layer_ids.size()) * D, Part::kDSpark);
      b.bf16(pre + "main_norm.weight", {D}, Part::kDSpark);
    }
    if (s == c.n_mtp_layers - 1) {
      b.bf16(pre + "norm.weight", {D}, Part::kDSpark);
      b.bf16(pre + "head.weight", {c.vocab_size, D}, Part::kDSpark);
      b.bf16(pre + "markov_head.embed.weight", {c.vocab_size, c.dspark_markov_rank}, Part::kDSpark);
      b.bf16(pre + "markov_head.head.weight", {c.vocab_size, c.dspark_markov_rank}, Part::kDSpark);
      b.bf16(pre + "confidence_head.proj.weight", {1, D + c.dspark_markov_rank}, Part::kDSpark);
    }
  }
  return std::move(b.out);
}

Result<const TensorInfo*> find_tensor(const Checkpoint& ck, const std::string& name, DType dtype,
                                      const std::vector<int64_t>& shape) {
  const TensorInfo* t = ck.find(name);
  if (t == nullptr) return not_found("checkpoint is missing tensor '" + name + "'");
  if (t->dtype != dtype) {
    return corrupt("tensor '" + name + "' has dtype " + dtype_name(t->dtype) + ", expected " +
                   dtype_name(dtype));
  }
  if (t->shape != shape) {
    auto fmt = [](const std::vector<int64_t>& v) {
      std::string r = "[";
      for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
      return r + "]";
    };
    return corrupt("tensor '" + name + "' has shape " + fmt(t->shape) + ", expected " + fmt(shape) +
                   " (does config.json match the weights?)");
  }
  return t;
}

Status check_checkpoint(const Checkpoint& ck, const std::vector<TensorSpec>& layout) {
  std::set<std::string> expected;
  for (const TensorSpec& s : layout) {
    expected.insert(s.name);
    FATHOM_RETURN_IF_ERROR(find_tensor(ck, s.name, s.dtype, s.shape).status());
  }
  for (const auto& [name, t] : ck.tensors()) {
    if (!expected.count(name)) return corrupt("checkpoint has an unexpected tensor '" + name + "'");
  }
  return Status::ok();
}

ModelSizes model_sizes(const ModelConfig& c) {
  ModelSizes m;
  for (const TensorSpec& s : v41_layout(c)) {
    int64_t bytes = int64_t(dtype_size(s.dtype));
    for (int64_t d : s.shape) bytes *= d;
    m.params[int(s.part)] += s.parameters();
    m.bytes[int(s.part)] += bytes;
    m.total_bytes += bytes;
  }
  for (int p = 0; p <= int(Part::kNorm); ++p) m.backbone_params += m.params[p];
  m.dspark_params = m.params[int(Part::kDSpark)];
  m.engram_table_params = m.params[int(Part::kEngramTables)];
  m.engram_params = m.engram_table_params + m.params[int(Part::kEngramProjections)];
  // KV record formats (model-v41.md §5): SWA = FP8 latent + UE8M0 per 32; compressed = FP4
  // latent + E4M3 per 16; indexer K = MXFP4 + UE8M0 per 32.
  m.swa_entry_bytes = c.head_dim + c.head_dim / 32;
  m.compressed_entry_bytes = c.head_dim / 2 + c.head_dim / 16;
  m.indexer_entry_bytes = c.index_head_dim / 2 + c.index_head_dim / 32;
  for (int64_t l : c.kv_source_layers) {
    int64_t r = c.compress_ratios[size_t(l)];
    m.global_kv_bytes_per_token +=
        double(m.compressed_entry_bytes + m.indexer_entry_bytes) / double(r);
  }
  m.swa_bytes_per_sequence = c.window_size * (c.n_layers + c.n_mtp_layers) * m.swa_entry_bytes;
  return m;
}

}  // namespace fathom::model
