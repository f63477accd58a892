#include "model/mkmodel.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "kernels/norm.h"
#include "kernels/quant.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace fathom::model {
namespace {

// A counter-free Gaussian stream: splitmix64 seeded per tensor, Box-Muller pairs.
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : s_(seed) {}
  float next() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    double u1 = (double(bits() >> 11) + 1.0) * 0x1p-53, u2 = double(bits() >> 11) * 0x1p-53;
    double r = std::sqrt(-2.0 * std::log(u1)), a = 2 * M_PI * u2;
    spare_ = float(r * std::sin(a));
    have_ = true;
    return float(r * std::cos(a));
  }
  uint64_t bits() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t s_;
  bool have_ = false;
  float spare_ = 0;
};

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

uint8_t e2m1_code(float v) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = std::fabs(v);
  uint8_t c = 0;
  while (c < 7 && kMag[c] != a) ++c;
  return uint8_t((std::signbit(v) && a != 0 ? 8 : 0) | c);
}

// 2^ceil(log2(v)) as a UE8M0 byte (clamped to the format).
uint8_t pow2_ceil_e8m0(float v, float* scale) {
  int e;
  const float m = std::frexp(std::max(v, 0x1p-120f), &e);
  const int k = m == 0.5f ? e - 1 : e;
  *scale = std::ldexp(1.0f, k);
  return uint8_t(std::clamp(k + 127, 1, 254));
}

void put_bf16(std::vector<uint8_t>& out, float v) {
  const uint16_t b = kernels::float_to_bf16(v);
  out.push_back(uint8_t(b & 0xFF));
  out.push_back(uint8_t(b >> 8));
}
void put_f32(std::vector<uint8_t>& out, float v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

// The master-weight standard deviation for a tensor (golden README, "Weights").
float init_std(const std::string& name, int64_t fan_in) {
  float g = 1.0f;
  if (has(name, ".wq_b")) g = 1.5f;
  if (has(name, ".wo_b") || ends_with(name, ".w2.weight")) g = 0.6f;
  return g / std::sqrt(float(fan_in));
}

struct Generated {
  std::vector<uint8_t> weight, scale;
};

// FP8 [rows, cols] with scales per block_rows x 32 (32 x 32, or 1 x 32 for Engram rows).
Generated gen_fp8(Gaussian& g, int64_t rows, int64_t cols, int64_t block_rows, float stdev) {
  Generated out;
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (auto& v : m) v = g.next() * stdev;
  const int64_t rb = (rows + block_rows - 1) / block_rows, cb = (cols + 31) / 32;
  out.weight.resize(size_t(rows * cols));
  out.scale.resize(size_t(rb * cb));
  for (int64_t bi = 0; bi < rb; ++bi)
    for (int64_t bj = 0; bj < cb; ++bj) {
      float amax = 0;
      for (int64_t r = bi * block_rows; r < std::min(rows, (bi + 1) * block_rows); ++r)
        for (int64_t c = bj * 32; c < std::min(cols, (bj + 1) * 32); ++c)
          amax = std::max(amax, std::fabs(m[size_t(r * cols + c)]));
      float s;
      out.scale[size_t(bi * cb + bj)] = pow2_ceil_e8m0(amax / 448.0f, &s);
      for (int64_t r = bi * block_rows; r < std::min(rows, (bi + 1) * block_rows); ++r)
        for (int64_t c = bj * 32; c < std::min(cols, (bj + 1) * 32); ++c)
          out.weight[size_t(r * cols + c)] =
              kernels::e4m3_code(kernels::round_to_e4m3(m[size_t(r * cols + c)] / s));
    }
  return out;
}

// FP4 [rows, cols] as I8 pairs, UE8M0 scale per 32 along the row.
Generated gen_fp4(Gaussian& g, int64_t rows, int64_t cols, float stdev) {
  Generated out;
  out.weight.resize(size_t(rows * cols / 2));
  out.scale.resize(size_t(rows * cols / 32));
  float m[32];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      float amax = 0;
      for (auto& v : m) amax = std::max(amax, std::fabs(v = g.next() * stdev));
      float s;
      out.scale[size_t(r * (cols / 32) + b)] = pow2_ceil_e8m0(amax / 6.0f, &s);
      for (int i = 0; i < 32; i += 2) {
        const uint8_t lo = e2m1_code(kernels::round_to_e2m1(m[i] / s));
        const uint8_t hi = e2m1_code(kernels::round_to_e2m1(m[i + 1] / s));
        out.weight[size_t(r * (cols / 2) + b * 16 + i / 2)] = uint8_t(lo | (hi << 4));
      }
    }
  return out;
}

