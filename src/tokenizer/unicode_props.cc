#include "tokenizer/unicode_props.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace fathom::tok {
namespace {

#include "tokenizer/unicode_table.inc"

struct Tables {
  std::vector<uint16_t> stage1;
  std::vector<uint8_t> stage2;
  CharTable view;
};

Tables* build() {
  std::vector<uint8_t> flat(0x110000);
  constexpr size_t kRuns = sizeof(kUnicodeRuns) / sizeof(kUnicodeRuns[0]);
  for (size_t r = 0; r < kRuns; ++r) {
    uint32_t first = kUnicodeRuns[r] >> 8;
    uint32_t end = r + 1 < kRuns ? (kUnicodeRuns[r + 1] >> 8) : 0x110000;
    std::fill(flat.begin() + first, flat.begin() + end,
              static_cast<uint8_t>(kUnicodeRuns[r] & 0xFF));
  }
  auto* t = new Tables();
  t->stage1.resize(0x110000 >> 8);
  std::map<std::string, uint16_t> seen;  // dedupes identical 256-entry blocks
  for (uint32_t hi = 0; hi < (0x110000 >> 8); ++hi) {
    std::string key(reinterpret_cast<const char*>(flat.data() + (hi << 8)), 256);
    auto it = seen.find(key);
    if (it == seen.end()) {
      uint16_t idx = static_cast<uint16_t>(t->stage2.size() / 256);
      t->stage2.insert(t->stage2.end(), key.begin(), key.end());
      it = seen.emplace(std::move(key), idx).first;
    }
    t->stage1[hi] = it->second;
  }
  t->view = CharTable{t->stage1.data(), t->stage2.data()};
  return t;
}

}  // namespace

const CharTable& char_table() {
  static Tables* tables = build();  // built once; intentionally never freed
  return tables->view;
}

const char* unicode_version() { return FATHOM_UNICODE_VERSION; }

int general_category(uint32_t cp) {
  if (cp > 0x10FFFF) return 0;
  constexpr size_t kRuns = sizeof(kCategoryRuns) / sizeof(kCategoryRuns[0]);
  // The last run whose first code point is <= cp.
  size_t lo = 0, hi = kRuns;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if ((kCategoryRuns[mid] >> 8) <= cp) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return static_cast<int>(kCategoryRuns[lo] & 0xFF);
}

std::vector<std::pair<uint32_t, uint32_t>> category_ranges(const bool member[32]) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  constexpr size_t kRuns = sizeof(kCategoryRuns) / sizeof(kCategoryRuns[0]);
  for (size_t r = 0; r < kRuns; ++r) {
    if (!member[kCategoryRuns[r] & 0xFF]) continue;
    uint32_t first = kCategoryRuns[r] >> 8;
    uint32_t last = (r + 1 < kRuns ? (kCategoryRuns[r + 1] >> 8) : 0x110000) - 1;
    // Surrogates cannot appear in UTF-8 text or in a PCRE2 UTF class.
    if (first <= 0xDFFF && last >= 0xD800) {
      if (first < 0xD800) out.emplace_back(first, 0xD7FF);
      if (last > 0xDFFF) out.emplace_back(0xE000, last);
      continue;
    }
    if (!out.empty() && out.back().second + 1 == first) {
      out.back().second = last;
    } else {
      out.emplace_back(first, last);
    }
  }
  return out;
}

const char* general_category_name(int category) {
  constexpr int kCount = sizeof(kCategoryNames) / sizeof(kCategoryNames[0]);
  return category >= 0 && category < kCount ? kCategoryNames[category] : "Cn";
}

}  // namespace fathom::tok
