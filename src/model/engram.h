// Engram (shared/spec/model-v41.md §6.8, ref `engram.py`): n-gram hashing of the compressed
// token ids with the published multipliers and primes, the FP8 table lookup, the key/value
// projection and the per-stream sigmoid gate that adds the value to the residual streams.
// Strict arithmetic of the golden data. EngramHasher and EngramLayer are immutable after
// construction; any thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/gemv.h"
#include "model/config.h"

namespace fathom {
class ThreadPool;
class Tokenizer;
}  // namespace fathom

namespace fathom::model {

class Checkpoint;

// Token ids -> table row ids for every Engram layer: [T, layers, (max_ngram-1) * heads].
class EngramHasher {
 public:
  // From engram_tables.json (token_map, multipliers, primes, offsets, pad_compressed_id),
  // checked against the config.
  static Result<EngramHasher> from_tables_json(std::string_view json, const ModelConfig& c);
  // From the tokenizer, as the reference does (spec §6.8): the compressed-token map built
  // from it, the released multipliers (numpy's default_rng(10007 * layer), precomputed), the
  // distinct primes above engram_vocab_size - 1. kUnsupported for an Engram configuration
  // other than the released one (layers 1 and 14, 99,092 compressed ids).
  static Result<EngramHasher> from_tokenizer(const Tokenizer& tokenizer, const ModelConfig& c);
  int64_t columns() const { return columns_; }
  int64_t layers() const { return int64_t(multipliers_.size()); }
  // Row ids for positions start..start+T-1 of `tokens` (the whole sequence so far).
  void hash(const std::vector<int32_t>& tokens, int64_t start, int64_t T,
            std::vector<int64_t>* rows) const;

 private:
  std::vector<int32_t> token_map_;
  int64_t pad_ = 0, columns_ = 0, max_ngram_ = 0, heads_ = 0;
  std::vector<std::vector<int64_t>> multipliers_;       // [layer][max_ngram]
  std::vector<std::vector<int64_t>> primes_, offsets_;  // [layer][columns]
};

struct EngramLayer {
  int64_t index = 0;               // which Engram layer (0, 1, ...)
  const uint8_t* table = nullptr;  // [rows, head_dim] E4M3
  const uint8_t* scale = nullptr;  // [rows, head_dim / 32] E8M0
  int64_t rows = 0, head_dim = 0, dim = 0;
  kernels::Fp8Matrix wkv{};               // [(4 + 1) * dim, columns * head_dim]
  std::vector<float> q_weight, k_weight;  // [4, dim] bf16 values
  float eps = 1e-20f;
};

// The Engram compressed-token map of a tokenizer (ref `build_compressed_token_map`): every id
// decoded alone (special tokens kept), normalised NFKC -> NFD -> strip accents -> lowercase
// -> [ \t\r\n]+ to one space -> strip (a text that is exactly one space stays one space);
// an id whose text holds U+FFFD is keyed by its raw token spelling instead; keys get new ids
// in first-seen order. Returns the map (one entry per id) and sets *size.
Result<std::vector<int32_t>> build_compressed_token_map(const Tokenizer& tokenizer, int64_t* size);

Result<EngramLayer> bind_engram(const Checkpoint& ck, const ModelConfig& c, int layer,
                                int64_t index);

// Adds the Engram to the streams X [T, 4, dim] in place; `rows` is the hasher's output for
// the same T tokens.
// `fast`: the wkv GEMM accumulates in fp32 (AVX2, over `pool`).
void engram_forward(const EngramLayer& e, const EngramHasher& h, const int64_t* rows, int64_t T,
                    float* X, ThreadPool* pool = nullptr, bool fast = false);

}  // namespace fathom::model
