// Parallel encoding (one long text cut at safe points; batches) gives the sequential ids.
#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "tokenizer/test_util.h"

namespace fathom::test {
namespace {

std::string whole_corpus() {
  std::string all;
  for (const auto& c : read_jsonl(data_path("tokenizer/corpus_dev.jsonl"))) {
    all += c["text"].get<std::string>();
    all += "\n";
  }
  return all;
}

TEST(ParallelEncode, LongTextSameIdsOnAnyThreadCount) {
  const Tokenizer& tok = deepseek();
  std::string text = whole_corpus();
  ASSERT_GT(text.size(), 2000000u);
  auto seq = tok.encode(text);
  auto seq_plain = tok.encode_plain(text);
  ASSERT_TRUE(seq.is_ok());
  for (size_t threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(*tok.encode(text, {}, &pool), *seq) << threads << " threads";
    EXPECT_EQ(*tok.encode_plain(text, &pool), *seq_plain) << threads << " threads";
  }
  // The regex path (no safe split points) parallelises over added-token segments only.
  const Tokenizer& slow = deepseek(false);
  ThreadPool pool(2);
  std::string head = text.substr(0, 400000);
  while (!head.empty() && (static_cast<unsigned char>(head.back()) & 0xC0) == 0x80) head.pop_back();
  head.pop_back();
  EXPECT_EQ(*slow.encode(head, {}, &pool), *tok.encode(head));
}

TEST(ParallelEncode, BatchMatchesOneByOne) {
  const Tokenizer& tok = deepseek();
  auto cases = read_jsonl(data_path("tokenizer/corpus_dev.jsonl"));
  std::vector<std::string> texts;
  for (const auto& c : cases) texts.push_back(c["text"].get<std::string>());
  std::vector<std::string_view> views(texts.begin(), texts.end());
  ThreadPool pool(2);
  auto batch = tok.encode_batch(views, {}, &pool);
  ASSERT_TRUE(batch.is_ok());
  ASSERT_EQ(batch->size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ((*batch)[i], cases[i]["ids"].get<std::vector<int32_t>>()) << cases[i]["id"];
  }
  // One bad text fails the batch with its index.
  texts[3] = "bad \xff";
  views[3] = texts[3];
  auto bad = tok.encode_batch(views, {}, &pool);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("text 3"), std::string::npos);
}

TEST(ParallelEncode, ConcurrentCallersShareOneTokenizer) {
  const Tokenizer& tok = deepseek();
  auto cases = read_jsonl(data_path("tokenizer/corpus_dev.jsonl"));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = size_t(t); i < cases.size(); i += 4) {
        if (*tok.encode(cases[i]["text"].get<std::string>()) !=
            cases[i]["ids"].get<std::vector<int32_t>>())
          ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace fathom::test
