#!/usr/bin/env bash
# Trains the tiny pair the DSpark figures are measured on (issue #12) and writes it to DIR as
# a checkpoint `fathom serve --model DIR` loads: a V4.1-shaped target (the `demo` preset's
# shapes: dim 256, 10 layers, the released 129,280-token vocabulary) trained on Debian's
# `fortunes` text, and its three DSpark draft stages trained against the frozen target with
# the paper's loss, then calibrated. CPU only (Debian's python3-torch), deterministic for the
# seeds on one machine; about TARGET_STEPS + DSPARK_STEPS steps of a few seconds each.
# Idempotent: a finished DIR is reused; an interrupted run resumes from its last saved step.
# Usage: scripts/train_tiny.sh DIR     (env: FATHOM, TOKENIZER, TARGET_STEPS, DSPARK_STEPS)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
dir="${1:?usage: scripts/train_tiny.sh DIR}"
fathom="${FATHOM:-$root/build/fathom}"
tokenizer="${TOKENIZER:-$HOME/.cache/fathom/tokenizers/deepseek_v41_fixture/tokenizer.json}"
target_steps="${TARGET_STEPS:-200}"
dspark_steps="${DSPARK_STEPS:-120}"
py=/usr/bin/python3

packages=(python3-torch python3-numpy libopenblas0-pthread fortunes)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "train_tiny: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[[ -x "$fathom" ]] || { echo "train_tiny: build fathom first ($fathom)" >&2; exit 2; }
[[ -f "$tokenizer" ]] || "$root/scripts/fetch-tokenizer.sh"

# What the result depends on: the training code, this script, the steps, the package data.
stamp="$(cat "$root"/train/*.py "$0" | sha256sum | cut -d' ' -f1)-$target_steps-$dspark_steps-$(dpkg-query -W -f='${Version}' fortunes)"
if [[ -f "$dir/train_stamp" && "$(cat "$dir/train_stamp")" == "$stamp" ]]; then
  echo "train_tiny: $dir is up to date"
  exit 0
fi
work="$dir/work"
mkdir -p "$work"
[[ -f "$work/init/model.safetensors" ]] ||
  "$fathom" mkmodel --preset demo --seed 0 --out "$work/init"
[[ -f "$work/corpus/train.npy" ]] ||
  "$py" "$root/train/corpus.py" --fathom "$fathom" --tokenizer "$tokenizer" --out "$work/corpus"
[[ -f "$work/target_result.json" ]] ||
  "$py" "$root/train/train_target.py" --init "$work/init" --corpus "$work/corpus" \
    --work "$work" --steps "$target_steps"
[[ -f "$work/dspark_result.json" ]] ||
  "$py" "$root/train/train_dspark.py" --target "$work" --init "$work/init" \
    --corpus "$work/corpus" --work "$work" --steps "$dspark_steps"
"$py" "$root/train/export.py" --init "$work/init" --state "$work/dspark_state.pt" \
  --calibration "$work/dspark_result.json" --out "$dir"
"$py" "$root/train/draft_vocab.py" --corpus "$work/corpus" --out "$dir"
"$fathom" inspect --model "$dir" >/dev/null
cp "$work/corpus/heldout.jsonl" "$dir/heldout.jsonl"
echo "$stamp" >"$dir/train_stamp"
echo "train_tiny: $dir (target: $(cat "$work/target_result.json"); drafts: $work/dspark_result.json)"
