#include "model/config.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/py_json.h"

namespace fathom::model {
namespace {

using pyjson::Value;

Status bad(const std::string& m) { return corrupt("config.json: " + m); }

// Reads a field under any of its spellings; absent -> keeps the default unless required.
std::string spellings(std::initializer_list<const char*> names) {
  std::string s;
  for (const char* n : names) s += std::string(s.empty() ? "\"" : " or \"") + n + "\"";
  return s;
}

class Reader {
 public:
  explicit Reader(const Value& o) : o_(o) {}
  const Value* find(std::initializer_list<const char*> names) const {
    for (const char* n : names)
      if (const Value* v = o_.find(n)) return v->is_null() ? nullptr : v;
    return nullptr;
  }
  Status integer(std::initializer_list<const char*> names, int64_t* out,
                 bool required = true) const {
    const Value* v = find(names);
    if (v == nullptr) return required ? bad("missing " + spellings(names)) : Status::ok();
    if (!v->int_fits_int64(out)) return bad(spellings(names) + " must be an integer");
    return Status::ok();
  }
  Status number(std::initializer_list<const char*> names, double* out, bool required = true) const {
    const Value* v = find(names);
    if (v == nullptr) return required ? bad("missing " + spellings(names)) : Status::ok();
    int64_t i = 0;
    if (v->kind == Value::Kind::kFloat) {
      *out = v->number;
    } else if (v->int_fits_int64(&i)) {
      *out = double(i);
    } else {
      return bad(spellings(names) + " must be a number");
    }
    return Status::ok();
  }
  Status string(std::initializer_list<const char*> names, std::string* out,
                bool required = true) const {
    const Value* v = find(names);
    if (v == nullptr) return required ? bad("missing " + spellings(names)) : Status::ok();
    if (!v->is_string()) return bad(spellings(names) + " must be a string");
    *out = v->text;
    return Status::ok();
  }
  Status numbers(std::initializer_list<const char*> names, std::vector<double>* out,
                 bool required = true) const {
    const Value* v = find(names);
    if (v == nullptr) return required ? bad("missing " + spellings(names)) : Status::ok();
    if (!v->is_array()) return bad(spellings(names) + " must be a list of numbers");
    out->clear();
    for (const Value& e : v->items) {
      int64_t i = 0;
      if (e.kind == Value::Kind::kFloat)
        out->push_back(e.number);
      else if (e.int_fits_int64(&i))
        out->push_back(double(i));
      else
        return bad(spellings(names) + " must be a list of numbers");
    }
    return Status::ok();
  }
  Status ints(std::initializer_list<const char*> names, std::vector<int64_t>* out,
              bool required = true) const {
    const Value* v = find(names);
    if (v == nullptr) return required ? bad("missing " + spellings(names)) : Status::ok();
    if (!v->is_array()) return bad(spellings(names) + " must be a list of integers");
    out->clear();
    for (const Value& e : v->items) {
      int64_t x = 0;
      if (!e.int_fits_int64(&x)) return bad(spellings(names) + " must be a list of integers");
      out->push_back(x);
    }
    return Status::ok();
  }

