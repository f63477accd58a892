// Loading tokenizer.json (the Hugging Face `tokenizers` serialization) with simdjson.
// Every field is checked; anything Fathom does not implement is a kUnsupported error that
// names it, and anything malformed is kCorrupt. Nothing here trusts the file.

#include <simdjson.h>

#include <algorithm>

#include "core/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"

namespace fathom {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

Status bad(std::string what) { return corrupt("tokenizer.json: " + what); }
Status unsupported_feature(std::string what) {
  return unsupported("tokenizer.json: " + what + " is not supported");
}

// Optional typed fields: absent or null -> default; a wrong type -> error.
Status get_bool(object o, const char* key, bool def, bool* out, std::string_view where) {
  element e;
  if (o[key].get(e) != simdjson::SUCCESS || e.is_null()) {
    *out = def;
    return Status::ok();
  }
  if (e.get(*out) != simdjson::SUCCESS)
    return bad(std::string(where) + "." + key + " must be a boolean");
  return Status::ok();
}

Status get_string(object o, const char* key, std::string_view* out, std::string_view where) {
  element e;
  if (o[key].get(e) != simdjson::SUCCESS)
    return bad(std::string(where) + " has no \"" + key + "\"");
  if (e.get(*out) != simdjson::SUCCESS)
    return bad(std::string(where) + "." + key + " must be a string");
  return Status::ok();
}

Result<std::string_view> type_of(element e, std::string_view where) {
  object o;
  if (e.get(o) != simdjson::SUCCESS) return bad(std::string(where) + " must be an object");
  std::string_view t;
  FATHOM_RETURN_IF_ERROR(get_string(o, "type", &t, where));
  return t;
}

// A {"String": s} or {"Regex": r} pattern.
struct Pattern {
  bool is_regex = false;
  std::string text;
};
Result<Pattern> parse_pattern(object o, std::string_view where) {
  element p;
  if (o["pattern"].get(p) != simdjson::SUCCESS) return bad(std::string(where) + " has no pattern");
  object po;
  if (p.get(po) != simdjson::SUCCESS) return bad(std::string(where) + ".pattern must be an object");
  std::string_view s;
  Pattern out;
  if (po["Regex"].get(s) == simdjson::SUCCESS) {
    out.is_regex = true;
  } else if (po["String"].get(s) != simdjson::SUCCESS) {
    return bad(std::string(where) + ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }
  if (!utf8::is_valid(s)) return bad(std::string(where) + ".pattern is not valid UTF-8");
  out.text = std::string(s);
  return out;
}

Result<std::unique_ptr<tok::Normalizer>> parse_normalizer(element e) {
  FATHOM_ASSIGN_OR_RETURN(std::string_view type, type_of(e, "normalizer"));
  object o = e.get_object().value_unsafe();
  using namespace tok;
  if (type == "Sequence") {
    array steps;
    if (o["normalizers"].get(steps) != simdjson::SUCCESS)
      return bad("normalizer Sequence has no \"normalizers\" array");
    std::vector<std::unique_ptr<Normalizer>> v;
    for (element s : steps) {
      FATHOM_ASSIGN_OR_RETURN(auto n, parse_normalizer(s));
      v.push_back(std::move(n));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(v)));
  }
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNFC));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNFD));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNFKC));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Strip") {
    bool l = true, r = true;
    FATHOM_RETURN_IF_ERROR(get_bool(o, "strip_left", true, &l, "normalizer"));
    FATHOM_RETURN_IF_ERROR(get_bool(o, "strip_right", true, &r, "normalizer"));
    return std::unique_ptr<Normalizer>(new StripNormalizer(l, r));
  }
  if (type == "Prepend") {
    std::string_view p;
    FATHOM_RETURN_IF_ERROR(get_string(o, "prepend", &p, "normalizer Prepend"));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::string(p)));
  }
  if (type == "Replace") {
    FATHOM_ASSIGN_OR_RETURN(Pattern p, parse_pattern(o, "normalizer Replace"));
    std::string_view content;
    FATHOM_RETURN_IF_ERROR(get_string(o, "content", &content, "normalizer Replace"));
    std::unique_ptr<Regex> re;
    if (p.is_regex) {
      FATHOM_ASSIGN_OR_RETURN(re, Regex::compile(p.text));
    }
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(p.is_regex ? "" : p.text, std::move(re), std::string(content)));
  }
  return unsupported_feature("normalizer type \"" + std::string(type) + "\"");
}

