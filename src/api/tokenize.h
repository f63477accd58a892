// vLLM's POST /tokenize: a prompt (its TokenizeCompletionRequest: model, prompt,
// add_special_tokens (default true), return_token_strs) or a conversation (its
// TokenizeChatRequest: `messages` and the fields ChatOptions::tokenize lists, rendered as a
// Chat Completions request with them would be; add_special_tokens default false), and the
// answer {"count", "max_model_len", "tokens", "token_strs"}; and /detokenize. A field vLLM's
// request does not define is a 400 naming it (vLLM itself ignores them). Pure functions; safe from
// any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api/chat_completions.h"
#include "api/conversation.h"
#include "core/status.h"

namespace fathom::api {

struct TokenizeRequest {
  std::optional<ConversationRequest> chat;  // the conversation form
  std::string prompt;                       // the prompt form
  // The prompt form's: apply the tokenizer's post-processor template (BOS/EOS as
  // tokenizer.json defines). A conversation takes only false (its prompt format places every
  // control token itself).
  bool add_special_tokens = true;
  bool return_token_strs = false;
};

// `chat` gives the served models and limits; its `tokenize` flag is set here.
Result<TokenizeRequest> parse_tokenize_request(std::string_view body, ChatOptions chat);

// vLLM's POST /detokenize (its DetokenizeRequest: model, tokens): the ids, each in
// [0, INT32_MAX] (the tokenizer checks they exist).
Result<std::vector<int32_t>> parse_detokenize_request(std::string_view body,
                                                      const ChatOptions& chat);

// token_strs: each id's spelling (null when not asked for).
std::string tokenize_response_json(std::span<const int32_t> ids, int64_t max_model_len,
                                   const std::vector<std::string_view>* token_strs);

}  // namespace fathom::api
