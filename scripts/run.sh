#!/usr/bin/env bash
# The main job: build Fathom and start the OpenAI / Anthropic compatible server with the
# embedded default model (the `demo` preset: tiny V4.1 shapes with the full 129,280-token
# vocabulary, generated on first use into $FATHOM_CACHE/models/demo-seed0) and the fetched
# DeepSeek V4.1 tokenizer fixture. It prints a ready-to-paste curl line. Extra arguments go
# to `fathom serve` (e.g. a checkpoint directory, --port, --api-key).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target fathom
exec "$root/build/fathom" serve "$@"