Result<tok::SplitBehavior> parse_behavior(object o) {
  std::string_view b;
  FATHOM_RETURN_IF_ERROR(get_string(o, "behavior", &b, "pre_tokenizer Split"));
  using tok::SplitBehavior;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return bad("unknown Split behavior \"" + std::string(b) + "\"");
}

struct PreTokenizerInfo {
  bool has_byte_level = false;
};

Result<std::unique_ptr<tok::PreTokenizer>> parse_pre_tokenizer(element e, PreTokenizerInfo& info) {
  FATHOM_ASSIGN_OR_RETURN(std::string_view type, type_of(e, "pre_tokenizer"));
  object o = e.get_object().value_unsafe();
  using namespace tok;
  if (type == "Sequence") {
    array steps;
    if (o["pretokenizers"].get(steps) != simdjson::SUCCESS)
      return bad("pre_tokenizer Sequence has no \"pretokenizers\" array");
    std::vector<std::unique_ptr<PreTokenizer>> v;
    for (element s : steps) {
      FATHOM_ASSIGN_OR_RETURN(auto p, parse_pre_tokenizer(s, info));
      // A ByteLevel without prefix space or regex changes no piece boundaries.
      auto* bl = dynamic_cast<ByteLevelPreTokenizer*>(p.get());
      if (bl != nullptr && bl->is_noop()) continue;
      v.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(v)));
  }
  if (type == "Split") {
    FATHOM_ASSIGN_OR_RETURN(Pattern p, parse_pattern(o, "pre_tokenizer Split"));
    FATHOM_ASSIGN_OR_RETURN(SplitBehavior b, parse_behavior(o));
    bool invert = false;
    FATHOM_RETURN_IF_ERROR(get_bool(o, "invert", false, &invert, "pre_tokenizer Split"));
    if (p.is_regex) {
      FATHOM_ASSIGN_OR_RETURN(auto s, SplitPreTokenizer::from_regex(p.text, b, invert));
      return std::unique_ptr<PreTokenizer>(std::move(s));
    }
    return std::unique_ptr<PreTokenizer>(SplitPreTokenizer::from_literal(p.text, b, invert));
  }
  if (type == "ByteLevel") {
    bool prefix = true, use_regex = true;
    FATHOM_RETURN_IF_ERROR(
        get_bool(o, "add_prefix_space", true, &prefix, "pre_tokenizer ByteLevel"));
    FATHOM_RETURN_IF_ERROR(get_bool(o, "use_regex", true, &use_regex, "pre_tokenizer ByteLevel"));
    info.has_byte_level = true;
    FATHOM_ASSIGN_OR_RETURN(auto b, ByteLevelPreTokenizer::create(prefix, use_regex));
    return std::unique_ptr<PreTokenizer>(std::move(b));
  }
  if (type == "Digits") {
    bool individual = false;
    FATHOM_RETURN_IF_ERROR(
        get_bool(o, "individual_digits", false, &individual, "pre_tokenizer Digits"));
    return std::unique_ptr<PreTokenizer>(new DigitsPreTokenizer(individual));
  }
  return unsupported_feature("pre_tokenizer type \"" + std::string(type) + "\"");
}

// True if `e` is exactly DeepSeek's pre-tokenizer configuration.
bool is_deepseek_pre_tokenizer(element e) {
  object o;
  std::string_view t;
  if (e.get(o) != simdjson::SUCCESS || o["type"].get(t) != simdjson::SUCCESS || t != "Sequence")
    return false;
  array steps;
  if (o["pretokenizers"].get(steps) != simdjson::SUCCESS || steps.size() != 4) return false;
  const char* patterns[3] = {tok::DeepSeekPreTokenizer::kDigitsPattern,
                             tok::DeepSeekPreTokenizer::kCjkPattern,
                             tok::DeepSeekPreTokenizer::kMainPattern};
  size_t i = 0;
  for (element s : steps) {
    object so;
    if (s.get(so) != simdjson::SUCCESS || so["type"].get(t) != simdjson::SUCCESS) return false;
    if (i < 3) {
      std::string_view re, behavior;
      bool invert = false;
      if (t != "Split" || so["pattern"]["Regex"].get(re) != simdjson::SUCCESS || re != patterns[i])
        return false;
      if (so["behavior"].get(behavior) != simdjson::SUCCESS || behavior != "Isolated") return false;
      element inv;
      if (so["invert"].get(inv) == simdjson::SUCCESS &&
          (inv.get(invert) != simdjson::SUCCESS || invert))
        return false;
    } else {
      bool prefix = true, use_regex = true;
      if (t != "ByteLevel") return false;
      if (!get_bool(so, "add_prefix_space", true, &prefix, "").is_ok() || prefix) return false;
      if (!get_bool(so, "use_regex", true, &use_regex, "").is_ok() || use_regex) return false;
    }
    ++i;
  }
  return true;
}

