#!/usr/bin/env bash
# Side-by-side matmul benchmark: Fathom's fast kernels (`fathom bench matmul`, on every kernel
# path this machine has: FATHOM_CPU=avx2, avx512, avx512bf16, amx) and ggml's CPU backend
# (`test-backend-ops perf`, which picks the widest SIMD of this machine) on the same shape,
# 4096 x 14336 weights times N activation rows, in one run: FP4 vs mxfp4, FP8 vs q8_0, BF16
# vs bf16 and f16. Prints each figure with the load average when it was taken, then one
# table of times and ratios (ggml time / Fathom time: > 1 means Fathom is faster; at N = 1 also
# the time of a plain read of the same weight bytes, the floor under any GEMV); then each
# path's decode GEMV on a matrix too large for any cache (about 1 GB of weights in one pass)
# beside this machine's read bandwidth measured in the same process.
# ggml is built once into $FATHOM_CACHE/ggml (default ~/.cache/fathom/ggml) from
# ../shared/anchors. ggml's perf list has no N = 32 case: that row has Fathom's figures only.
# A shared machine gives meaningless figures while anything else runs: check the loads.
# usage: bench/kernels_vs_ggml.sh [BUILD_DIR] [N ...]      (default N: 1 8 32 512)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
shift || true
ns=("$@")
[ ${#ns[@]} -gt 0 ] || ns=(1 8 32 512)
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
anchors="$root/../shared/anchors"
ggml_dir="$(nice -n 10 bash "$anchors/build-ggml.sh" "$cache/ggml" | tail -1)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"
paths=()
for p in avx2 avx512 avx512bf16 amx; do
  if FATHOM_CPU=$p "$build/fathom" bench matmul --weights bf16 --m 32 --k 64 --n 1 --repeat 1 \
    >/dev/null 2>"$work/err"; then
    paths+=("$p")
  else
    echo "fathom path $p: untested ($(sed 's/^fathom: //' "$work/err"))"
  fi
done

: >"$work/fathom.jsonl"
for n in "${ns[@]}"; do
  repeat=$((n >= 256 ? 3 : 20))
  for p in "${paths[@]}"; do
    for w in fp4 fp8 bf16; do
      l="$(load)"
      floor=()
      [ "$n" != 1 ] || floor=(--read-floor)
      line="$(FATHOM_CPU=$p "$build/fathom" bench matmul --weights $w --m 4096 --k 14336 --n "$n" \
        --threads 2 --repeat "$repeat" "${floor[@]}")"
      echo "${line%\}},\"load\":$l}" | tee -a "$work/fathom.jsonl"
    done
  done
done

ggml_ns="$(printf '%s|' "${ns[@]}")"
l="$(load)"
echo "ggml test-backend-ops perf (load $l):"
LD_LIBRARY_PATH="$ggml_dir" "$ggml_dir/test-backend-ops" perf -b CPU -o MUL_MAT \
  -p "type_a=(mxfp4|q8_0|bf16|f16),type_b=f32,m=4096,n=(${ggml_ns%|}),k=14336," 2>&1 |
  grep 'MUL_MAT(' | sed 's/\x1b\[[0-9;]*m//g' | tee "$work/ggml.txt"
echo "load after: $(load)"

python3 - "$work/fathom.jsonl" "$work/ggml.txt" "$l" <<'PY'
import json, re, sys
fathom = [json.loads(l) for l in open(sys.argv[1])]
ggml = {}
for line in open(sys.argv[2]):
    m = re.search(r"type_a=(\w+),type_b=f32,m=4096,n=(\d+),k=14336.*?([\d.]+) us/run", line)
    if m:
        ggml[(m.group(1), int(m.group(2)))] = float(m.group(3)) / 1e6
anchor = {"fp4": ["mxfp4"], "fp8": ["q8_0"], "bf16": ["bf16", "f16"]}
print(f"\n{'N':>4} {'fathom':>13} {'ms':>9} {'GFLOP/s':>8} {'load':>5} | {'ggml':>6} {'ms':>9} {'GFLOP/s':>8} | ggml/fathom")
for f in fathom:
    n, w = f["n"], f["weights"]
    flops = 2 * 4096 * 14336 * n
    row = f"{n:>4} {w + ' ' + f['path']:>13} {f['seconds']*1e3:9.3f} {f['gflops']:8.1f} {f['load']:5.2f} |"
    best = None
    for a in anchor[w]:
        if (a, n) in ggml and (best is None or ggml[(a, n)] < ggml[best]):
            best = (a, n)
    if best is None:
        print(row + f" {'-':>6} {'':>9} {'':>8} | no ggml case")
        continue
    t = ggml[best]
    floor = ""
    if "read_floor_seconds" in f:
        r = f["read_floor_seconds"]
        floor = f"   (a plain read of the weights: {r*1e3:.3f} ms; no kernel beats {t/r:.2f}x)"
    print(row + f" {best[0]:>6} {t*1e3:9.3f} {flops/t/1e9:8.1f} | {t/f['seconds']:.2f}x{floor}")
print(f"(ggml ran at load {sys.argv[3]}; bf16 is compared with ggml's faster of bf16 and f16)")
PY

echo
echo "decode GEMV on ~1 GB of weights (N = 1), against the read bandwidth measured beside it:"
for p in "${paths[@]}"; do
  for shape in "fp4 131072" "fp8 65536" "bf16 32768"; do
    set -- $shape
    l="$(load)"
    line="$(FATHOM_CPU=$p "$build/fathom" bench matmul --weights "$1" --m "$2" --k 16384 --n 1 \
      --threads 2 --repeat 5 --bandwidth)"
    echo "${line%\}},\"load\":$l}"
  done
done
