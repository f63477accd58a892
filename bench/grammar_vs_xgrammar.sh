#!/usr/bin/env bash
# Side-by-side grammar benchmark (issue #13): Fathom's grammar engine (`fathom bench grammar`) and
# XGrammar compiled to WebAssembly (@mlc-ai/web-xgrammar 0.1.27 from npm, under node) in one run,
# on the same grammars (bench/grammars/: JSON Schemas, regexes, a GBNF grammar), the same
# tokenizer (DeepSeek V4.1's fixture, vocabulary 129,280) and the same token ids: each grammar has
# a valid output NAME.out; Fathom tokenizes it as the model would emit it, times the masks along
# it and writes the ids (--ids-out); XGrammar's matcher is fed those ids (acceptToken), with the
# next-token bitmask timed before each, so both sides time masks at the same positions.
#
# Whitespace: compact on both sides (Fathom --compact; XGrammar any_whitespace=false, indent -1,
# separators "," ":", strict mode). Regexes go to XGrammar as a structural tag with a regex
# format (web-xgrammar has no regex entry point); the GBNF file is given to XGrammar's EBNF parser
# unchanged. Added tokens (special or not: <｜User｜>, <think>, ...) are "" in XGrammar's
# vocabulary, so never in its masks, as they are never in Fathom's.
#
# Figures per grammar (medians over REPEAT fathom processes / REPEAT XGrammar compiles and mask
# passes, after a warm-up):
#   vocabulary preparation   once per tokenizer, outside compile: Fathom's TokenTable,
#                            XGrammar's TokenizerInfo + GrammarCompiler
#   fathom compile_ms        build + compile, masks computed lazily on first use
#   fathom eager_ms          compile + --precompute (every state's mask): what XGrammar's compile does
#   fathom mask median/p99   warm (precomputed); cold = first matcher, lazy masks (no --precompute)
#   xgrammar compile_ms      compileJSONSchema / compileGrammar / compileStructuralTag, cache off
#   xgrammar mask median/p99 the binding's GetNextTokenBitmask (the mask into a wasm vector);
#                            mask_api = the public async getNextTokenBitmask() (adds a 16 KB copy)
#   ratios                   xgrammar / fathom (> 1: Fathom is faster)
#   same                     steps at which both masks allow the same number of tokens (a check
#                            that both engines enforce the same language; the JSON lines list
#                            the first steps that differ). Known differences: inside free
#                            strings XGrammar also allows the single-byte tokens C0, C1, F5-F7
#                            (never valid UTF-8) and the escape \/ (tokens "\/", "<\/"), which
#                            Fathom's canonical strings leave out: 7 of ~126k tokens (fewer
#                            inside formats and bounded strings)
# p99 over a few dozen tokens is close to the maximum.
#
# Needs node (>= 18), a build (`cmake --build build --target fathom`) and the tokenizer fixture;
# installs @mlc-ai/web-xgrammar into $FATHOM_CACHE/bench-node (not into the repository).
# usage: bench/grammar_vs_xgrammar.sh [BUILD_DIR] [REPEAT]     (REPEAT defaults to 5)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
repeat="${2:-5}"
cache="${FATHOM_CACHE:-$HOME/.cache/fathom}"
tok="$cache/tokenizers/deepseek_v41_fixture/tokenizer.json"
node_dir="$cache/bench-node"
xg_version=0.1.27
grammars="$root/bench/grammars"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

[ -x "$build/fathom" ] || { echo "no $build/fathom: build it first" >&2; exit 1; }
[ -f "$tok" ] || { echo "no tokenizer fixture at $tok" >&2; exit 1; }
if [ ! -f "$node_dir/node_modules/@mlc-ai/web-xgrammar/package.json" ] ||
   ! grep -q "\"version\": \"$xg_version\"" "$node_dir/node_modules/@mlc-ai/web-xgrammar/package.json"; then
  mkdir -p "$node_dir"
  [ -f "$node_dir/package.json" ] || echo '{"private": true}' >"$node_dir/package.json"
  npm install --prefix "$node_dir" --no-audit --no-fund "@mlc-ai/web-xgrammar@$xg_version" >&2
fi

echo "# $(date -u +%FT%TZ) $(uptime | sed 's/^ *//')"
echo "# node $(node --version), $(nproc) cpus, repeat $repeat"

