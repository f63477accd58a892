#include "tokenizer/test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "tokenizer/byte_level.h"

namespace fathom::test {

std::string deepseek_tokenizer_path() {
  if (const char* p = std::getenv("FATHOM_TOKENIZER_JSON")) return p;
  std::string cache;
  if (const char* c = std::getenv("FATHOM_CACHE")) {
    cache = c;
  } else {
    const char* home = std::getenv("HOME");
    cache = std::string(home ? home : "/root") + "/.cache/fathom";
  }
  return cache + "/tokenizers/deepseek_v3/tokenizer.json";
}

const Tokenizer& deepseek(bool fast) {
  static std::unique_ptr<Tokenizer> tok[2];
  auto& slot = tok[fast ? 1 : 0];
  if (!slot) {
    auto r = Tokenizer::load_file(deepseek_tokenizer_path(), {.fast_pre_tokenizer = fast});
    if (!r.is_ok()) {
      std::fprintf(stderr, "cannot load the DeepSeek tokenizer (run scripts/setup.sh): %s\n",
                   r.status().to_string().c_str());
      std::abort();
    }
    slot = std::move(r).value();
  }
  return *slot;
}

std::string deepseek_json() {
  std::ifstream in(deepseek_tokenizer_path(), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string data_path(const std::string& rel) { return std::string(FATHOM_TEST_DATA) + "/" + rel; }

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

nlohmann::json minimal_tokenizer_json(
    const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    std::string s(1, static_cast<char>(b));
    vocab[tok::byte_level::bytes_to_token(s)] = next++;
  }
  nlohmann::json m = nlohmann::json::array();
  for (const auto& [a, b] : merges) {
    std::string ta = tok::byte_level::bytes_to_token(a), tb = tok::byte_level::bytes_to_token(b);
    if (!vocab.contains(ta + tb)) vocab[ta + tb] = next++;
    m.push_back(ta + " " + tb);
  }
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}};
}

}  // namespace fathom::test