std::vector<uint8_t> gen_plain(Gaussian& g, const TensorSpec& t, const ModelConfig& c) {
  const std::string& n = t.name;
  int64_t count = 1;
  for (int64_t d : t.shape) count *= d;
  std::vector<uint8_t> out;
  out.reserve(size_t(count) * dtype_size(t.dtype));
  const int64_t D = c.dim;
  auto emit = [&](float v) {
    if (t.dtype == DType::kBF16)
      put_bf16(out, v);
    else
      put_f32(out, v);
  };
  if (has(n.c_str(), "hc_") && ends_with(n, "_base")) {
    const int64_t hc = c.hc_mult;
    for (int64_t i = 0; i < count; ++i) {
      float v;
      if (i < hc)
        v = 0.5f * g.next();
      else if (i < 2 * hc)
        v = -1.5f + 0.3f * g.next();
      else
        v = ((i - 2 * hc) / hc == (i - 2 * hc) % hc ? 3.0f : 0.0f) + 0.3f * g.next();
      emit(v);
    }
    return out;
  }
  // value = mean + stdev * N(0, 1), chosen once per tensor.
  float mean = 0.0f, stdev = 1.0f;  // embed.weight, markov_head.embed.weight
  if (ends_with(n, "norm.weight"))
    mean = 1.0f, stdev = 0.1f;
  else if (ends_with(n, "_fn"))
    stdev = 1.0f / std::sqrt(float(4 * D));
  else if (ends_with(n, "_scale"))
    mean = 0.5f, stdev = 0.1f;
  else if (ends_with(n, "attn_sink"))
    stdev = 0.5f;
  else if (ends_with(n, "gate.weight"))
    stdev = 3.0f / std::sqrt(float(D));
  else if (ends_with(n, "gate.bias") || ends_with(n, "gate.bias_vl"))
    stdev = 0.2f;
  else if (ends_with(n, "compressor.wgate.weight"))
    stdev = 2.0f / std::sqrt(float(D));
  else if (ends_with(n, "compressor.wkv.weight"))
    stdev = 1.0f / std::sqrt(float(D));
  else if (ends_with(n, "indexer.wk.weight"))
    stdev = 1.0f / std::sqrt(float(c.head_dim));
  else if (ends_with(n, "weights_proj.weight"))
    stdev = 1.0f / std::sqrt(float(D));
  else if (ends_with(n, "q_weight") || ends_with(n, "k_weight"))
    mean = 1.0f, stdev = 0.2f;
  else if (ends_with(n, "markov_head.head.weight"))
    stdev = 0.5f / std::sqrt(float(c.dspark_markov_rank));
  else if (ends_with(n, "confidence_head.proj.weight"))
    stdev = 1.0f / std::sqrt(float(D + c.dspark_markov_rank));
  else if (ends_with(n, "head.weight"))
    stdev = 2.0f / std::sqrt(float(D));
  for (int64_t i = 0; i < count; ++i) emit(mean + stdev * g.next());
  return out;
}

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  return f ? Status::ok() : io_error("cannot write " + path);
}

}  // namespace

