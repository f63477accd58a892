// OpenAI Chat Completions: request JSON -> ConversationRequest, with deepseek-recipe's
// validation rules (each failure a kInvalidArgument Status whose message is client-facing),
// and parser events -> the protocol's chunks (SSE) and complete response. A ChatResponder
// serves one response; not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/conversation.h"
#include "prompt/output_parser.h"

namespace fathom::api {

struct ChatOptions {
  bool default_thinking = true;
  PromptFormat format = PromptFormat::kV41;
  size_t max_body_bytes = 32 << 20;
};

Result<ConversationRequest> parse_chat_request(std::string_view body, const ChatOptions& options);

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

class ChatResponder {
 public:
  ChatResponder(std::string id, std::string model, int64_t created, bool thinking,
                bool include_usage)
      : id_(std::move(id)),
        model_(std::move(model)),
        created_(created),
        thinking_(thinking),
        include_usage_(include_usage) {}

  // Streaming: the SSE `data:` lines for these events (the first call also opens the
  // message). After the finish event, `data: [DONE]` follows the usage chunk.
  std::string stream(const std::vector<prompt::ParserEvent>& events, const Usage& usage);
  // Folds events into the complete response (call once with all events, or repeatedly).
  void add(const std::vector<prompt::ParserEvent>& events);
  std::string complete(const Usage& usage) const;

 private:
  std::string chunk(const std::string& delta_json, const char* finish_reason, bool with_usage,
                    const Usage& u) const;
  std::string tool_id(int index) const { return "call_" + id_ + "_" + std::to_string(index); }

  std::string id_, model_;
  int64_t created_;
  bool thinking_, include_usage_;
  bool opened_ = false;
  // Folded state.
  std::string content_, reasoning_;
  struct Call {
    std::string name, arguments;
  };
  std::vector<Call> calls_;
  prompt::FinishReason finish_ = prompt::FinishReason::kEndOfStream;
  bool finished_ = false;
};

const char* chat_finish_reason(prompt::FinishReason r);

}  // namespace fathom::api