# name kind file: every grammar in bench/grammars with a NAME.out beside it.
list="$work/list"
: >"$list"
for f in "$grammars"/*.schema.json; do n="$(basename "$f" .schema.json)"; echo "$n json_schema $f" >>"$list"; done
for f in "$grammars"/*.regex; do n="$(basename "$f" .regex)"; echo "$n regex $f" >>"$list"; done
for f in "$grammars"/*.gbnf; do n="$(basename "$f" .gbnf)"; echo "$n gbnf $f" >>"$list"; done

while read -r name kind file; do
  case "$kind" in
    json_schema) src=(--schema "$file" --compact) ;;
    regex) src=(--regex "$(cat "$file")") ;;
    gbnf) src=(--gbnf "$file") ;;
  esac
  for ((r = 0; r < repeat; r++)); do
    "$build/fathom" bench grammar --tokenizer "$tok" "${src[@]}" --output "$grammars/$name.out" \
      --precompute --ids-out "$work/$name.ids.$r" >>"$work/$name.eager"
    "$build/fathom" bench grammar --tokenizer "$tok" "${src[@]}" --output "$grammars/$name.out" \
      >>"$work/$name.lazy"
    cmp -s "$work/$name.ids.0" "$work/$name.ids.$r" || { echo "FAIL: $name: ids differ between runs" >&2; exit 1; }
  done
  # Untimed: how many tokens each mask allows, to compare with XGrammar's masks.
  "$build/fathom" bench grammar --tokenizer "$tok" "${src[@]}" --output "$grammars/$name.out" \
    --counts-out "$work/$name.counts" >/dev/null
done <"$list"

python3 - "$list" "$work" >"$work/jobs.json" <<'PY'
import json, sys
jobs = []
for line in open(sys.argv[1]):
    name, kind, file = line.split()
    jobs.append({"name": name, "kind": kind, "text": open(file).read(),
                 "ids": json.load(open(f"{sys.argv[2]}/{name}.ids.0"))})
print(json.dumps(jobs))
PY
node "$root/bench/xgrammar_grammar.js" "$node_dir/node_modules" "$tok" "$work/jobs.json" "$repeat" >"$work/xg"

python3 - "$list" "$work" <<'PY'
import json, statistics, sys
work = sys.argv[2]
xg = {j["name"]: j for j in map(json.loads, open(f"{work}/xg"))}
med = lambda rows, k: statistics.median(r[k] for r in rows)
rows = []
for line in open(sys.argv[1]):
    name, kind, _ = line.split()
    eager = [json.loads(l) for l in open(f"{work}/{name}.eager")]
    lazy = [json.loads(l) for l in open(f"{work}/{name}.lazy")]
    f = {"compile_ms": med(lazy, "compile_ms"),
         "eager_ms": statistics.median(r["compile_ms"] + r["precompute_ms"] for r in eager),
         "mask_us_median": med(eager, "mask_us_median"), "mask_us_p99": med(eager, "mask_us_p99"),
         "mask_us_median_cold": med(lazy, "mask_us_median_cold"),
         "mask_us_p99_cold": med(lazy, "mask_us_p99_cold"), "states": eager[0]["states"]}
    x = xg[name]
    fc, xc = json.load(open(f"{work}/{name}.counts")), x.pop("counts", [])
    diff = [(i, a, b) for i, (a, b) in enumerate(zip(fc, xc)) if a != b]
    row = {"name": name, "kind": kind, "tokens": eager[0]["tokens"], "fathom": f, "xgrammar": x,
           "masks_same_size": f"{len(fc) - len(diff)}/{len(fc)}",
           "mask_size_diffs": [{"step": i, "fathom": a, "xgrammar": b} for i, a, b in diff[:4]]}
    if "error" not in x:
        r = lambda a, b: round(a / b, 1) if b > 0 else None
        row["ratio_xg_over_fathom"] = {
            "compile_vs_eager": r(x["compile_ms"], f["eager_ms"]),
            "compile_vs_lazy": r(x["compile_ms"], f["compile_ms"]),
            "mask_median": r(x["mask_us_median"], f["mask_us_median"]),
            "mask_p99": r(x["mask_us_p99"], f["mask_us_p99"]),
            "mask_median_vs_cold": r(x["mask_us_median"], f["mask_us_median_cold"])}
    rows.append(row)
    print(json.dumps(row))
tables = [json.loads(run)["token_table_ms"] for g in open(sys.argv[1])
          for run in open(f"{work}/{g.split()[0]}.lazy")]
print(f"# vocabulary preparation (once per tokenizer, not in compile): fathom token table "
      f"{statistics.median(tables):.1f} ms (median of {len(tables)}), xgrammar tokenizer info + "
      f"compiler {next(iter(xg.values()))['tokenizer_prep_ms']} ms")
h = ("grammar", "kind", "tok", "F comp", "F eager", "X comp", "X/Feager", "F med", "F p99",
     "F coldmed", "F coldp99", "X med", "X p99", "X api", "X/F med", "X/F p99", "same")
fmt = ("{:<9} {:<11} {:>4} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>9} {:>9} {:>7} {:>8} {:>7} {:>7}"
       " {:>7} {:>7}")
print("# compile in ms, masks in µs; X/F = xgrammar / fathom")
print(fmt.format(*h))
for row in rows:
    f, x = row["fathom"], row["xgrammar"]
    if "error" in x:
        print(f"{row['name']:<9} {row['kind']:<11} xgrammar error: {x['error']}")
        continue
    q = row["ratio_xg_over_fathom"]
    print(fmt.format(row["name"], row["kind"], row["tokens"], f"{f['compile_ms']:.2f}",
                     f"{f['eager_ms']:.1f}", f"{x['compile_ms']:.1f}", q["compile_vs_eager"],
                     f"{f['mask_us_median']:.2f}", f"{f['mask_us_p99']:.2f}",
                     f"{f['mask_us_median_cold']:.2f}", f"{f['mask_us_p99_cold']:.0f}",
                     f"{x['mask_us_median']:.2f}",
                     f"{x['mask_us_p99']:.1f}", f"{x['mask_us_median_api']:.1f}",
                     q["mask_median"], q["mask_p99"], row["masks_same_size"]))
PY