Result<int32_t> special_id(element e, std::string_view where) {
  // Roberta/Bert processors write ["</s>", 2].
  array a;
  int64_t id = 0;
  if (e.get(a) != simdjson::SUCCESS || a.size() != 2 || a.at(1).get(id) != simdjson::SUCCESS ||
      id < 0 || id > INT32_MAX) {
    return bad(std::string(where) + " must be [\"token\", id]");
  }
  return static_cast<int32_t>(id);
}

Status parse_post_processor(element e, SpecialTemplate& t) {
  FATHOM_ASSIGN_OR_RETURN(std::string_view type, type_of(e, "post_processor"));
  object o = e.get_object().value_unsafe();
  if (type == "ByteLevel") return Status::ok();  // offsets only
  if (type == "Sequence") {
    array steps;
    if (o["processors"].get(steps) != simdjson::SUCCESS)
      return bad("post_processor Sequence has no \"processors\" array");
    for (element s : steps) FATHOM_RETURN_IF_ERROR(parse_post_processor(s, t));
    return Status::ok();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    element cls, sep;
    if (o["cls"].get(cls) != simdjson::SUCCESS || o["sep"].get(sep) != simdjson::SUCCESS)
      return bad("post_processor " + std::string(type) + " needs cls and sep");
    FATHOM_ASSIGN_OR_RETURN(int32_t c, special_id(cls, "post_processor.cls"));
    FATHOM_ASSIGN_OR_RETURN(int32_t s, special_id(sep, "post_processor.sep"));
    t.prefix.push_back(c);
    t.suffix.push_back(s);
    return Status::ok();
  }
  if (type == "TemplateProcessing") {
    array single;
    object specials;
    if (o["single"].get(single) != simdjson::SUCCESS)
      return bad("post_processor TemplateProcessing has no \"single\" array");
    if (o["special_tokens"].get(specials) != simdjson::SUCCESS)
      return bad("post_processor TemplateProcessing has no \"special_tokens\" object");
    bool seen_sequence = false;
    for (element piece : single) {
      object po;
      if (piece.get(po) != simdjson::SUCCESS)
        return bad("post_processor template piece must be an object");
      object st;
      if (po["SpecialToken"].get(st) == simdjson::SUCCESS) {
        std::string_view name;
        FATHOM_RETURN_IF_ERROR(get_string(st, "id", &name, "post_processor SpecialToken"));
        object spec;
        array ids;
        if (specials[name].get(spec) != simdjson::SUCCESS ||
            spec["ids"].get(ids) != simdjson::SUCCESS) {
          return bad("post_processor special token \"" + std::string(name) + "\" is not defined");
        }
        for (element id : ids) {
          int64_t v = 0;
          if (id.get(v) != simdjson::SUCCESS || v < 0 || v > INT32_MAX)
            return bad("post_processor special token ids must be non-negative integers");
          (seen_sequence ? t.suffix : t.prefix).push_back(static_cast<int32_t>(v));
        }
      } else if (po["Sequence"].get(st) == simdjson::SUCCESS) {
        seen_sequence = true;
      } else {
        return bad("post_processor template piece must be SpecialToken or Sequence");
      }
    }
    return Status::ok();
  }
  return unsupported_feature("post_processor type \"" + std::string(type) + "\"");
}

Status parse_decoder(element e, bool* byte_level) {
  FATHOM_ASSIGN_OR_RETURN(std::string_view type, type_of(e, "decoder"));
  if (type == "ByteLevel") {
    *byte_level = true;
    return Status::ok();
  }
  if (type == "Sequence") {
    array steps;
    object o = e.get_object().value_unsafe();
    if (o["decoders"].get(steps) != simdjson::SUCCESS || steps.size() != 1) {
      return unsupported_feature("decoder Sequence other than [ByteLevel]");
    }
    return parse_decoder(steps.at(0).value_unsafe(), byte_level);
  }
  return unsupported_feature("decoder type \"" + std::string(type) + "\"");
}

}  // namespace

