#!/usr/bin/env bash
# The objects compiled for wider instruction sets (gemv_avx512.cc.o, dots_avx512.cc.o,
# gemm_avx512bf16.cc.o, attention_avx512bf16.cc.o, gemm_amx.cc.o, attention_amx.cc.o) must
# define no code the linker could pick for a baseline caller: every global symbol of each is one
# of its own entry points (namespace fathom::kernels::cpu::avx512, ::avx512bf16, ::amx). A weak symbol (an inline
# function or template instantiated there) could replace the baseline copy and run AVX-512 or
# AMX instructions on a machine without them.
# usage: wide_path_symbols.sh libfathom_kernels.a
set -euo pipefail
lib="${1:?usage: wide_path_symbols.sh libfathom_kernels.a}"
status=0
for pair in gemv_avx512:avx512 dots_avx512:avx512 gemm_avx512bf16:avx512bf16 \
  attention_avx512bf16:avx512bf16 gemm_amx:amx attention_amx:amx; do
  obj="${pair%%:*}" ns="${pair##*:}"
  syms="$(nm -A -C --defined-only "$lib" | grep "${obj}\.cc\.o:" || true)"
  [ -n "$syms" ] || { echo "FAIL: no ${obj}.cc.o in $lib" >&2; status=1; continue; }
  bad="$(echo "$syms" | awk -v ns="fathom::kernels::cpu::${ns}::" '{ type = $2; $1 = $2 = ""; name = substr($0, 3)
    if (type ~ /^[A-Z]$/ && index(name, ns) != 1 && name !~ /^DW\.ref\./) print type, name }')"
  if [ -n "$bad" ]; then
    echo "FAIL: ${obj}.cc.o defines shared symbols:" >&2
    echo "$bad" >&2
    status=1
    continue
  fi
  echo "${obj}.cc.o: $(echo "$syms" | awk '$2 ~ /^[A-Z]$/' | wc -l) global symbols, all ${ns} entry points"
done
[ "$status" -eq 0 ] && echo "6 passed, 0 failed"
exit "$status"
