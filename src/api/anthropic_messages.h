// Anthropic Messages: request JSON -> ConversationRequest with deepseek-recipe's validation
// (kInvalidArgument, rendered by anthropic_error_json), and parser events -> the Messages
// stream events (message_start, content_block_*, ping, message_delta, message_stop) and the
// complete message. A MessagesResponder serves one response; not thread-safe.
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

struct MessagesOptions {
  // The names the server answers to; null accepts any `model` and uses default_thinking.
  const std::vector<ServedModel>* models = nullptr;
  bool default_thinking = true;
  // Image blocks are accepted only when the served model has a vision tower.
  bool images = false;
  PromptFormat format = PromptFormat::kV41;
  size_t max_body_bytes = 32 << 20;
  // Top-level fields the caller reads from the body itself (the server's test hooks), so they
  // are not reported as unknown.
  std::span<const std::string_view> caller_fields;
  // A body of POST /v1/messages/count_tokens: only the fields that shape the prompt (model,
  // messages, system, tools, tool_choice, thinking, output_config, cache_control, speed) are
  // parameters, so max_tokens is not required and a generation field (max_tokens, stream,
  // temperature, ...) is a 400 naming it, as Anthropic's API answers. Everything else is read
  // and checked as for a generation, so the prompt is the one that request would have.
  bool count_tokens = false;
};

Result<ConversationRequest> parse_messages_request(std::string_view body,
                                                   const MessagesOptions& options);

class MessagesResponder {
 public:
  MessagesResponder(std::string id, std::string model, bool thinking)
      : id_(std::move(id)), model_(std::move(model)), thinking_(thinking) {}

  // The SSE events (`event: X\ndata: {...}\n\n`) for these parser events; the first call
  // also sends message_start (and opens the thinking block in thinking mode).
  std::string stream(const std::vector<prompt::ParserEvent>& events, const Usage& usage);
  // Ends the stream with Anthropic's `event: error` (anthropic_stream_error) instead of
  // message_delta / message_stop, so an engine failure never reads as a normal end.
  std::string stream_error(const Status& s) const;
  void add(const std::vector<prompt::ParserEvent>& events);
  std::string complete(const Usage& usage) const;

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };
  std::string event(const char* name, const pyjson::Value& data) const;
  std::string open_block(Block b, const std::string& tool_name);
  std::string close_block();
  std::string tool_id(int i) const { return "toolu_" + id_ + "_" + std::to_string(i); }

  std::string id_, model_;
  bool thinking_;
  bool started_ = false, pinged_ = false;
  Block open_ = Block::kNone;
  int index_ = -1;
  int tools_ = 0;
  // Folded state for complete().
  struct Part {
    Block kind;
    std::string text;  // thinking / text / tool arguments JSON
    std::string name;
  };
  std::vector<Part> parts_;
  prompt::FinishReason finish_ = prompt::FinishReason::kEndOfStream;
  std::string stop_sequence_;
};

const char* messages_stop_reason(prompt::FinishReason r);

}  // namespace fathom::api
