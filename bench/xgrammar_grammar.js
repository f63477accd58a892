// The reference side of bench/grammar_vs_xgrammar.sh: XGrammar compiled to WebAssembly
// (@mlc-ai/web-xgrammar, npm) under node. For each grammar of a job file it compiles the grammar
// for the tokenizer's vocabulary (a compiler without cache, so each compile is a real one) and
// times the next-token bitmask along the given token ids (the ones Fathom timed along, from
// `fathom bench grammar --ids-out`): the mask before each token, then acceptToken. Prints one
// JSON line per grammar, with the number of tokens each mask allows (counts).
//
// usage: node xgrammar_grammar.js NODE_MODULES TOKENIZER_JSON JOBS_JSON REPEAT
//   JOBS_JSON: [{"name", "kind": "json_schema"|"regex"|"gbnf", "text", "ids": [..]}, ...]
//
// The package is a UMD bundle inside a "type": "module" package, so node would load lib/index.js
// as an ES module and the UMD wrapper would find no `exports`: load a .cjs copy with createRequire.
'use strict';
const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

const [modules, tokPath, jobsPath, repeatArg] = process.argv.slice(2);
const repeat = Math.max(1, parseInt(repeatArg || '5', 10));
const VOCAB_SIZE = 129280;
const EOS = '<｜end▁of▁sentence｜>';

function loadXGrammar() {
  const dir = path.join(modules, '@mlc-ai', 'web-xgrammar', 'lib');
  const cjs = path.join(dir, 'index.cjs');
  if (!fs.existsSync(cjs)) fs.copyFileSync(path.join(dir, 'index.js'), cjs);
  return createRequire(cjs)(cjs);
}

// The vocabulary as XGrammar's byte_level TokenizerInfo wants it: each id's spelling in
// tokenizer.json's byte-level alphabet. Added tokens, special or not (<｜User｜>, <think>,
// ｜DSML｜, ...: chat markup), become "", which XGrammar treats as special: never in a mask but
// as a stop token. Fathom's token table leaves them out of masks too, so both sides choose among
// the same tokens. Ids with no token are "".
function encodedVocab(tok) {
  const vocab = new Array(VOCAB_SIZE).fill('');
  for (const [s, id] of Object.entries(tok.model.vocab)) vocab[id] = s;
  let eos = -1;
  for (const t of tok.added_tokens) {
    if (t.content === EOS) eos = t.id;
    vocab[t.id] = '';
  }
  return { vocab, eos };
}

function pct(sorted, p) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] : 0;
}
const median = (v) => pct([...v].sort((a, b) => a - b), 0.5);
const nowUs = () => Number(process.hrtime.bigint()) / 1e3;

(async () => {
  const xg = loadXGrammar();
  const tok = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
  const { vocab, eos } = encodedVocab(tok);
  let t0 = nowUs();
  const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, 'byte_level', false, VOCAB_SIZE, [eos]);
  const compiler = await xg.GrammarCompiler.createGrammarCompiler(info, false);
  const prepMs = (nowUs() - t0) / 1e3;

  const compile = async (job) => {
    switch (job.kind) {
      case 'json_schema':
        // Compact, as `fathom bench grammar --compact`: no whitespace, separators "," and ":",
        // one line (indent -1), strict mode (no properties or items beyond the schema's).
        return compiler.compileJSONSchema(job.text, false, -1, [',', ':'], true);
      case 'gbnf':
        return compiler.compileGrammar(job.text, 'root');
      case 'regex':
        return compiler.compileStructuralTag({ type: 'structural_tag', format: { type: 'regex', pattern: job.text } });
      default:
        throw new Error('unknown kind ' + job.kind);
    }
  };

  const jobs = JSON.parse(fs.readFileSync(jobsPath, 'utf8'));
  for (const job of jobs) {
    const out = { impl: 'web-xgrammar-0.1.27', name: job.name, kind: job.kind, tokens: job.ids.length,
      tokenizer_prep_ms: +prepMs.toFixed(1) };
    try {
      // Compile: one warm-up, then `repeat` timed compiles; the median.
      (await compile(job)).dispose();
      const compileMs = [];
      let cg = null;
      for (let r = 0; r < repeat; r++) {
        if (cg) cg.dispose();
        t0 = nowUs();
        cg = await compile(job);
        compileMs.push((nowUs() - t0) / 1e3);
      }
      // Masks: the raw binding call (the mask computed into a wasm-heap vector, then freed),
      // which is the work fathom's fill_next_token_bitmask does; the public async
      // getNextTokenBitmask() adds a promise and a 16 KB copy, timed separately (api).
      const m = await xg.GrammarMatcher.createGrammarMatcher(cg, [eos]);
      const pass = (timed) => {
        m.reset();
        const us = [];
        for (const id of job.ids) {
          const a = nowUs();
          const v = m.handle.GetNextTokenBitmask(VOCAB_SIZE);
          v.delete();
          if (timed) us.push(nowUs() - a);
          if (!m.acceptToken(id)) throw new Error(`token ${id} (#${us.length}) rejected`);
        }
        return us.sort((x, y) => x - y);
      };
      pass(false);  // warm-up
      const med = [], p99 = [];
      for (let r = 0; r < repeat; r++) {
        const us = pass(true);
        med.push(pct(us, 0.5));
        p99.push(pct(us, 0.99));
      }
      // The public API, timed; the tokens each mask allows, counted outside the timing.
      m.reset();
      const api = [], counts = [];
      for (const id of job.ids) {
        const a = nowUs();
        const mask = await m.getNextTokenBitmask();
        api.push(nowUs() - a);
        let c = 0;
        for (let w of mask) for (w >>>= 0; w; w &= w - 1) c++;
        counts.push(c);
        m.acceptToken(id);
      }
      m.dispose();
      cg.dispose();
      Object.assign(out, {
        compile_ms: +median(compileMs).toFixed(3),
        mask_us_median: +median(med).toFixed(2),
        mask_us_p99: +median(p99).toFixed(2),
        mask_us_median_api: +median(api).toFixed(2),
        counts,
      });
    } catch (e) {
      out.error = String(e && e.message ? e.message : e);
    }
    console.log(JSON.stringify(out));
  }
  compiler.dispose();
  info.dispose();
})();
