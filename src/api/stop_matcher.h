// Stop strings over streamed text (OpenAI `stop` on /v1/completions): text goes in as it is
// decoded; what comes out is safe to send, holding back any tail that could still grow into
// a stop string; at the first stop string the output ends before it.
//
// One StopMatcher per response; not thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace fathom::pyjson {
struct Value;
}

namespace fathom::api {

// Reads OpenAI's `stop` field of a request object: absent or null (nothing), a string, or a
// list of at most 16 strings; empty strings stop nothing and are dropped. kInvalidArgument
// with the client-facing message otherwise.
Status read_stop_field(const pyjson::Value& request, std::vector<std::string>* out);

class StopMatcher {
 public:
  // With `include_stop`, the stop string that ends the text is sent with it (vLLM's
  // include_stop_str_in_output).
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);

  // Adds decoded text; appends to *out what may be sent now. Returns true when a stop string
  // was found (everything before it has been sent; nothing after it will be). With `checked`
  // false (the text of an id within vLLM's min_tokens) no stop string may end inside this
  // text, nor inside any unchecked text before it; one that starts there and ends later does.
  bool push(const std::string& text, std::string* out, bool checked = true);
  // The stream ended without a stop string: sends what was held back.
  void finish(std::string* out);
  bool stopped() const { return stopped_; }
  // The stop string that ended the text, if any.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string hold_;
  size_t unchecked_ = 0;  // a stop string must end past this many bytes of hold_
  std::string matched_;
  bool stopped_ = false;
  bool include_stop_ = false;
};

}  // namespace fathom::api