Result<std::unique_ptr<Tokenizer::Impl>> load_tokenizer_json(std::string_view json,
                                                             const TokenizerLoadOptions& options) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  element doc;
  if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS) {
    return bad(std::string("not valid JSON: ") + simdjson::error_message(err));
  }
  object root;
  if (doc.get(root) != simdjson::SUCCESS) return bad("the top level must be an object");
  auto impl = std::make_unique<Tokenizer::Impl>();

  // Model.
  object model;
  if (root["model"].get(model) != simdjson::SUCCESS) return bad("no \"model\" object");
  std::string_view model_type = "BPE";
  element mt;
  if (model["type"].get(mt) == simdjson::SUCCESS && mt.get(model_type) != simdjson::SUCCESS)
    return bad("model.type must be a string");
  if (model_type != "BPE")
    return unsupported_feature("model type \"" + std::string(model_type) + "\" (only BPE)");
  bool byte_fallback = false, ignore_merges = false;
  FATHOM_RETURN_IF_ERROR(get_bool(model, "byte_fallback", false, &byte_fallback, "model"));
  FATHOM_RETURN_IF_ERROR(get_bool(model, "ignore_merges", false, &ignore_merges, "model"));
  if (byte_fallback) return unsupported_feature("model.byte_fallback = true");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    element v;
    std::string_view s;
    if (model[key].get(v) == simdjson::SUCCESS && !v.is_null() &&
        (v.get(s) != simdjson::SUCCESS || !s.empty())) {
      return unsupported_feature(std::string("model.") + key);
    }
  }
  element dropout;
  if (model["dropout"].get(dropout) == simdjson::SUCCESS && !dropout.is_null()) {
    double d = 0;
    if (dropout.get(d) != simdjson::SUCCESS || d != 0.0)
      return unsupported_feature("model.dropout");
  }

  object vocab_obj;
  if (model["vocab"].get(vocab_obj) != simdjson::SUCCESS)
    return bad("model.vocab must be an object");
  std::vector<std::pair<std::string_view, int32_t>> vocab;
  vocab.reserve(vocab_obj.size());
  for (auto field : vocab_obj) {
    int64_t id = 0;
    if (field.value.get(id) != simdjson::SUCCESS || id < 0 || id >= (1 << 24)) {
      return bad("model.vocab entry '" + std::string(field.key) +
                 "' must map to an id in [0, 2^24)");
    }
    vocab.emplace_back(field.key, static_cast<int32_t>(id));
  }
  array merges_arr;
  std::vector<std::pair<std::string_view, std::string_view>> merges;
  if (model["merges"].get(merges_arr) != simdjson::SUCCESS)
    return bad("model.merges must be an array");
  merges.reserve(merges_arr.size());
  for (element m : merges_arr) {
    std::string_view s;
    array pair;
    if (m.get(s) == simdjson::SUCCESS) {
      size_t sp = s.find(' ');
      if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) {
        return bad("merge \"" + std::string(s) + "\" must be two tokens separated by one space");
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.get(pair) == simdjson::SUCCESS && pair.size() == 2) {
      std::string_view a, b;
      if (pair.at(0).get(a) != simdjson::SUCCESS || pair.at(1).get(b) != simdjson::SUCCESS) {
        return bad("a merge pair must hold two strings");
      }
      merges.emplace_back(a, b);
    } else {
      return bad("each merge must be \"a b\" or [\"a\", \"b\"]");
    }
  }
  FATHOM_ASSIGN_OR_RETURN(impl->bpe,
                          tok::BpeModel::build(vocab, merges, {.ignore_merges = ignore_merges}));

  // Normalizer (needed before the added tokens: normalized spellings).
  element e;
  if (root["normalizer"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    FATHOM_ASSIGN_OR_RETURN(impl->normalizer, parse_normalizer(e));
    if (auto* seq = dynamic_cast<tok::SequenceNormalizer*>(impl->normalizer.get());
        seq && seq->empty()) {
      impl->normalizer.reset();
    }
  }

  // Added tokens.
  std::vector<tok::AddedToken> added;
  if (root["added_tokens"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    array arr;
    if (e.get(arr) != simdjson::SUCCESS) return bad("added_tokens must be an array");
    for (element t : arr) {
      object to;
      if (t.get(to) != simdjson::SUCCESS) return bad("each added token must be an object");
      tok::AddedToken a;
      int64_t id = 0;
      if (to["id"].get(id) != simdjson::SUCCESS || id < 0 || id >= (1 << 24))
        return bad("added token id must be an integer in [0, 2^24)");
      a.id = static_cast<int32_t>(id);
      std::string_view content;
      FATHOM_RETURN_IF_ERROR(get_string(to, "content", &content, "added token"));
      a.content = std::string(content);
      FATHOM_RETURN_IF_ERROR(get_bool(to, "special", false, &a.special, "added token"));
      FATHOM_RETURN_IF_ERROR(get_bool(to, "lstrip", false, &a.lstrip, "added token"));
      FATHOM_RETURN_IF_ERROR(get_bool(to, "rstrip", false, &a.rstrip, "added token"));
      FATHOM_RETURN_IF_ERROR(get_bool(to, "single_word", false, &a.single_word, "added token"));
      FATHOM_RETURN_IF_ERROR(get_bool(to, "normalized", !a.special, &a.normalized, "added token"));
      added.push_back(std::move(a));
    }
  }
  std::vector<std::string> normalized_spellings(added.size());
  tok::RegexScratch rs;
  for (size_t i = 0; i < added.size(); ++i) {
    normalized_spellings[i] = added[i].content;
    if (added[i].normalized && impl->normalizer) {
      FATHOM_RETURN_IF_ERROR(impl->normalizer->normalize(normalized_spellings[i], rs));
    }
  }
  FATHOM_ASSIGN_OR_RETURN(impl->added,
                          tok::AddedVocabulary::build(std::move(added), normalized_spellings));

  // Pre-tokenizer.
  PreTokenizerInfo info;
  if (root["pre_tokenizer"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    if (options.fast_pre_tokenizer && is_deepseek_pre_tokenizer(e)) {
      // Its regexes are not compiled at all: the scanner replaces them.
      auto fast = std::make_unique<tok::DeepSeekPreTokenizer>();
      impl->fast_pre = fast.get();
      impl->pre = std::move(fast);
      info.has_byte_level = true;
    } else {
      FATHOM_ASSIGN_OR_RETURN(impl->pre, parse_pre_tokenizer(e, info));
    }
  }
  if (!info.has_byte_level) {
    return unsupported_feature("a pre_tokenizer without ByteLevel (only byte-level BPE)");
  }

  if (root["post_processor"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    FATHOM_RETURN_IF_ERROR(parse_post_processor(e, impl->special_template));
  }
  impl->byte_level_decoder = false;
  if (root["decoder"].get(e) == simdjson::SUCCESS && !e.is_null()) {
    FATHOM_RETURN_IF_ERROR(parse_decoder(e, &impl->byte_level_decoder));
  }

  // Decoding tables: vocabulary first, added tokens override (HF looks them up first).
  const auto& vb = impl->bpe->id_bytes();
  int32_t max_id = static_cast<int32_t>(vb.size()) - 1;
  for (const auto& a : impl->added.tokens()) max_id = std::max(max_id, a.id);
  impl->vocab_size = size_t(max_id + 1);
  impl->id_bytes.assign(impl->vocab_size, std::string());
  impl->id_kind.assign(impl->vocab_size, 0);
  const auto& spelling = impl->bpe->id_spelling();
  for (size_t i = 0; i < vb.size(); ++i) {
    if (spelling[i].empty()) continue;
    impl->id_bytes[i] = impl->byte_level_decoder ? vb[i] : spelling[i];
    impl->id_kind[i] = 1;
  }
  for (size_t i = 0; i < impl->added.tokens().size(); ++i) {
    const tok::AddedToken& a = impl->added.tokens()[i];
    // HF decodes a normalized added token as its normalized spelling.
    const std::string& decoded = a.normalized ? normalized_spellings[i] : a.content;
    std::string bytes;
    if (!impl->byte_level_decoder || !tok::byte_level::token_to_bytes(decoded, &bytes))
      bytes = decoded;
    impl->id_bytes[size_t(a.id)] = bytes;
    impl->id_kind[size_t(a.id)] = a.special ? 3 : 2;
  }
  for (int32_t id : impl->special_template.prefix)
    if (size_t(id) >= impl->vocab_size || impl->id_kind[size_t(id)] == 0)
      return bad("post_processor uses unknown token id " + std::to_string(id));
  for (int32_t id : impl->special_template.suffix)
    if (size_t(id) >= impl->vocab_size || impl->id_kind[size_t(id)] == 0)
      return bad("post_processor uses unknown token id " + std::to_string(id));
  return impl;
}

}  // namespace fathom
