// OutputParser: the API-facing, streaming parser of model output, working on token ids.
// Control tokens are recognised by id only — `</think>` ends reasoning, EOS ends the turn,
// the `｜DSML｜` token opens and closes tool-call markup — so text that merely spells them
// (ordinary tokens for "</" "think>") stays text. Both DSML dialects are accepted (V4
// `tool_calls`/`invoke`, V4.1 ` calls`/` invoke`). It yields reasoning and content deltas,
// tool-call begins and argument deltas whose concatenation is always valid JSON (a
// string="false" value that is not JSON becomes a JSON string; parameter names are
// JSON-escaped), and a finish event. Partial markup never reaches content; stop sequences
// apply to content only, and only the bytes that could still complete a match are held
// back. One parser per generated sequence; not thread-safe. The Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace fathom::prompt {

enum class FinishReason { kStop, kLength, kToolCalls, kStopSequence, kEndOfStream };
const char* finish_reason_name(FinishReason r);

struct ParserEvent {
  enum class Kind { kReasoning, kContent, kToolCallBegin, kToolArguments, kToolCallEnd, kFinish };
  Kind kind = Kind::kContent;
  std::string text;     // reasoning/content/argument delta; the name for kToolCallBegin
  int tool_index = -1;  // for tool events
  FinishReason finish = FinishReason::kStop;
  std::string stop_sequence;  // for kFinish with kStopSequence
};

struct OutputParserOptions {
  bool thinking = false;         // output starts inside reasoning
  bool parse_tool_calls = true;  // DSML markup becomes tool calls (else it is dropped)
  bool start_in_tool_block =
      false;  // the prompt ended inside an open DSML block (tool_choice required)
  std::vector<std::string> stop_sequences;
  // vLLM's min_tokens: a stop sequence ends the output only where it ends in the text of an id
  // after the first min_tokens ids pushed (text mode: not applied).
  int64_t min_tokens = 0;
  // vLLM's include_stop_str_in_output: the stop sequence that ends the content is part of it.
  bool include_stop_sequence = false;
};

class OutputParser {
 public:
  static Result<OutputParser> create(const Tokenizer& tokenizer, OutputParserOptions options);

  // Feeds one generated id; appends the events it completes. kOutOfRange for an unknown id.
  // After the finish event, further ids are ignored.
  Status push(int32_t id, std::vector<ParserEvent>& out);
  // Text-chunk input, for backends that return only text. Control-token spellings in the
  // text are taken as those tokens, so this mode is SPOOFABLE: model text that spells
  // `</think>` or `<｜end▁of▁sentence｜>` with ordinary tokens acts as the token. It is only
  // used when a caller opts in; never mix it with push() on one parser. kInvalidArgument for
  // text that is not UTF-8.
  Status push_text(std::string_view text, std::vector<ParserEvent>& out);
  // The engine stopped (length limit, or the stream ended): flushes and finishes.
  void finish(FinishReason reason, std::vector<ParserEvent>& out);
  bool finished() const { return state_ == State::kFinished; }
  int tool_calls() const { return tool_count_; }

 private:
  enum class State {
    kReasoning,
    kContent,
    kTagName,
    kInvokeName,
    kParamName,
    kParamType,
    kParamValue,
    kBetween,
    kAfterBlock,
    kFinished
  };

  OutputParser(const Tokenizer& t, OutputParserOptions o) : tok_(&t), opt_(std::move(o)) {}
  void on_text(std::string_view text, std::vector<ParserEvent>& out);
  void on_dsml(std::vector<ParserEvent>& out);
  void on_end(FinishReason reason, std::vector<ParserEvent>& out);
  void on_control(int32_t id, std::vector<ParserEvent>& out);
  void emit_plain(std::vector<ParserEvent>& out, bool final);
  void close_value(std::vector<ParserEvent>& out);
  void close_invoke(std::vector<ParserEvent>& out);
  void process_tag(std::vector<ParserEvent>& out);
  void add(std::vector<ParserEvent>& out, ParserEvent::Kind k, std::string text);

  const Tokenizer* tok_;
  OutputParserOptions opt_;
  int32_t eos_ = -1, think_end_ = -1, think_start_ = -1, dsml_ = -1;
  State state_ = State::kContent;
  std::string pending_bytes_;  // undecoded bytes of an incomplete UTF-8 character
  std::string text_hold_;      // text mode: a possible control spelling not yet complete
  std::vector<std::pair<std::string, int32_t>> text_controls_;  // text mode: spellings -> ids
  std::string hold_;             // reasoning/content text held back (possible markup/stop start)
  int64_t pushed_ = 0;           // ids pushed so far
  bool stop_unchecked_ = false;  // the id being pushed is within opt_.min_tokens
  size_t stop_from_ = 0;         // content: a stop sequence must end past this many bytes of hold_
  std::string tag_;              // text of the tag being read
  bool closing_ = false;         // the tag being read is a closing tag ("</" before the DSML id)
  bool in_block_ = false;
  bool in_invoke_ = false;
  int params_ = 0;  // parameters of the current invoke
  bool value_is_string_ = true;
  std::string value_;  // raw (string="false") value being buffered
  int tool_count_ = 0;
};

}  // namespace fathom::prompt
