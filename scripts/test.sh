#!/usr/bin/env bash
# Builds Fathom twice and runs the whole test suite on each build: optimised (build/) and
# with AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/). Warnings are errors.
# Run scripts/setup.sh --oracles first (the README's test command does both).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="$(nproc)"

run_suite() {
  local dir="$1"; shift
  echo "== configure $dir $*"
  cmake -S "$root" -B "$root/$dir" -G Ninja "$@" >/dev/null
  echo "== build $dir"
  cmake --build "$root/$dir" -j "$jobs"
  echo "== test $dir"
  (cd "$root/$dir" && ctest --output-on-failure -j "$jobs" --timeout 1200)
}

run_suite build -DCMAKE_BUILD_TYPE=Release
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
  run_suite build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFATHOM_SANITIZE=ON
