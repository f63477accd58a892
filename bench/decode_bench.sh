#!/usr/bin/env bash
# Batch-1 decode and 512-token-chunk prefill on the `small` preset (made once with
# `fathom mkmodel --preset small` into ~/.cache/fathom/models/small-seed0), with the weight-read
# bandwidth achieved per decode token next to this machine's read bandwidth measured in the
# same run, and the resident memory (the checkpoint is mapped, not copied). Two runs: decode
# after a 16-token prompt (weight-bound: the bandwidth figure), and a 512-token prefill in one
# 512-token chunk followed by decode at that context (attention over 512 entries adds work).
# Usage: bench/decode_bench.sh [BUILD_DIR] [THREADS] [DECODE_TOKENS]
set -euo pipefail
build=${1:-build}
threads=${2:-2}
steps=${3:-32}
dir=${FATHOM_CACHE:-$HOME/.cache/fathom}/models/small-seed0
if [[ ! -f $dir/model.safetensors ]]; then
  "$build/fathom" mkmodel --preset small --seed 0 --out "$dir.tmp" >/dev/null
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
for prompt in 16 512; do
  "$build/fathom" bench decode --model "$dir" --prompt-tokens "$prompt" --chunk 512 \
    --decode-tokens "$steps" --threads "$threads"
done
