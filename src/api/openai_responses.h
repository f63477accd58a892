// OpenAI Responses: request JSON -> ConversationRequest with deepseek-recipe's conversion
// (instructions, input items, call/output grouping, flattened namespace tools, the
// apply_patch custom tool) and validation (kInvalidArgument, OpenAI error shape), and parser
// events -> the Responses stream events and the final response object. A
// ResponsesResponder serves one response; not thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api/chat_completions.h"
#include "api/conversation.h"
#include "api/models.h"
#include "api/usage.h"
#include "prompt/output_parser.h"

namespace fathom::api {

struct ResponsesOptions {
  // The names the server answers to; null accepts any `model` and uses default_thinking.
  const std::vector<ServedModel>* models = nullptr;
  bool default_thinking = true;
  // input_image parts are accepted only when the served model has a vision tower.
  bool images = false;
  // deepseek-recipe's responses_web_search = Ignore: drop web_search tools instead of a 400.
  bool ignore_web_search_tools = false;
  PromptFormat format = PromptFormat::kV41;
  size_t max_body_bytes = 32 << 20;
  // Top-level fields the caller reads from the body itself (the server's test hooks), so they
  // are not reported as unknown.
  std::span<const std::string_view> caller_fields;
  // A body of POST /v1/responses/input_tokens: only the fields that shape the prompt (model,
  // input, instructions, reasoning, text, tools, tool_choice, parallel_tool_calls, truncation,
  // previous_response_id, conversation, personality) are parameters; a generation field (stream,
  // max_output_tokens, temperature, ...) is a 400 naming it. Everything else is read and
  // checked as for a generation, so the prompt is the one that request would have.
  bool input_tokens = false;
};

Result<ConversationRequest> parse_responses_request(std::string_view body,
                                                    const ResponsesOptions& options);

class ResponsesResponder {
 public:
  ResponsesResponder(std::string id, std::string model, int64_t created)
      : id_(std::move(id)), model_(std::move(model)), created_(created) {}

  // SSE events (`event: X\ndata: {...}\n\n`); the first call sends response.created and
  // response.in_progress, the finish event response.completed (or .incomplete). The usage's
  // reasoning_tokens become output_tokens_details.reasoning_tokens.
  std::string stream(const std::vector<prompt::ParserEvent>& events, const Usage& usage);
  // Ends the stream with an error instead of a finish: response.created and
  // response.in_progress if nothing was sent yet, an `error` event ({code, message,
  // param}) and then `response.failed`, whose response has status "failed" and `error`
  // {code, message} (code "invalid_prompt" for a client fault, else "server_error"), with
  // the output produced so far.
  std::string stream_error(const Status& s, const Usage& usage);
  void add(const std::vector<prompt::ParserEvent>& events);
  std::string complete(const Usage& usage) const;

 private:
  struct Item {
    enum class Kind { kReasoning, kMessage, kFunctionCall } kind;
    std::string id, text, name, call_id;
  };
  pyjson::Value item_json(const Item& it, bool done) const;
  pyjson::Value response_json(const Usage& u, bool final, const Status* error = nullptr) const;
  std::string event(const char* type, pyjson::Value data);
  std::string open_item(Item::Kind k, const std::string& name);
  std::string close_item();

  std::string id_, model_;
  int64_t created_;
  int seq_ = 0;
  bool started_ = false;
  std::vector<Item> items_;
  bool item_open_ = false;
  int calls_ = 0;
  prompt::FinishReason finish_ = prompt::FinishReason::kEndOfStream;
  bool finished_ = false;
};

}  // namespace fathom::api
