// The draft vocabulary of DSpark speculative decoding (opt-in, FR-Spec's idea): the draft
// stages propose only the N most frequent token ids of a list shipped beside the checkpoint,
// `dspark_draft_vocab.json` (a JSON list of distinct token ids, most frequent first; Fathom's
// train/ writes it from the training corpus). The stages' head then reads N rows instead of
// the whole vocabulary. Verification is unchanged, so outputs are too; only which drafts
// are proposed (and so the acceptance) can differ. Plain functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace fathom::model {

inline constexpr const char* kDraftVocabFile = "dspark_draft_vocab.json";

// The first `n` ids of <model_dir>/dspark_draft_vocab.json, sorted ascending. Errors
// (kNotFound, kInvalidArgument naming the file): no file, not a list of distinct integers in
// [0, vocab_size), fewer than n of them, n < 1.
Result<std::vector<int32_t>> load_draft_vocabulary(const std::string& model_dir, int64_t n,
                                                   int64_t vocab_size);
// The same, with vocab_size from the checkpoint's config.json (its errors as
// load_model_config_dir's).
Result<std::vector<int32_t>> load_draft_vocabulary(const std::string& model_dir, int64_t n);

}  // namespace fathom::model
