// ConversationRequest: what a protocol adapter produces from a client request — the
// conversation in the official encoders' message shape, the prompt options, sampling
// parameters and output-parsing options — and the API-mode renderer that turns it into a
// Prompt the way deepseek-recipe does (thinking kept on every turn, tools and the response
// format on the first system message, the assistant header always appended, tool_choice
// required opening the DSML block). Plain data; render_api() is a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/structured_output.h"
#include "core/py_json.h"
#include "core/status.h"
#include "prompt/output_parser.h"
#include "prompt/prompt.h"

namespace fathom::api {

enum class PromptFormat { kV4, kV41 };
// The reasoning-effort table is a per-checkpoint property (prompt-format.md §4.2).
enum class Checkpoint { kDefault, kV4Preview, kV4_0731, kV41PreRelease, kV41Release };
enum class ToolChoice { kNone, kAuto, kRequired };
enum class Effort { kLow, kHigh, kXhigh, kMax };

struct SamplingParams {
  std::optional<double> temperature, top_p, presence_penalty, frequency_penalty;
  std::optional<double> min_p, repetition_penalty;  // vLLM's extensions
  std::optional<int64_t> max_tokens, seed, top_k;
  std::vector<std::string> stop;
  bool ignore_eos = false;  // vLLM's extension: generate past the end-of-sentence token
  // The tenant the prompt's cached KV belongs to (vLLM's cache_salt, else OpenAI's
  // safety_identifier or user, Anthropic's metadata.user_id); empty: shared. Prefix-cache and
  // KV-store hits only come from requests with the same salt.
  std::string cache_salt;
  // The KV store's retention class the request names (Fathom's `retention` field; the server
  // checks it against its configured classes); empty: not named.
  std::string retention;
  // The longest Anthropic cache_control ttl in the request (5 minutes or 1 hour), ms; 0: the
  // request has no cache_control. The server maps it onto a retention class.
  int64_t cache_control_ttl_ms = 0;
  // vLLM's logits controls (api/logit_controls.h; engine/request.h says what they do). The
  // server tokenizes bad_words; bad_words_ids is Fathom's id-level form of them.
  std::vector<std::pair<int32_t, double>> logit_bias;
  std::vector<int32_t> allowed_token_ids;
  int64_t min_tokens = 0;
  std::vector<std::string> bad_words;
  std::vector<std::vector<int32_t>> bad_words_ids;
  // vLLM's truncate_prompt_tokens: only the prompt's last N ids are kept (-1: as many as the
  // context length); 0: all. include_stop_str_in_output: the stop string that ended the
  // output is part of it.
  int64_t truncate_prompt_tokens = 0;
  bool include_stop_str = false;
};

struct ConversationRequest {
  pyjson::Value messages = pyjson::Value::array();  // role/content/... as the encoders take them
  pyjson::Value tools = pyjson::Value::array();     // OpenAI {"type":"function","function":{...}}
  ToolChoice tool_choice = ToolChoice::kAuto;
  // The tools sent with strict: true: their calls' arguments must follow their schemas (the
  // server constrains the DSML block with a grammar).
  std::vector<std::string> strict_tools;
  bool thinking = true;
  std::optional<Effort> effort;   // none: the default for thinking (High)
  std::optional<int64_t> budget;  // V4.1 integer effort 1..100 (overrides effort)
  // Most tokens the reasoning may take (Anthropic's thinking.budget_tokens); -1: no limit.
  // The server ends the reasoning when it is spent.
  int64_t reasoning_budget = -1;
  bool json_object = false;  // response_format {"type": "json_object"}
  // response_format / text.format json_schema as the first system message shows it (null:
  // none; json_object is shown as {"type": "json_object"}).
  pyjson::Value response_format;
  // The output constraint (response_format / text.format, vLLM's structured_outputs and
  // guided_* fields); the server compiles it.
  StructuredOutput structured;
  SamplingParams sampling;
  std::string model;
  bool stream = false;
  bool include_usage = true;
  // vLLM's stream_options.continuous_usage_stats: every chunk carries its choice's usage so far.
  bool continuous_usage = false;
  int n = 1;              // choices to generate (Chat Completions 1..128)
  bool logprobs = false;  // return each content token's log probability
  int top_logprobs = 0;   // and this many alternatives per token (0..20)

  prompt::OutputParserOptions parsing_options() const;
};

// The prompt for a request, recipe-compatible. Errors are kInvalidArgument. kDefault is the
// V4 preview table for kV4 and the V4.1 release table for kV41.
Result<prompt::Prompt> render_api(const ConversationRequest& req, PromptFormat format,
                                  Checkpoint checkpoint = Checkpoint::kDefault);

// The effort prefix text a V4 checkpoint renders (empty for none); the V4.1 budget.
std::string v4_effort_prefix(Checkpoint c, std::optional<Effort> effort);
int64_t v41_effort_budget(Checkpoint c, std::optional<Effort> effort);

}  // namespace fathom::api
