// The request's logits controls (api::SamplingParams, read by api/logit_controls.h) onto the
// engine's request: ids as given, and bad_words tokenized as vLLM does (each word and its
// space-prefixed form: engine/request.h says what the engine does with them).
//
// Free functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "api/conversation.h"
#include "core/status.h"
#include "engine/request.h"

namespace fathom {

class Tokenizer;

// Python's str.lstrip(): `s` without its leading Unicode whitespace.
std::string_view lstrip_unicode_space(std::string_view s);

// Sets g's logit_bias, allowed_token_ids, min_tokens and bad_words (with their text) from `s`.
// kInvalidArgument naming bad_words when a word has no tokens; the engine checks the rest.
Status apply_logit_controls(const api::SamplingParams& s, const Tokenizer& tok,
                            engine::GenerationRequest* g);

}  // namespace fathom
