// BpeModel's fast merge loops (small scan, large heap, word cache) against its plain
// O(n^2) reference, on the DeepSeek vocabulary.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer_impl.h"

namespace fathom::test {
namespace {

// The BpeModel inside the shared DeepSeek tokenizer, rebuilt standalone from its JSON.
const tok::BpeModel& deepseek_bpe() {
  static std::unique_ptr<Tokenizer::Impl> impl = [] {
    auto r = load_tokenizer_json(deepseek_json(), {});
    if (!r.is_ok()) std::abort();
    return std::move(r).value();
  }();
  return *impl->bpe;
}

TEST(Bpe, FastEqualsReferenceOnRandomWords) {
  const tok::BpeModel& bpe = deepseek_bpe();
  std::mt19937 rng(5);
  tok::BpeWordCache cache;
  const std::string letters = "etaoinshrdlucmfwypvbgkqjxz ETAOIN._-0123456789";
  for (int i = 0; i < 20000; ++i) {
    size_t n = 1 + rng() % (i % 10 == 0 ? 400 : 24);
    std::string w;
    for (size_t k = 0; k < n; ++k) {
      w.push_back(rng() % 8 == 0 ? static_cast<char>(rng() & 0xFF)
                                 : letters[rng() % letters.size()]);
    }
    std::vector<int32_t> fast, fast_cached, ref;
    bpe.encode_word(w, fast, nullptr);
    bpe.encode_word(w, fast_cached, &cache);
    bpe.encode_word(w, fast_cached, &cache);  // second time from the cache
    bpe.encode_word_reference(w, ref);
    ASSERT_EQ(fast, ref) << "word of " << n << " bytes";
    ASSERT_EQ(fast_cached.size(), 2 * ref.size());
    ASSERT_TRUE(std::equal(ref.begin(), ref.end(), fast_cached.begin()));
    ASSERT_TRUE(std::equal(ref.begin(), ref.end(), fast_cached.begin() + ref.size()));
  }
}

TEST(Bpe, LongRunsUseTheHeapAndAgree) {
  const tok::BpeModel& bpe = deepseek_bpe();
  for (std::string unit : {"a", " ", "ab", "中", "😀", "=-", "\n"}) {
    for (size_t reps : {50, 129, 300, 1000}) {
      std::string w;
      for (size_t i = 0; i < reps; ++i) w += unit;
      std::vector<int32_t> fast, ref;
      bpe.encode_word(w, fast, nullptr);
      bpe.encode_word_reference(w, ref);
      EXPECT_EQ(fast, ref) << reps << " x '" << unit << "'";
    }
  }
}

TEST(Bpe, CorpusPiecesAgreeWithReference) {
  const tok::BpeModel& bpe = deepseek_bpe();
  tok::DeepSeekPreTokenizer pre;
  auto cases = read_jsonl(data_path("tokenizer/corpus_dev.jsonl"));
  std::vector<std::string_view> pieces;
  size_t n = 0;
  for (size_t i = 0; i < cases.size(); i += 7) {
    std::string text = cases[i]["text"].get<std::string>();
    pieces.clear();
    pre.split_text(text, pieces);
    for (std::string_view p : pieces) {
      std::vector<int32_t> fast, ref;
      bpe.encode_word(p, fast, nullptr);
      bpe.encode_word_reference(p, ref);
      ASSERT_EQ(fast, ref) << cases[i]["id"];
      ++n;
    }
  }
  EXPECT_GT(n, 10000u);
}

}  // namespace
}  // namespace fathom::test
