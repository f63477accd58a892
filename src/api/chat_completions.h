// OpenAI Chat Completions: request JSON -> ConversationRequest, with deepseek-recipe's
// validation rules (each failure a kInvalidArgument Status whose message is client-facing
// and names the field), and parser events -> the protocol's chunks (SSE) and complete
// response. A ChatResponder serves one choice of one response; not thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api/conversation.h"
#include "api/models.h"
#include "api/usage.h"
#include "core/status.h"
#include "prompt/output_parser.h"

namespace fathom::api {

struct ChatOptions {
  // The names the server answers to; null accepts any `model` and uses default_thinking.
  const std::vector<ServedModel>* models = nullptr;
  bool default_thinking = true;
  // Image parts are accepted only when the served model has a vision tower.
  bool images = false;
  PromptFormat format = PromptFormat::kV41;
  size_t max_body_bytes = 32 << 20;
  // Top-level fields the caller reads from the body itself (the server's test hooks), so they
  // are not reported as unknown.
  std::span<const std::string_view> caller_fields;
  // A conversation body of vLLM's POST /tokenize (its TokenizeChatRequest): only its fields
  // (model, messages, tools, chat_template_kwargs, add_generation_prompt,
  // continue_final_message, chat_template, mm_processor_kwargs, media_io_kwargs, and
  // add_special_tokens and return_token_strs, which api/tokenize.h reads) are parameters;
  // the rest is read and checked as for a generation, so the prompt is the one that request
  // would have.
  bool tokenize = false;
};

Result<ConversationRequest> parse_chat_request(std::string_view body, const ChatOptions& options);

// Which choice a responder serves: choice `index` of `n` (a request's `n`); `logprobs` as
// the request asked (ConversationRequest::logprobs).
struct ChatChoice {
  int index = 0;
  int n = 1;
  bool logprobs = false;
  bool continuous_usage = false;  // ConversationRequest::continuous_usage
};

class ChatResponder {
 public:
  ChatResponder(std::string id, std::string model, int64_t created, bool thinking,
                bool include_usage, ChatChoice choice = {})
      : id_(std::move(id)),
        model_(std::move(model)),
        created_(created),
        thinking_(thinking),
        include_usage_(include_usage),
        choice_(choice) {}

  // Streaming: the SSE `data:` lines for these events (the first call also opens the
  // message). `logprobs` are those of the tokens that produced the events; they go with the
  // content chunks of this call (log probabilities of tokens that produced only reasoning or
  // tool calls are not returned, as the field covers message content; those of tokens that
  // produced nothing yet wait for the next call). With n == 1 the finish event is followed by
  // stream_tail(usage); with n > 1 the server sends stream_tail once all choices finished.
  std::string stream(const std::vector<prompt::ParserEvent>& events, const Usage& usage,
                     const std::vector<TokenLogprob>& logprobs = {});
  // With continuous usage: this choice's usage so far, which the next chunks carry.
  void set_usage(const Usage& choice_usage) { live_usage_ = choice_usage; }
  // The usage chunk (when the request asked for usage) and `data: [DONE]`.
  std::string stream_tail(const Usage& total) const;
  // Ends the stream with an error instead of a finish: openai_stream_error(s). Call once per
  // response, not per choice.
  std::string stream_error(const Status& s) const;

  // Folds events (and their tokens' log probabilities) into the complete response.
  void add(const std::vector<prompt::ParserEvent>& events,
           const std::vector<TokenLogprob>& logprobs = {});
  // The complete chat.completion of a response with this single choice.
  std::string complete(const Usage& usage) const;

  int index() const { return choice_.index; }
  bool finished() const { return finished_; }

 private:
  friend std::string chat_completion_json(const std::vector<ChatResponder>& choices,
                                          const Usage& usage);
  std::string chunk(const std::string& delta_json, const char* finish_reason,
                    const pyjson::Value* logprobs, bool opening = false) const;
  pyjson::Value choice_json() const;
  void fold(const std::vector<prompt::ParserEvent>& events);
  // Appends `logprobs` to pending_ and returns what content events of this call may carry.
  std::vector<TokenLogprob> take_content_logprobs(const std::vector<prompt::ParserEvent>& events,
                                                  const std::vector<TokenLogprob>& logprobs);
  std::string tool_id(int index) const;

  std::string id_, model_;
  int64_t created_;
  bool thinking_, include_usage_;
  ChatChoice choice_;
  Usage live_usage_;
  bool opened_ = false;
  std::vector<TokenLogprob> pending_;  // tokens that produced no event yet
  // Folded state.
  std::string content_, reasoning_;
  std::vector<TokenLogprob> content_logprobs_;
  struct Call {
    std::string name, arguments;
  };
  std::vector<Call> calls_;
  prompt::FinishReason finish_ = prompt::FinishReason::kEndOfStream;
  bool finished_ = false;
};

// The complete chat.completion of a response with n choices (in index order) and one usage.
// REQUIRES: choices is not empty; all serve the same response.
std::string chat_completion_json(const std::vector<ChatResponder>& choices, const Usage& usage);

const char* chat_finish_reason(prompt::FinishReason r);

// OpenAI's chat logprobs {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}.
pyjson::Value chat_logprobs_json(const std::vector<TokenLogprob>& tokens);

}  // namespace fathom::api
