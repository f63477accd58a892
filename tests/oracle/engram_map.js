// Oracle for the Engram compressed-token map: the reference's normaliser chain
// (NFKC, NFD, StripAccents from Hugging Face `tokenizers`, then lowercase, whitespace
// collapsing and Strip) over every id decoded by HF `tokenizers`, keyed by the raw token for
// decodes with U+FFFD, new ids in first-seen order. Compares with `fathom engram-map`.
// Usage: node engram_map.js NODE_MODULES TOKENIZER_JSON FATHOM_MAP_JSON
'use strict';
const fs = require('fs');
const [modules, tokPath, mapPath] = process.argv.slice(2);
const t = require(modules + '/tokenizers');
const tok = t.Tokenizer.fromFile(tokPath);
const seq = t.sequenceNormalizer([t.nfkcNormalizer(), t.nfdNormalizer(), t.stripAccentsNormalizer()]);
// Rust's char::is_whitespace (Unicode White_Space), which HF's Strip uses; JS trim() also
// strips U+FEFF, which is not White_Space.
const ws = '[\\t\\n\\u000B\\f\\r \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]';
const strip = new RegExp('^' + ws + '+|' + ws + '+$', 'gu');
(async () => {
  const n = tok.getVocabSize(true);
  const keys = new Map();
  const want = [];
  for (let i = 0; i < n; i++) {
    let text = await tok.decode([i], false);
    let key;
    if (text.includes('\uFFFD')) {
      key = '\x01' + tok.idToToken(i);
    } else {
      // Rust's to_lowercase is per character (no final-sigma rule), unlike String.toLowerCase.
      text = Array.from(seq.normalizeString(text), (c) => (c === 'Σ' ? 'σ' : c.toLowerCase())).join('');
      text = text.replace(/[ \t\r\n]+/g, ' ');
      key = text === ' ' ? ' ' : text.replace(strip, '');
    }
    if (!keys.has(key)) keys.set(key, keys.size);
    want.push(keys.get(key));
  }
  const got = JSON.parse(fs.readFileSync(mapPath, 'utf8'));
  let diff = 0;
  for (let i = 0; i < n; i++) {
    if (got.token_map[i] !== want[i]) {
      if (diff < 10) console.log(`id ${i}: fathom ${got.token_map[i]}, oracle ${want[i]}`);
      diff++;
    }
  }
  console.log(`engram map: oracle ${keys.size} compressed ids, fathom ${got.compressed_vocab_size}; ${diff} ids differ`);
  process.exit(diff === 0 && keys.size === got.compressed_vocab_size ? 0 : 1);
})();
