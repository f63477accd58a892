#!/usr/bin/env bash
# Runs a test binary with FATHOM_CPU=PATH (every kernel of the process on that instruction-set
# path), or says the path is untested when this machine or build lacks it (a skip, printed as
# such, never a pass of that path).
# usage: on_path.sh FATHOM PATH TEST_BINARY [ARGS...]
set -uo pipefail
fathom="$1" path="$2"
shift 2
if ! why="$(FATHOM_CPU=$path "$fathom" bench matmul --weights bf16 --m 32 --k 64 --n 1 --repeat 1 2>&1 >/dev/null)"; then
  echo "kernel path $path: untested on this machine (${why#fathom: })"
  exit 0
fi
echo "kernel path $path: FATHOM_CPU=$path $*"
FATHOM_CPU=$path exec "$@"
