#!/usr/bin/env bash
# Formats all C++ sources with the repository's .clang-format; with --check, changes
# nothing and fails if any file is not formatted.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.cc' '*.h' | grep -v '\.inc$')
if [[ "${1:-}" == "--check" ]]; then
  clang-format --dry-run -Werror "${files[@]}"
  echo "${#files[@]} files formatted; 1 passed, 0 failed"
else
  clang-format -i "${files[@]}"
fi
