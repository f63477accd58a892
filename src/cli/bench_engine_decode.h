// `fathom bench decode --speculative dspark`: greedy decoding through the engine itself (the
// scheduler, the draft scheduler, batching, sampling), once with speculation off and once on,
// in one run, on the same prompts. Called from the bench command's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fathom::model {
class V41Model;
}

namespace fathom::cli {

struct EngineDecodeBench {
  int64_t batch = 1;                // sequences decoding together
  int64_t decode_tokens = 32;       // per sequence
  int64_t speculative_tokens = 0;   // drafts per step (0: the model's draft block)
  std::string scheduler = "fixed";  // fixed, prefix or stale-global
  std::string model_dir, numerics;
  int threads = 2;
};

// Prints one JSON line; returns the process exit code.
int run_engine_decode_bench(const model::V41Model& model, const std::vector<int32_t>& prompt,
                            const EngineDecodeBench& b);

}  // namespace fathom::cli