Result<ModelConfig> preset_config(const std::string& name) {
  // The golden tiny configuration (shared/golden/v41-tiny/inference/config.json).
  ModelConfig c;
  c.vocab_size = 1024;
  c.dim = 256;
  c.n_layers = 10;
  c.n_mtp_layers = 3;
  c.n_heads = 8;
  c.head_dim = 128;
  c.rope_head_dim = 32;
  c.q_lora_rank = 128;
  c.o_groups = 4;
  c.o_lora_rank = 64;
  c.moe_inter_dim = 128;
  c.n_routed_experts = 8;
  c.n_shared_experts = 1;
  c.n_activated_experts = 2;
  c.score_func = "sqrtsoftplus";
  c.route_scale = 1.5;
  c.swiglu_limit = 10;
  c.norm_eps = 1e-20;
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  c.rope_factor = 16;
  c.beta_fast = 32;
  c.beta_slow = 1;
  c.original_seq_len = 65536;
  c.window_size = 16;
  c.compress_ratios = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0};
  c.kv_source_layers = {2, 4, 6};
  c.index_source_layers = {2, 4, 6, 8};
  c.index_n_heads = 16;
  c.index_head_dim = 64;
  c.index_topk = 56;
  c.candidate_source_layer = 6;
  c.candidate_topk_blocks = 10;
  c.candidate_block_size = 8;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.engram_layer_ids = {1, 4};
  c.engram_num_embeddings = {12458, 13416};
  c.engram_max_ngram_size = 4;
  c.engram_vocab_size = 1000;
  c.engram_n_heads = 4;
  c.engram_head_dim = 64;
  c.engram_pad_id = 2;
  c.engram_compressed_vocab_size = 716;
  c.dspark_block_size = 5;
  c.dspark_noise_token_id = 1000;
  c.dspark_markov_rank = 32;
  c.dspark_n_routed_experts = 6;
  c.dspark_n_activated_experts = 3;
  c.dspark_target_layer_ids = {7, 8, 9};
  c.image_token_id = 1023;
  if (name == "tiny") return c;
  if (name == "demo") {
    // Tiny shapes, the released vocabulary and special ids.
    c.vocab_size = 129280;
    c.dspark_noise_token_id = 128799;
    c.image_token_id = 129264;
    return c;
  }
  if (name == "small" || name == "medium") {
    // ~1.5 GB: the released head geometry (512-d latent, 64 RoPE dims) at dim 2048, with a
    // 32k vocabulary so that the head does not dominate (run it with token ids).
    c.vocab_size = 32768;
    c.dspark_noise_token_id = 32000;
    c.image_token_id = 32767;
    c.dim = 2048;
    c.n_heads = 16;
    c.head_dim = 512;
    c.rope_head_dim = 64;
    c.q_lora_rank = 512;
    c.o_groups = 4;
    c.o_lora_rank = 512;
    c.moe_inter_dim = 1024;
    c.n_routed_experts = 16;
    c.n_activated_experts = 6;
    c.window_size = 128;
    c.index_n_heads = 16;
    c.index_head_dim = 128;
    c.index_topk = 512;
    c.candidate_topk_blocks = 256;
    c.engram_vocab_size = 100000;
    c.engram_n_heads = 4;
    c.engram_head_dim = 64;
    c.dspark_markov_rank = 64;
    c.dspark_n_routed_experts = 8;
    if (name == "medium") {
      // The benchmark model the server can serve: small's geometry with the released
      // vocabulary and special ids, and 32 routed experts (top 6). About 2.4 GB, of which
      // about 0.95 GB is read per decode token (the 0.53 GB bf16 head included).
      c.vocab_size = 129280;
      c.dspark_noise_token_id = 128799;
      c.image_token_id = 129264;
      c.n_routed_experts = 32;
    }
    return c;
  }
  return invalid_argument("unknown preset \"" + name + "\" (tiny, demo, small or medium)");
}

