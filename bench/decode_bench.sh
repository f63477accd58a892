#!/usr/bin/env bash
# Decode and prefill on a benchmark preset (default `medium`, the model `fathom serve` can
# serve; made once with `fathom mkmodel` into ~/.cache/fathom/models/PRESET-seed0), on every
# kernel path this machine has (FATHOM_CPU=avx2, avx512, avx512bf16, amx), side by side in one
# run: batch-1 decode after a 16-token prompt (the weight bytes read per token and the achieved
# GB/s next to this machine's read bandwidth, measured in the same run), a 512-token prefill
# in one chunk, and B sequences decoding together (one forward_each pass and one head a step).
# One JSON line per figure, each with the load average when it started: a figure taken while
# anything else loads the machine means nothing.
# Usage: bench/decode_bench.sh [BUILD_DIR] [THREADS] [DECODE_TOKENS] [BATCHES]   (BATCHES "8 32")
#   PRESET=small|medium (default medium); PATHS="amx avx512" to pick paths.
set -euo pipefail
build=${1:-build}
threads=${2:-2}
steps=${3:-32}
batches=${4:-"8 32"}
preset=${PRESET:-medium}
dir=${FATHOM_CACHE:-$HOME/.cache/fathom}/models/$preset-seed0
if [[ ! -f $dir/model.safetensors ]]; then
  "$build/fathom" mkmodel --preset "$preset" --seed 0 --out "$dir.tmp" >/dev/null
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
paths=${PATHS:-"avx2 avx512 avx512bf16 amx"}
load() { cut -d' ' -f1 /proc/loadavg; }
for p in $paths; do
  if ! FATHOM_CPU=$p "$build/fathom" bench matmul --weights bf16 --m 32 --k 64 --n 1 --repeat 1 \
    >/dev/null 2>&1; then
    echo "{\"path\":\"$p\",\"untested\":true}"
    continue
  fi
  run() {
    local l
    l=$(load)
    local line
    line=$(FATHOM_CPU=$p "$build/fathom" bench decode --model "$dir" --threads "$threads" "$@")
    echo "${line%\}},\"load\":$l}"
  }
  run --prompt-tokens 16 --chunk 512 --decode-tokens "$steps"
  run --prompt-tokens 512 --chunk 512 --decode-tokens 4
  for b in $batches; do
    run --prompt-tokens 64 --chunk 512 --decode-tokens 8 --batch "$b"
  done
done
