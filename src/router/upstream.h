// The router's wire protocols to its replicas ("upstreams"): what one attempt of a request
// sends and how the streamed answer is read back as token ids, for three kinds of upstream:
//
//   fathom  `fathom serve`'s /v1/completions with Fathom's fields (resume_output_ids,
//           retention, cache_salt): continuation after a failure is exact.
//   vllm    vLLM's OpenAI-compatible /v1/completions: a token-id prompt and
//           `return_token_ids: true` (vLLM >= 0.10.2), whose streamed choices carry the
//           generated ids as `token_ids` (and the prompt's as `prompt_token_ids` once).
//   sglang  SGLang's native /generate: `input_ids`, `sampling_params`, `stream: true`, `rid`;
//           each streamed object's `output_ids` holds the ids generated so far (SGLang's
//           default) or, with --incremental-streaming-output, only the new ones: the reader
//           tells them apart by `meta_info.completion_tokens`.
//
// On vllm and sglang a continuation appends the ids already streamed to the prompt (there is
// no resume field), so it is computed as prompt rows rather than decode steps (README).
//
// Plain functions and a reader that belongs to one attempt (one thread); nothing is shared.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/request.h"

namespace fathom::pyjson {
struct Value;
}

namespace fathom::router {

enum class UpstreamKind { kFathom, kVllm, kSglang };

// "fathom", "vllm" or "sglang"; kInvalidArgument otherwise.
Result<UpstreamKind> parse_upstream_kind(std::string_view name);
const char* upstream_kind_name(UpstreamKind kind);

// The tenant string a request of tenant hash `salt` (GenerationRequest::cache_salt, nonzero)
// carries upstream: cache_salt (fathom, vllm) or extra_key (sglang), "fathom-router-<16 hex>".
std::string upstream_salt_name(uint64_t salt);
// The salt a Fathom replica's prefix cache keys that request's blocks with
// (kv::tenant_salt of upstream_salt_name; 0 for no tenant), so the router computes the very keys
// the replica's KV events carry: kv::prefix_block_hashes(prompt, 128, replica_block_salt(salt)).
uint64_t replica_block_salt(uint64_t salt);

// kUnsupported (a 400 naming the field) when `kind` cannot serve a request of n samples like
// `req`: sglang serves one sample per request (n > 1 would need its own seeding).
Status check_upstream_supports(UpstreamKind kind, const engine::GenerationRequest& req, int n);

// What one attempt sends.
struct UpstreamCall {
  std::string path;  // "/v1/completions" or "/generate"
  std::string body;  // JSON
};

// One attempt of `req` (n samples) after `sofar` ids were already streamed to the client
// (continuation; empty on a first try). `retention` is the class name (fathom only);
// `request_id` names the attempt (sglang's rid). REQUIRES: check_upstream_supports passed,
// sofar.size() < req.max_tokens.
UpstreamCall build_upstream_call(UpstreamKind kind, const engine::GenerationRequest& req, int n,
                                 std::span<const int32_t> sofar, const std::string& retention,
                                 const std::string& request_id);

// Reads one attempt's streamed answer (the body's lines, `data: ...` SSE events) into token
// ids per choice. Anything the upstream sends that is not what its protocol promises — bad
// JSON, a missing or mistyped field, an id outside the vocabulary, output ids that do not
// extend what came before, a finish it does not know — is an error naming what was wrong;
// an error event the upstream sends is an error with its message. Either way the attempt
// failed: the reader never turns a broken answer into a finish.
class UpstreamStreamReader {
 public:
  // `prompt` is what the attempt sent (for the checks of prompt_token_ids / prompt_tokens).
  UpstreamStreamReader(UpstreamKind kind, int n, int64_t vocab_size,
                       std::span<const int32_t> prompt);

  struct Update {
    size_t choice = 0;
    std::vector<int32_t> tokens;  // new ids
    // kEos or kLength when the choice finished with this update, else kNone.
    engine::FinishCause cause = engine::FinishCause::kNone;
  };
  // Feeds one line of the body (without its newline). Appends what it carried to *out.
  // kCorrupt naming the fault for a malformed event; kIoError with the upstream's message
  // for an error event.
  Status feed(std::string_view line, std::vector<Update>* out);
  // The end-of-stream marker (`data: [DONE]`) was read.
  bool done() const { return done_; }
  // Prompt tokens the upstream reported as served from its cache, once reported.
  std::optional<int64_t> cached_tokens() const { return cached_; }

 private:
  Status feed_completions(const pyjson::Value& ev, std::vector<Update>* out);
  Status feed_generate(const pyjson::Value& ev, std::vector<Update>* out);

  UpstreamKind kind_;
  int n_;
  int64_t vocab_;
  std::span<const int32_t> prompt_;
  std::vector<char> finished_;       // per choice
  std::vector<int32_t> sglang_ids_;  // sglang: every id read (to check cumulative chunks)
  std::optional<int64_t> cached_;
  bool done_ = false;
};

}  // namespace fathom::router