std::string config_to_json(const ModelConfig& c) {
  std::ostringstream o;
  auto list = [](const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  char buf[64];
  auto num = [&](double d) {
    std::snprintf(buf, sizeof buf, "%.17g", d);
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  };
  o << "{\n"
    << "  \"vocab_size\": " << c.vocab_size << ",\n  \"dim\": " << c.dim
    << ",\n  \"moe_inter_dim\": " << c.moe_inter_dim << ",\n  \"n_layers\": " << c.n_layers
    << ",\n  \"n_mtp_layers\": " << c.n_mtp_layers
    << ",\n  \"dspark_block_size\": " << c.dspark_block_size
    << ",\n  \"dspark_noise_token_id\": " << c.dspark_noise_token_id
    << ",\n  \"dspark_target_layer_ids\": " << list(c.dspark_target_layer_ids)
    << ",\n  \"dspark_markov_rank\": " << c.dspark_markov_rank
    << ",\n  \"dspark_n_routed_experts\": " << c.dspark_n_routed_experts
    << ",\n  \"dspark_n_activated_experts\": " << c.dspark_n_activated_experts;
  if (!c.dspark_confidence_temperatures.empty()) {
    o << ",\n  \"dspark_confidence_temperatures\": [";
    for (size_t i = 0; i < c.dspark_confidence_temperatures.size(); ++i)
      o << (i ? ", " : "") << num(c.dspark_confidence_temperatures[i]);
    o << "]";
  }
  o << ",\n  \"n_heads\": " << c.n_heads << ",\n  \"n_routed_experts\": " << c.n_routed_experts
    << ",\n  \"n_shared_experts\": " << c.n_shared_experts
    << ",\n  \"n_activated_experts\": " << c.n_activated_experts << ",\n  \"score_func\": \""
    << c.score_func << "\",\n  \"route_scale\": " << num(c.route_scale)
    << ",\n  \"swiglu_limit\": " << num(c.swiglu_limit) << ",\n  \"q_lora_rank\": " << c.q_lora_rank
    << ",\n  \"head_dim\": " << c.head_dim << ",\n  \"rope_head_dim\": " << c.rope_head_dim
    << ",\n  \"norm_eps\": " << num(c.norm_eps) << ",\n  \"o_groups\": " << c.o_groups
    << ",\n  \"o_lora_rank\": " << c.o_lora_rank << ",\n  \"window_size\": " << c.window_size
    << ",\n  \"kv_source_layers\": " << list(c.kv_source_layers)
    << ",\n  \"index_source_layers\": " << list(c.index_source_layers)
    << ",\n  \"original_seq_len\": " << c.original_seq_len
    << ",\n  \"rope_theta\": " << num(c.rope_theta)
    << ",\n  \"rope_factor\": " << num(c.rope_factor) << ",\n  \"beta_fast\": " << num(c.beta_fast)
    << ",\n  \"beta_slow\": " << num(c.beta_slow) << ",\n  \"index_n_heads\": " << c.index_n_heads
    << ",\n  \"index_head_dim\": " << c.index_head_dim << ",\n  \"index_topk\": " << c.index_topk
    << ",\n  \"candidate_source_layer\": " << c.candidate_source_layer
    << ",\n  \"candidate_topk_blocks\": " << c.candidate_topk_blocks
    << ",\n  \"candidate_block_size\": " << c.candidate_block_size
    << ",\n  \"hc_mult\": " << c.hc_mult << ",\n  \"hc_sinkhorn_iters\": " << c.hc_sinkhorn_iters
    << ",\n  \"hc_eps\": " << num(c.hc_eps)
    << ",\n  \"engram_layer_ids\": " << list(c.engram_layer_ids)
    << ",\n  \"engram_vocab_size\": " << c.engram_vocab_size
    << ",\n  \"engram_num_embeddings\": " << list(c.engram_num_embeddings)
    << ",\n  \"engram_max_ngram_size\": " << c.engram_max_ngram_size
    << ",\n  \"engram_pad_id\": " << c.engram_pad_id
    << ",\n  \"engram_compressed_vocab_size\": " << c.engram_compressed_vocab_size
    << ",\n  \"engram_n_heads\": " << c.engram_n_heads
    << ",\n  \"engram_head_dim\": " << c.engram_head_dim << ",\n  \"dtype\": \"" << c.dtype
    << "\",\n  \"expert_dtype\": \"" << c.expert_dtype
    << "\",\n  \"compress_rope_theta\": " << num(c.compress_rope_theta)
    << ",\n  \"compress_ratios\": " << list(c.compress_ratios)
    << ",\n  \"vision_n_layers\": " << c.vision_n_layers
    << ",\n  \"image_token_id\": " << c.image_token_id << "\n}\n";
  return o.str();
}

Status write_random_checkpoint(ModelConfig c, uint64_t seed, const std::string& dir,
                               const std::function<void(int64_t, int64_t)>& progress) {
  // Engram: a seeded compressed-token map in the golden style (ids 0..2 fixed; each other id
  // takes a new compressed id or, with probability 0.3, an earlier id's), multipliers, and the
  // distinct primes above engram_vocab_size - 1 handed out across (layer, n, head).
  Gaussian rng(name_seed(seed, "engram_tables"));
  std::vector<int64_t> map(static_cast<size_t>(c.vocab_size));
  int64_t next = 0;
  for (int64_t i = 0; i < c.vocab_size; ++i) {
    if (i > 2 && next > 3 && double(rng.bits() >> 11) * 0x1p-53 < 0.3)
      map[size_t(i)] = map[size_t(rng.bits() % uint64_t(i))];
    else
      map[size_t(i)] = next++;
  }
  c.engram_compressed_vocab_size = next;
  const int64_t L = int64_t(c.engram_layer_ids.size()),
                cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
  const size_t nl = static_cast<size_t>(L);
  std::vector<std::vector<int64_t>> mult(nl), primes(nl), offs(nl);
  const uint64_t bound = uint64_t((INT64_MAX / next) / 2);
  int64_t candidate = c.engram_vocab_size;
  c.engram_num_embeddings.assign(size_t(L), 0);
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t s = 0; s < c.engram_max_ngram_size; ++s)
      mult[size_t(l)].push_back(int64_t((rng.bits() % bound) * 2 + 1));
    int64_t total = 0;
    for (int64_t k = 0; k < cols; ++k) {
      while (!is_prime(candidate)) ++candidate;
      primes[size_t(l)].push_back(candidate++);
      offs[size_t(l)].push_back(total);
      total += primes[size_t(l)].back();
    }
    c.engram_num_embeddings[size_t(l)] = total;
  }

  ::mkdir(dir.c_str(), 0755);
  FATHOM_RETURN_IF_ERROR(write_file(dir + "/config.json", config_to_json(c)));
  {
    std::ostringstream t;
    auto list = [&](const std::vector<int64_t>& v) {
      t << "[";
      for (size_t i = 0; i < v.size(); ++i) t << (i ? ", " : "") << v[i];
      t << "]";
    };
    t << "{\"note\": \"seeded random compressed-token map written by fathom "
         "mkmodel\",\n\"token_map\": ";
    list(map);
    t << ",\n\"compressed_vocab_size\": " << next << ", \"pad_token_id\": " << c.engram_pad_id
      << ", \"pad_compressed_id\": " << map[size_t(c.engram_pad_id)] << ",\n\"multipliers\": [";
    for (int64_t l = 0; l < L; ++l) {
      t << (l ? ", " : "");
      list(mult[size_t(l)]);
    }
    t << "],\n\"primes\": [";
    for (int64_t l = 0; l < L; ++l) {
      t << (l ? ", " : "") << "[";
      for (int64_t n = 0; n < c.engram_max_ngram_size - 1; ++n) {
        t << (n ? ", " : "");
        list(std::vector<int64_t>(primes[size_t(l)].begin() + n * c.engram_n_heads,
                                  primes[size_t(l)].begin() + (n + 1) * c.engram_n_heads));
      }
      t << "]";
    }
    t << "],\n\"offsets\": [";
    for (int64_t l = 0; l < L; ++l) {
      t << (l ? ", " : "");
      list(offs[size_t(l)]);
    }
    t << "]}\n";
    FATHOM_RETURN_IF_ERROR(write_file(dir + "/engram_tables.json", t.str()));
  }

  // The safetensors header from the layout, then the tensors in order.
  const std::vector<TensorSpec> layout = v41_layout(c);
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  int64_t offset = 0;
  for (const auto& t : layout) {
    int64_t n = int64_t(dtype_size(t.dtype));
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      n *= t.shape[i];
      shape += (i ? "," : "") + std::to_string(t.shape[i]);
    }
    header += ",\"" + t.name + "\":{\"dtype\":\"" + dtype_name(t.dtype) + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + n) +
              "]}";
    offset += n;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  const std::string path = dir + "/model.safetensors";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return io_error("cannot create " + path);
  uint64_t hlen = header.size();
  bool ok = std::fwrite(&hlen, 8, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size();
  int64_t written = 0;
  std::map<std::string, std::vector<uint8_t>> copies;  // embed/head bytes for the DSpark copies
  for (size_t i = 0; ok && i < layout.size(); ++i) {
    const TensorSpec& t = layout[i];
    std::vector<uint8_t> bytes;
    const bool is_copy =
        t.name == "mtp.0.embed.weight" || (ends_with(t.name, ".head.weight") &&
                                           t.name.rfind("mtp.", 0) == 0 && !has(t.name, "markov"));
    if (t.is_scale) continue;  // written with its weight
    Gaussian g(name_seed(seed, t.name));
    const bool paired = i + 1 < layout.size() && layout[i + 1].is_scale;
    if (is_copy) {
      bytes = copies[t.name == "mtp.0.embed.weight" ? "embed.weight" : "head.weight"];
    } else if (t.dtype == DType::kF8E4M3 || t.dtype == DType::kI8) {
      Generated gen;
      const std::string base = t.name.substr(0, t.name.size() - 7);  // minus ".weight"
      if (has(t.name, ".engram.embed."))
        gen = gen_fp8(g, t.shape[0], t.shape[1], 1, 1.0f);
      else if (has(t.name, ".engram.wkv."))
        gen = gen_fp8(g, t.shape[0], t.shape[1], 32, 0.4f / std::sqrt(float(t.shape[1])));
      else if (t.dtype == DType::kI8)
        gen = gen_fp4(g, t.shape[0], t.shape[1] * 2, init_std(t.name, t.shape[1] * 2));
      else
        gen = gen_fp8(g, t.shape[0], t.shape[1], 32, init_std(t.name, t.shape[1]));
      ok = ok && std::fwrite(gen.weight.data(), 1, gen.weight.size(), f) == gen.weight.size();
      written += int64_t(gen.weight.size());
      if (!paired) return internal_error(t.name + " has no scale in the layout");
      bytes = std::move(gen.scale);
      ++i;
    } else {
      bytes = gen_plain(g, t, c);
      if (t.name == "embed.weight" || t.name == "head.weight") copies[t.name] = bytes;
    }
    ok = ok && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    written += int64_t(bytes.size());
    if (progress) progress(written, offset);
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return io_error("writing " + path + " failed");
  if (written != offset)
    return internal_error("wrote " + std::to_string(written) + " of " + std::to_string(offset) +
                          " bytes");
  return Status::ok();
}

}  // namespace fathom::model
