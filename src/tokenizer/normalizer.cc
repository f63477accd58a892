#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "core/utf8.h"
#include "tokenizer/unicode_props.h"

namespace fathom::tok {

Status UnicodeNormalizer::normalize(std::string& text, RegexScratch&) const {
  if (text.empty()) return Status::ok();
  int options = UTF8PROC_STABLE;
  switch (form_) {
    case UnicodeForm::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case UnicodeForm::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case UnicodeForm::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case UnicodeForm::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    return invalid_argument(std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
  }
  text.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return Status::ok();
}

Status LowercaseNormalizer::normalize(std::string& text, RegexScratch&) const {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    uint32_t cp = utf8::decode_at(text, i, &len);
    utf8::append(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    i += len;
  }
  text.swap(out);
  return Status::ok();
}

Status StripAccentsNormalizer::normalize(std::string& text, RegexScratch&) const {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    uint32_t cp = utf8::decode_at(text, i, &len);
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    if (cat != UTF8PROC_CATEGORY_MN && cat != UTF8PROC_CATEGORY_MC && cat != UTF8PROC_CATEGORY_ME)
      out.append(text, i, len);
    i += len;
  }
  text.swap(out);
  return Status::ok();
}

Status StripNormalizer::normalize(std::string& text, RegexScratch&) const {
  size_t b = 0, e = text.size();
  if (left_) {
    while (b < e) {
      size_t len = 0;
      uint32_t cp = utf8::decode_at(text, b, &len);
      if (!(char_flags(cp) & kSpace)) break;
      b += len;
    }
  }
  if (right_) {
    while (e > b) {
      size_t s = e - 1;
      while (s > b && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
      size_t len = 0;
      uint32_t cp = utf8::decode_at(text, s, &len);
      if (!(char_flags(cp) & kSpace)) break;
      e = s;
    }
  }
  text = text.substr(b, e - b);
  return Status::ok();
}

Status PrependNormalizer::normalize(std::string& text, RegexScratch&) const {
  if (!text.empty()) text.insert(0, prefix_);
  return Status::ok();
}

Status ReplaceNormalizer::normalize(std::string& text, RegexScratch& scratch) const {
  std::string out;
  size_t pos = 0, prev = 0;
  while (pos <= text.size()) {
    size_t ms = 0, me = 0;
    if (regex_) {
      if (!regex_->find(text, pos, &ms, &me, scratch)) break;
    } else {
      if (literal_.empty()) break;
      ms = text.find(literal_, pos);
      if (ms == std::string::npos) break;
      me = ms + literal_.size();
    }
    out.append(text, prev, ms - prev);
    out += content_;
    prev = me;
    if (me == ms) {
      if (me >= text.size()) break;
      size_t len = utf8::valid_sequence_length(text, me);
      out.append(text, me, len);
      prev = pos = me + (len ? len : 1);
    } else {
      pos = me;
    }
  }
  out.append(text, prev, std::string::npos);
  text.swap(out);
  return Status::ok();
}

Status SequenceNormalizer::normalize(std::string& text, RegexScratch& scratch) const {
  for (const auto& s : steps_) FATHOM_RETURN_IF_ERROR(s->normalize(text, scratch));
  return Status::ok();
}

}  // namespace fathom::tok
