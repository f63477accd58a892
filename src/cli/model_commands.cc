// `fathom inspect`: what a V4.1 checkpoint or config holds — parameters and bytes per part,
// KV bytes per token and SWA state per sequence, the KV store's object sizes (Fathom's and
// DeepSeek's packed layout) — and, with --model, a full check of the checkpoint's tensors
// against the layout its config implies.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "model/config.h"
#include "model/kv_object_sizes.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace fathom::cli {
namespace {

// The "kv_store" object of inspect's JSON: one 128-token block object and one window side
// object, as Fathom stores them and in DeepSeek's packed layout, and the hit cap.
std::string kv_store_json(const model::ModelConfig& c) {
  const model::KvStoreSizes z = model::kv_store_sizes(c);
  auto per_source = [](const std::vector<std::pair<int64_t, int64_t>>& v) {
    std::string o = "{";
    for (size_t i = 0; i < v.size(); ++i)
      o += (i ? ",\"" : "\"") + std::to_string(v[i].first) + "\":" + std::to_string(v[i].second);
    return o + "}";
  };
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"block_tokens\":%lld,\"block_object_bytes\":%lld,"
                "\"packed_block_bytes\":%lld,\"window_object_bytes\":%lld,"
                "\"packed_window_bytes\":%lld,\"packed_window_layers\":%lld,"
                "\"packed_window_entries\":%lld,\"hit_cap\":\"L - %lld\","
                "\"hit_reserve_tokens\":%lld",
                (long long)z.block_tokens, (long long)z.block_bytes,
                (long long)z.packed_block_bytes, (long long)z.window_bytes,
                (long long)z.packed_window_bytes, (long long)z.encoder_layers,
                (long long)z.window_entries, (long long)z.hit_reserve_tokens,
                (long long)z.hit_reserve_tokens);
  return "{" + std::string(buf) + ",\"block_source_bytes\":" + per_source(z.block_source_bytes) +
         ",\"packed_block_source_bytes\":" + per_source(z.packed_block_source_bytes) + "}";
}

struct InspectArgs {
  std::string model, config;
};

int run_inspect(const InspectArgs& a) {
  if (a.model.empty() == a.config.empty()) {
    std::fprintf(stderr, "fathom: give exactly one of --model DIR or --config FILE\n");
    return 2;
  }
  auto cfg = a.model.empty() ? model::load_model_config_file(a.config)
                             : model::load_model_config_dir(a.model);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  auto layout = model::v41_layout(*cfg);
  std::string checked = "null";
  if (!a.model.empty()) {
    auto ck = model::Checkpoint::open(a.model);
    if (!ck.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", ck.status().to_string().c_str());
      return 2;
    }
    Status st = model::check_checkpoint(**ck, layout);
    if (!st.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", st.to_string().c_str());
      return 2;
    }
    checked = std::to_string((*ck)->tensors().size());
  }
  model::ModelSizes m = model::model_sizes(*cfg);
  std::string parts;
  for (int p = 0; p <= int(model::Part::kDSpark); ++p) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s\"%s\":{\"parameters\":%lld,\"bytes\":%lld}", p ? "," : "",
                  model::part_name(model::Part(p)), (long long)m.params[p], (long long)m.bytes[p]);
    parts += buf;
  }
  std::printf(
      "{\"tensors\":%zu,\"checkpoint_tensors_checked\":%s,\"parts\":{%s},"
      "\"backbone_parameters\":%lld,\"backbone_billions\":%.1f,\"engram_parameters\":%lld,"
      "\"engram_table_parameters\":%lld,\"engram_billions\":%.1f,\"dspark_parameters\":%lld,"
      "\"total_bytes\":%lld,\"global_kv_bytes_per_token\":%.1f,\"swa_entry_bytes\":%lld,"
      "\"compressed_kv_entry_bytes\":%lld,\"indexer_k_entry_bytes\":%lld,"
      "\"swa_bytes_per_sequence\":%lld,\"swa_window\":%lld,\"swa_rings\":%lld,"
      "\"kv_store\":%s}\n",
      layout.size(), checked.c_str(), parts.c_str(), (long long)m.backbone_params,
      m.backbone_params / 1e9, (long long)m.engram_params, (long long)m.engram_table_params,
      m.engram_table_params / 1e9, (long long)m.dspark_params, (long long)m.total_bytes,
      m.global_kv_bytes_per_token, (long long)m.swa_entry_bytes,
      (long long)m.compressed_entry_bytes, (long long)m.indexer_entry_bytes,
      (long long)m.swa_bytes_per_sequence, (long long)cfg->window_size,
      (long long)(cfg->n_layers + cfg->n_mtp_layers), kv_store_json(*cfg).c_str());
  return 0;
}

}  // namespace

void add_model_commands(CLI::App& app, Runner* run) {
  auto args = std::make_shared<InspectArgs>();
  auto* i = app.add_subcommand(
      "inspect", "Sizes of a V4.1 checkpoint or config; checks a checkpoint's tensors");
  i->add_option("--model", args->model, "Checkpoint directory (config.json + safetensors)");
  i->add_option("--config", args->config, "A config.json (either layout)");
  i->callback([args, run] { *run = [args] { return run_inspect(*args); }; });
}

}  // namespace fathom::cli
