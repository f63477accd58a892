#!/usr/bin/env bash
# The AVX-512 object must define no code the linker could pick for a baseline caller: every
# global symbol of gemv_avx512.cc.o is one of its own entry points (namespace
# fathom::kernels::cpu::avx512). A weak symbol (an inline function or template instantiated
# there) could replace the baseline copy and run AVX-512 instructions on an AVX2 machine.
# usage: avx512_symbols.sh libfathom_kernels.a
set -euo pipefail
lib="${1:?usage: avx512_symbols.sh libfathom_kernels.a}"
syms="$(nm -A -C --defined-only "$lib" | grep 'gemv_avx512\.cc\.o:' || true)"
[ -n "$syms" ] || { echo "FAIL: no gemv_avx512.cc.o in $lib" >&2; exit 1; }
bad="$(echo "$syms" | awk '{ type = $2; $1 = $2 = ""; name = substr($0, 3)
  if (type ~ /^[A-Z]$/ && name !~ /^fathom::kernels::cpu::avx512::/ && name !~ /^DW\.ref\./) print type, name }')"
if [ -n "$bad" ]; then
  echo "FAIL: gemv_avx512.cc.o defines shared symbols:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "gemv_avx512.cc.o: $(echo "$syms" | awk '$2 ~ /^[A-Z]$/' | wc -l) global symbols, all avx512 entry points"
