// What the server hands the protocol responders besides parser events: token counts and
// per-token log probabilities. Plain data, no engine dependency; the server fills them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fathom::api {

// Token counts of one response. With n choices, completion_tokens and reasoning_tokens are
// summed over the choices (prompt and cached counted once).
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t reasoning_tokens = 0;  // part of completion_tokens spent in reasoning
};

// One generated token's log probability and the most likely alternatives at that position
// (most likely first). Token text is the token's bytes, which may be part of a UTF-8
// character; the responders emit it lossily as a string and exactly as `bytes`. A logprob of
// -inf is written as -9999.0, as vLLM does.
struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

}  // namespace fathom::api