 private:
  const Value& o_;
};

Status validate(const ModelConfig& c) {
  auto positive = [](int64_t v, const char* n) -> Status {
    return v > 0 ? Status::ok() : bad(std::string("\"") + n + "\" must be positive");
  };
  FATHOM_RETURN_IF_ERROR(positive(c.vocab_size, "vocab_size"));
  FATHOM_RETURN_IF_ERROR(positive(c.dim, "dim"));
  FATHOM_RETURN_IF_ERROR(positive(c.n_layers, "n_layers"));
  FATHOM_RETURN_IF_ERROR(positive(c.n_heads, "n_heads"));
  FATHOM_RETURN_IF_ERROR(positive(c.head_dim, "head_dim"));
  FATHOM_RETURN_IF_ERROR(positive(c.q_lora_rank, "q_lora_rank"));
  FATHOM_RETURN_IF_ERROR(positive(c.o_groups, "o_groups"));
  FATHOM_RETURN_IF_ERROR(positive(c.o_lora_rank, "o_lora_rank"));
  FATHOM_RETURN_IF_ERROR(positive(c.moe_inter_dim, "moe_inter_dim"));
  FATHOM_RETURN_IF_ERROR(positive(c.n_routed_experts, "n_routed_experts"));
  FATHOM_RETURN_IF_ERROR(positive(c.hc_mult, "hc_mult"));
  FATHOM_RETURN_IF_ERROR(positive(c.window_size, "window_size"));
  if (c.n_mtp_layers < 0) return bad("\"n_mtp_layers\" must not be negative");
  if (int64_t(c.compress_ratios.size()) != c.n_layers + c.n_mtp_layers) {
    return bad("\"compress_ratios\" has " + std::to_string(c.compress_ratios.size()) +
               " entries, expected n_layers + n_mtp_layers = " +
               std::to_string(c.n_layers + c.n_mtp_layers));
  }
  for (int64_t r : c.compress_ratios)
    if (r < 0 || r > 2) return bad("compress ratios must be 0, 1 or 2");
  if (c.rope_head_dim <= 0 || c.rope_head_dim > c.head_dim || c.rope_head_dim % 2)
    return bad("\"rope_head_dim\" must be even and at most head_dim");
  if ((c.n_heads * c.head_dim) % c.o_groups)
    return bad("n_heads * head_dim must be divisible by o_groups");
  if (c.n_activated_experts <= 0 || c.n_activated_experts > c.n_routed_experts)
    return bad("\"n_activated_experts\" must be in [1, n_routed_experts]");
  auto in_layers = [&](const std::vector<int64_t>& v, const char* n) -> Status {
    for (int64_t l : v)
      if (l < 0 || l >= c.n_layers)
        return bad(std::string("\"") + n + "\" holds layer " + std::to_string(l) +
                   " outside [0, n_layers)");
    return Status::ok();
  };
  FATHOM_RETURN_IF_ERROR(in_layers(c.kv_source_layers, "kv_source_layers"));
  FATHOM_RETURN_IF_ERROR(in_layers(c.index_source_layers, "index_source_layers"));
  FATHOM_RETURN_IF_ERROR(in_layers(c.engram_layer_ids, "engram_layer_ids"));
  FATHOM_RETURN_IF_ERROR(in_layers(c.dspark_target_layer_ids, "dspark_target_layer_ids"));
  if (c.engram_layer_ids.size() != c.engram_num_embeddings.size())
    return bad("\"engram_num_embeddings\" needs one entry per Engram layer");
  for (int64_t l : c.kv_source_layers)
    if (c.compress_ratios[size_t(l)] == 0)
      return bad("kv source layer " + std::to_string(l) + " has compress ratio 0");
  if (c.n_mtp_layers > 0) {
    FATHOM_RETURN_IF_ERROR(positive(c.dspark_n_routed_experts, "dspark_n_routed_experts"));
    FATHOM_RETURN_IF_ERROR(positive(c.dspark_markov_rank, "dspark_markov_rank"));
    if (c.dspark_target_layer_ids.empty()) return bad("\"dspark_target_layer_ids\" is empty");
  }
  if (!c.dspark_confidence_temperatures.empty()) {
    if (int64_t(c.dspark_confidence_temperatures.size()) != c.dspark_block_size)
      return bad(
          "\"dspark_confidence_temperatures\" needs one entry per draft (dspark_block_size)");
    for (double t : c.dspark_confidence_temperatures)
      if (!(t > 0) || !std::isfinite(t))
        return bad("\"dspark_confidence_temperatures\" must be positive and finite");
  }
  if (c.dtype != "fp8")
    return unsupported("config.json: weight dtype \"" + c.dtype + "\" (only fp8)");
  if (c.expert_dtype != "fp4")
    return unsupported("config.json: expert dtype \"" + c.expert_dtype + "\" (only fp4)");
  return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(std::string_view json) {
  FATHOM_ASSIGN_OR_RETURN(Value root, pyjson::parse(json));
  if (!root.is_object()) return bad("the top level must be an object");
  const Value* text = root.find("text_config");
  const Value& t = text != nullptr ? *text : root;
  if (!t.is_object()) return bad("\"text_config\" must be an object");
  Reader r(t);
  ModelConfig c;
  FATHOM_RETURN_IF_ERROR(r.integer({"vocab_size"}, &c.vocab_size));
  FATHOM_RETURN_IF_ERROR(r.integer({"hidden_size", "dim"}, &c.dim));
  FATHOM_RETURN_IF_ERROR(r.integer({"num_hidden_layers", "n_layers"}, &c.n_layers));
  FATHOM_RETURN_IF_ERROR(
      r.integer({"num_nextn_predict_layers", "n_mtp_layers"}, &c.n_mtp_layers, false));
  FATHOM_RETURN_IF_ERROR(r.integer({"num_attention_heads", "n_heads"}, &c.n_heads));
  FATHOM_RETURN_IF_ERROR(r.integer({"head_dim"}, &c.head_dim));
  FATHOM_RETURN_IF_ERROR(r.integer({"qk_rope_head_dim", "rope_head_dim"}, &c.rope_head_dim));
  FATHOM_RETURN_IF_ERROR(r.integer({"q_lora_rank"}, &c.q_lora_rank));
  FATHOM_RETURN_IF_ERROR(r.integer({"o_groups"}, &c.o_groups));
  FATHOM_RETURN_IF_ERROR(r.integer({"o_lora_rank"}, &c.o_lora_rank));
  FATHOM_RETURN_IF_ERROR(r.integer({"moe_intermediate_size", "moe_inter_dim"}, &c.moe_inter_dim));
  FATHOM_RETURN_IF_ERROR(r.integer({"n_routed_experts"}, &c.n_routed_experts));
  FATHOM_RETURN_IF_ERROR(r.integer({"n_shared_experts"}, &c.n_shared_experts));
  FATHOM_RETURN_IF_ERROR(
      r.integer({"num_experts_per_tok", "n_activated_experts"}, &c.n_activated_experts));
  FATHOM_RETURN_IF_ERROR(r.string({"scoring_func", "score_func"}, &c.score_func));
  FATHOM_RETURN_IF_ERROR(r.number({"routed_scaling_factor", "route_scale"}, &c.route_scale));
  FATHOM_RETURN_IF_ERROR(r.number({"swiglu_limit"}, &c.swiglu_limit));
  FATHOM_RETURN_IF_ERROR(r.number({"rms_norm_eps", "norm_eps"}, &c.norm_eps));
  FATHOM_RETURN_IF_ERROR(r.number({"rope_theta"}, &c.rope_theta));
  FATHOM_RETURN_IF_ERROR(r.number({"compress_rope_theta"}, &c.compress_rope_theta));
  if (const Value* rs = t.find("rope_scaling"); rs != nullptr && rs->is_object()) {
    Reader s(*rs);
    FATHOM_RETURN_IF_ERROR(s.number({"factor"}, &c.rope_factor));
    FATHOM_RETURN_IF_ERROR(s.number({"beta_fast"}, &c.beta_fast));
    FATHOM_RETURN_IF_ERROR(s.number({"beta_slow"}, &c.beta_slow));
    FATHOM_RETURN_IF_ERROR(s.integer({"original_max_position_embeddings"}, &c.original_seq_len));
  } else {
    FATHOM_RETURN_IF_ERROR(r.number({"rope_factor"}, &c.rope_factor));
    FATHOM_RETURN_IF_ERROR(r.number({"beta_fast"}, &c.beta_fast));
    FATHOM_RETURN_IF_ERROR(r.number({"beta_slow"}, &c.beta_slow));
    FATHOM_RETURN_IF_ERROR(r.integer({"original_seq_len"}, &c.original_seq_len));
  }
  FATHOM_RETURN_IF_ERROR(r.integer({"sliding_window", "window_size"}, &c.window_size));
  FATHOM_RETURN_IF_ERROR(r.ints({"compress_ratios"}, &c.compress_ratios));
  FATHOM_RETURN_IF_ERROR(r.ints({"kv_source_layer_ids", "kv_source_layers"}, &c.kv_source_layers));
  FATHOM_RETURN_IF_ERROR(
      r.ints({"index_source_layer_ids", "index_source_layers"}, &c.index_source_layers));
  FATHOM_RETURN_IF_ERROR(r.integer({"index_n_heads"}, &c.index_n_heads));
  FATHOM_RETURN_IF_ERROR(r.integer({"index_head_dim"}, &c.index_head_dim));
  FATHOM_RETURN_IF_ERROR(r.integer({"index_topk"}, &c.index_topk));
  FATHOM_RETURN_IF_ERROR(r.integer({"candidate_source_layer_id", "candidate_source_layer"},
                                   &c.candidate_source_layer));
  FATHOM_RETURN_IF_ERROR(r.integer({"candidate_topk_blocks"}, &c.candidate_topk_blocks));
  FATHOM_RETURN_IF_ERROR(r.integer({"candidate_block_size"}, &c.candidate_block_size));
  FATHOM_RETURN_IF_ERROR(r.integer({"hc_mult"}, &c.hc_mult));
  FATHOM_RETURN_IF_ERROR(r.integer({"hc_sinkhorn_iters"}, &c.hc_sinkhorn_iters));
  FATHOM_RETURN_IF_ERROR(r.number({"hc_eps"}, &c.hc_eps));
  FATHOM_RETURN_IF_ERROR(r.ints({"engram_layer_ids"}, &c.engram_layer_ids));
  FATHOM_RETURN_IF_ERROR(r.ints({"engram_num_embeddings"}, &c.engram_num_embeddings));
  FATHOM_RETURN_IF_ERROR(r.integer({"engram_max_ngram_size"}, &c.engram_max_ngram_size));
  FATHOM_RETURN_IF_ERROR(r.integer({"engram_vocab_size"}, &c.engram_vocab_size));
  FATHOM_RETURN_IF_ERROR(r.integer({"engram_n_heads"}, &c.engram_n_heads));
  FATHOM_RETURN_IF_ERROR(r.integer({"engram_head_dim"}, &c.engram_head_dim));
  FATHOM_RETURN_IF_ERROR(r.integer({"engram_pad_token_id", "engram_pad_id"}, &c.engram_pad_id));
  FATHOM_RETURN_IF_ERROR(
      r.integer({"engram_compressed_vocab_size"}, &c.engram_compressed_vocab_size));
  FATHOM_RETURN_IF_ERROR(r.integer({"dspark_block_size"}, &c.dspark_block_size, false));
  FATHOM_RETURN_IF_ERROR(r.integer({"dspark_noise_token_id"}, &c.dspark_noise_token_id, false));
  FATHOM_RETURN_IF_ERROR(r.ints({"dspark_target_layer_ids"}, &c.dspark_target_layer_ids, false));
  FATHOM_RETURN_IF_ERROR(r.integer({"dspark_markov_rank"}, &c.dspark_markov_rank, false));
  FATHOM_RETURN_IF_ERROR(r.integer({"dspark_n_routed_experts"}, &c.dspark_n_routed_experts, false));
  FATHOM_RETURN_IF_ERROR(r.integer({"dspark_num_experts_per_tok", "dspark_n_activated_experts"},
                                   &c.dspark_n_activated_experts, false));
  FATHOM_RETURN_IF_ERROR(
      r.numbers({"dspark_confidence_temperatures"}, &c.dspark_confidence_temperatures, false));
  FATHOM_RETURN_IF_ERROR(Reader(root).integer({"image_token_id"}, &c.image_token_id, false));
  if (c.image_token_id < 0)
    FATHOM_RETURN_IF_ERROR(r.integer({"image_token_id"}, &c.image_token_id, false));
  FATHOM_RETURN_IF_ERROR(r.integer({"vision_n_layers"}, &c.vision_n_layers, false));
  if (const Value* q = root.find("quantization_config"); q != nullptr && q->is_object()) {
    Reader qr(*q);
    std::string method;
    FATHOM_RETURN_IF_ERROR(qr.string({"quant_method"}, &method));
    c.dtype = method;
    FATHOM_RETURN_IF_ERROR(qr.string({"expert_dtype"}, &c.expert_dtype, false));
    std::vector<int64_t> block;
    FATHOM_RETURN_IF_ERROR(qr.ints({"weight_block_size"}, &block, false));
    if (!block.empty() && (block.size() != 2 || block[0] != 32 || block[1] != 32)) {
      return unsupported("config.json: weight_block_size other than [32, 32]");
    }
    std::string fmt;
    FATHOM_RETURN_IF_ERROR(qr.string({"scale_fmt"}, &fmt, false));
    if (!fmt.empty() && fmt != "ue8m0")
      return unsupported("config.json: scale_fmt \"" + fmt + "\"");
  } else {
    FATHOM_RETURN_IF_ERROR(r.string({"dtype"}, &c.dtype, false));
    FATHOM_RETURN_IF_ERROR(r.string({"expert_dtype"}, &c.expert_dtype, false));
  }
  FATHOM_RETURN_IF_ERROR(validate(c));
  return c;
}

Result<ModelConfig> load_model_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = parse_model_config(ss.str());
  if (!c.is_ok()) return Status(c.status().code(), path + ": " + c.status().message());
  return c;
}

Result<ModelConfig> load_model_config_dir(const std::string& dir) {
  struct stat st;
  std::string root = dir + "/config.json", flat = dir + "/inference/config.json";
  bool has_root = stat(root.c_str(), &st) == 0, has_flat = stat(flat.c_str(), &st) == 0;
  if (!has_root && !has_flat) return not_found("no config.json in '" + dir + "'");
  if (has_root && !has_flat) return load_model_config_file(root);
  if (!has_root) return load_model_config_file(flat);
  FATHOM_ASSIGN_OR_RETURN(ModelConfig a, load_model_config_file(root));
  FATHOM_ASSIGN_OR_RETURN(ModelConfig b, load_model_config_file(flat));
  a.vision_n_layers = b.vision_n_layers;  // the root layout keeps it in vision_config
  if (!(a == b)) return corrupt("'" + root + "' and '" + flat + "' describe different models");
  return a;
}

}  // namespace fathom::model
