// vLLM's logits controls as request fields: OpenAI's logit_bias, vLLM's allowed_token_ids,
// min_tokens and bad_words, Fathom's bad_words_ids (/v1/completions: the id-level form a
// router sends) and SGLang's sampling_params logit_bias / min_new_tokens. Read into
// SamplingParams; the engine checks the ids against its vocabulary (engine/request.h).
//
// Free functions; thread-safe.
#pragma once

#include <string>

#include "api/conversation.h"
#include "core/status.h"

namespace fathom::pyjson {
struct Value;
}

namespace fathom::api {

struct LogitControlFields {
  std::string prefix;                     // how the object is named in errors ("sampling_params.")
  const char* min_tokens = "min_tokens";  // SGLang: min_new_tokens
  bool allowed_and_bad_words = true;      // allowed_token_ids and bad_words (not SGLang's)
  bool bad_words_ids = false;             // Fathom's bad_words_ids (/v1/completions)
};

// Reads the fields `fields` names from the request object `r` into `sp`. kInvalidArgument
// naming the field for a wrong type or value.
Status read_logit_controls(const pyjson::Value& r, SamplingParams& sp,
                           const LogitControlFields& fields = {});

}  // namespace fathom::api
