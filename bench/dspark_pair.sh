#!/usr/bin/env bash
# DSpark on a trained pair (scripts/train_tiny.sh DIR): bench/serve_load.js on the pair's
# held-out text prompts (DIR/heldout.jsonl), greedy, at each level of concurrent streams, with
# speculation off and with each scheduler (fixed, prefix, stale-global), one run each, one
# after the other on this machine; prints one line per mode and level: tokens/s and its ratio
# to no speculation at that level, mean accepted length (tokens a verifying step emits), the
# mean K chosen per drafting sequence step, drafting steps. Check that the machine is quiet.
# Usage: [DSPARK_ARGS="--speculative-draft-vocab 16384"] \
#   bench/dspark_pair.sh FATHOM DIR [SECONDS_PER_LEVEL=15] [LEVELS=1,8,32] [MAX_TOKENS=64]
# (DSPARK_ARGS: more fathom serve flags for the speculative modes)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fathom="${1:?usage: bench/dspark_pair.sh FATHOM DIR}"
dir="${2:?usage: bench/dspark_pair.sh FATHOM DIR}"
secs="${3:-15}" levels="${4:-1,8,32}" max_tokens="${5:-64}"
out="$(mktemp -d)"
for mode in off fixed prefix stale-global; do
  args=""
  [[ $mode == off ]] || args="--speculative dspark --speculative-scheduler $mode ${DSPARK_ARGS:-}"
  FATHOM_SERVE_ARGS="$args" PROMPTS="$dir/heldout.jsonl" \
    node "$here/serve_load.js" "$fathom" "$secs" "$dir" "$levels" "$max_tokens" >"$out/$mode.json"
done
node -e '
const fs = require("fs");
const dir = process.argv[1];
const r = {};
for (const m of ["off", "fixed", "prefix", "stale-global"]) r[m] = JSON.parse(fs.readFileSync(`${dir}/${m}.json`));
for (const m of Object.keys(r)) {
  for (const [i, l] of r[m].levels.entries()) {
    const base = r.off.levels[i].tokens_per_s, s = l.speculative || {};
    console.log(JSON.stringify({ mode: m, streams: l.concurrency, tokens_per_s: l.tokens_per_s,
      vs_off: Number((l.tokens_per_s / base).toFixed(3)), failed: l.failed,
      mean_accepted_length: s.mean_accepted_length ?? null, mean_chosen_k: s.mean_chosen_k ?? null,
      drafting_steps: s.drafting_steps ?? 0, seeded_batch_invariant: r[m].seeded.all_identical }));
  }
}' "$out"
echo "raw: $out" >&2
