// SGLang's native generation endpoint, POST /generate: request JSON -> GenerateRequest with
// typed validation (each failure a kInvalidArgument or kUnsupported whose message names the
// field), and the objects it answers with — {text, output_ids, meta_info{id, finish_reason,
// prompt_tokens, completion_tokens, cached_tokens}} — streamed as SGLang streams them by
// default (`data: {...}` SSE events whose text and output_ids hold everything generated so
// far, then `data: [DONE]`) or as one JSON object. Errors have SGLang's shape:
// {"error": {"message": ...}}.
//
// The shape follows SGLang's GenerateReqInput, SamplingParams and TokenizerManager output
// (python/sglang/srt/managers/io_struct.py, sampling/sampling_params.py,
// managers/tokenizer_manager.py). One prompt per request (no batches), one sample (n = 1).
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/conversation.h"
#include "api/structured_output.h"
#include "core/status.h"

namespace fathom::api {

struct GenerateRequest {
  std::string text;                // `text` ...
  std::vector<int32_t> input_ids;  // ... or `input_ids`
  bool prompt_is_ids = false;
  // sampling_params: max_new_tokens (default 128, as SGLang's), temperature, top_p, top_k,
  // min_p, the three penalties, sampling_seed (-> seed), ignore_eos, stop (strings);
  // `extra_key` (SGLang's prefix-cache namespace) -> cache_salt.
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // sampling_params.stop_token_ids
  bool skip_special_tokens = true;      // sampling_params.skip_special_tokens (text only)
  StructuredOutput structured;          // sampling_params.json_schema or .regex
  bool stream = false;
  std::string rid;  // the request id (meta_info.id); empty: the server makes one
};

// Rejected with a 400 naming the field: batches (a list of texts or of id lists), n other than
// 1, logprobs (return_logprob true), images and the other multimodal inputs, and every
// sampling parameter this server does not implement (min_new_tokens, logit_bias, stop_regex,
// ebnf, structural_tag, custom_params, no_stop_trim, spaces_between_special_tokens true, ...).
// Unknown fields and unknown sampling parameters are a 400 too (SGLang fails on the latter).
Result<GenerateRequest> parse_generate_request(std::string_view body, size_t max_body_bytes);

// Why a /generate output finished (meta_info.finish_reason).
struct GenerateFinish {
  enum class Kind { kNone, kStopToken, kStopString, kLength };
  Kind kind = Kind::kNone;
  int32_t token = -1;  // kStopToken: the id (EOS or one of stop_token_ids)
  std::string text;    // kStopString: the stop string
  int64_t length = 0;  // kLength: max_new_tokens
};

struct GenerateUsage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// One output object (a stream event's payload, or the whole non-streamed answer):
// {"text", "output_ids", "meta_info": {"id", "finish_reason" (null, {"type": "stop",
// "matched": id | string} or {"type": "length", "length": n}), "prompt_tokens",
// "completion_tokens", "cached_tokens", "e2e_latency"}}.
std::string generate_output_json(const std::string& text, const std::vector<int32_t>& output_ids,
                                 const std::string& id, const GenerateFinish& finish,
                                 const GenerateUsage& usage, double e2e_seconds);

// {"error": {"message": ...}} (SGLang's error body).
std::string sglang_error_json(const Status& s);
// `data: {"error": {"message": ...}}` then `data: [DONE]`, as SGLang ends a failed stream.
std::string sglang_stream_error(const Status& s);

}  // namespace fathom::api
