// Times Hugging Face `tokenizers` (npm, native Rust binding) encoding one whole file as a
// single text, the reference side of bench/tokenizer_vs_hf.sh. Prints one JSON line.
// usage: node hf_tokenize.js NODE_MODULES TOKENIZER_JSON INPUT REPEAT [IDS_OUT]
const path = require('path');
const fs = require('fs');
const [modules, tokPath, input, repeatArg, idsOut] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
(async () => {
  let t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tokPath);
  const loadSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const text = fs.readFileSync(input, 'utf8');
  const repeat = parseInt(repeatArg || '3', 10);
  let best = Infinity, first = 0, ids = null;
  for (let r = 0; r < repeat; r++) {
    t0 = process.hrtime.bigint();
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    if (r === 0) first = s;
    best = Math.min(best, s);
    ids = enc.getIds();
  }
  if (idsOut) fs.writeFileSync(idsOut, JSON.stringify(Array.from(ids)) + '\n');
  const bytes = Buffer.byteLength(text, 'utf8');
  console.log(JSON.stringify({ impl: 'hf-tokenizers-0.23.2', bytes, seconds: best,
    first_seconds: first, mb_per_s: bytes / best / 1e6, tokens: ids.length,
    load_seconds: loadSeconds }));
})();
