// The Engram compressed-token map from a tokenizer, and the hasher built on it for the
// released configuration.
#include <unordered_map>

#include "model/engram.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

namespace fathom::model {

Result<std::vector<int32_t>> build_compressed_token_map(const Tokenizer& tokenizer, int64_t* size) {
  using namespace tok;
  // A private-use character keeps a text that is exactly one space through the Strip.
  const std::string sentinel = "\xEE\x80\x80";  // U+E000
  FATHOM_ASSIGN_OR_RETURN(auto spaces, Regex::compile("[ \\t\\r\\n]+"));
  FATHOM_ASSIGN_OR_RETURN(auto lone, Regex::compile("^ $"));
  std::vector<std::unique_ptr<Normalizer>> steps;
  steps.emplace_back(new UnicodeNormalizer(UnicodeForm::kNFKC));
  steps.emplace_back(new UnicodeNormalizer(UnicodeForm::kNFD));
  steps.emplace_back(new StripAccentsNormalizer());
  steps.emplace_back(new LowercaseNormalizer());
  steps.emplace_back(new ReplaceNormalizer("", std::move(spaces), " "));
  steps.emplace_back(new ReplaceNormalizer("", std::move(lone), sentinel));
  steps.emplace_back(new StripNormalizer(true, true));
  steps.emplace_back(new ReplaceNormalizer(sentinel, nullptr, " "));
  SequenceNormalizer norm(std::move(steps));
  RegexScratch scratch;
  const int32_t n = int32_t(tokenizer.vocab_size());
  std::unordered_map<std::string, int32_t> ids;
  std::vector<int32_t> map(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t one[1] = {i};
    FATHOM_ASSIGN_OR_RETURN(std::string text, tokenizer.decode(one));
    std::string key;
    if (text.find("\xEF\xBF\xBD") != std::string::npos) {
      // Partial UTF-8: keyed by the raw token spelling (byte-level form), marked apart from
      // normalised texts.
      key = "\x01" + (tokenizer.is_added(i) ? std::string(tokenizer.token_bytes(i))
                                            : byte_level::bytes_to_token(tokenizer.token_bytes(i)));
    } else {
      FATHOM_RETURN_IF_ERROR(norm.normalize(text, scratch));
      key = std::move(text);
    }
    auto [it, fresh] = ids.emplace(std::move(key), int32_t(ids.size()));
    (void)fresh;
    map[size_t(i)] = it->second;
  }
  *size = int64_t(ids.size());
  return map;
}

Result<EngramHasher> EngramHasher::from_tokenizer(const Tokenizer& tokenizer,
                                                  const ModelConfig& c) {
  // numpy.random.default_rng(10007 * layer).integers(0, B, 4) * 2 + 1 with
  // B = ((2^63 - 1) // 99092) // 2, for layers 1 and 14 (precomputed with numpy 1.24; the same
  // recipe reproduces the golden tiny model's multipliers).
  static constexpr int64_t kReleased[2][4] = {
      {76632096046245, 4839876093313, 35959672319349, 73987337458391},
      {67716810739261, 51510806800915, 30921347202721, 82619226485591}};
  if (c.engram_layer_ids != std::vector<int64_t>{1, 14} || c.engram_max_ngram_size != 4 ||
      c.engram_compressed_vocab_size != 99092)
    return unsupported(
        "building the Engram hash from the tokenizer needs the released Engram configuration "
        "(layers 1 and 14, 4-grams, 99092 compressed ids); give engram_tables.json instead");
  int64_t size = 0;
  FATHOM_ASSIGN_OR_RETURN(std::vector<int32_t> map, build_compressed_token_map(tokenizer, &size));
  if (size != c.engram_compressed_vocab_size)
    return invalid_argument("the tokenizer gives " + std::to_string(size) +
                            " compressed Engram ids; the config says " +
                            std::to_string(c.engram_compressed_vocab_size));
  if (int64_t(map.size()) > c.vocab_size)
    return invalid_argument("the tokenizer has more ids than the model's vocabulary");
  map.resize(size_t(c.vocab_size), map.empty() ? 0 : map[size_t(c.engram_pad_id)]);
  // Everything else as the tables JSON would say it.
  std::string json = "{\"token_map\": [";
  for (size_t i = 0; i < map.size(); ++i) json += (i ? "," : "") + std::to_string(map[i]);
  json += "], \"pad_compressed_id\": " + std::to_string(map[size_t(c.engram_pad_id)]) +
          ", \"multipliers\": [";
  for (int l = 0; l < 2; ++l) {
    json += l ? ", [" : "[";
    for (int s = 0; s < 4; ++s) json += (s ? ", " : "") + std::to_string(kReleased[l][s]);
    json += "]";
  }
  // Primes: distinct, above engram_vocab_size - 1, handed out across (layer, n, head).
  auto is_prime = [](int64_t v) {
    if (v < 2) return false;
    for (int64_t d = 2; d * d <= v; ++d)
      if (v % d == 0) return false;
    return true;
  };
  int64_t cand = c.engram_vocab_size;
  std::string primes = "[", offsets = "[";
  for (int l = 0; l < 2; ++l) {
    primes += l ? ", [" : "[";
    offsets += l ? ", [" : "[";
    int64_t total = 0;
    for (int64_t n = 0; n < 3; ++n) {
      primes += n ? ", [" : "[";
      for (int64_t k = 0; k < c.engram_n_heads; ++k) {
        while (!is_prime(cand)) ++cand;
        primes += (k ? ", " : "") + std::to_string(cand);
        offsets += (n || k ? ", " : "") + std::to_string(total);
        total += cand++;
      }
      primes += "]";
    }
    primes += "]";
    offsets += "]";
  }
  json += "], \"primes\": " + primes + "], \"offsets\": " + offsets + "]}";
  return from_tables_json(json, c);
}

}  // namespace fathom::model
