// OpenAI Responses: request JSON -> ConversationRequest with deepseek-recipe's conversion
// (instructions, input items, call/output grouping, flattened namespace tools, the
// apply_patch custom tool) and validation (kInvalidArgument, OpenAI error shape), and parser
// events -> the Responses stream events and the final response object. A
// ResponsesResponder serves one response; not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/chat_completions.h"
#include "api/conversation.h"
#include "prompt/output_parser.h"

namespace fathom::api {

struct ResponsesOptions {
  bool default_thinking = true;
  PromptFormat format = PromptFormat::kV41;
  size_t max_body_bytes = 32 << 20;
};

Result<ConversationRequest> parse_responses_request(std::string_view body,
                                                    const ResponsesOptions& options);

class ResponsesResponder {
 public:
  ResponsesResponder(std::string id, std::string model, int64_t created)
      : id_(std::move(id)), model_(std::move(model)), created_(created) {}

  // SSE events (`event: X\ndata: {...}\n\n`); the first call sends response.created and
  // response.in_progress, the finish event response.completed (or .incomplete).
  std::string stream(const std::vector<prompt::ParserEvent>& events, const Usage& usage);
  void add(const std::vector<prompt::ParserEvent>& events);
  std::string complete(const Usage& usage) const;

 private:
  struct Item {
    enum class Kind { kReasoning, kMessage, kFunctionCall } kind;
    std::string id, text, name, call_id;
  };
  pyjson::Value item_json(const Item& it, bool done) const;
  pyjson::Value response_json(const Usage& u, bool final) const;
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
