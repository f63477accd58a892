// Server throughput with structured outputs on, beside the same load without them (issue #13's
// "within 5% of unconstrained at 8 streams"). One `fathom serve` (the embedded demo model
// unless MODEL is given) and a second one with --no-grammar-masks-ahead, both up for the whole
// run. REQUESTS /v1/completions requests (token-id prompts, seeded sampling at temperature 1),
// CONCURRENCY at a time, in three phases per round:
//   ahead:   constrained (vLLM `structured_outputs`), masks computed beside the forward;
//   inline:  the same requests on the second server, masks computed after the forward;
//   none:    unconstrained, each request with ignore_eos and max_tokens = the completion length
//            its constrained twin had, so both phases generate the same tokens in the same
//            requests and differ only in the constraint.
// Seeded sampling makes every phase generate the same lengths each round (checked: the ahead
// and inline tokens must be equal). Prints one JSON line per grammar: each phase's median
// tokens/s over ROUNDS rounds (phases interleaved), and the ratios.
// Usage: node bench/grammar_serve_throughput.js FATHOM [ROUNDS] [REQUESTS] [CONCURRENCY] [MODEL]
'use strict';
const { startServer, randomPrompt } = require('../tests/serve/start_server.js');
const [fathom, roundsArg, requestsArg, concArg, model] = process.argv.slice(2);
const rounds = Number(roundsArg || 3);
const nRequests = Number(requestsArg || 48);
const concurrency = Number(concArg || 8);
const maxTokens = 128;

const grammars = {
  // A typical extraction schema: strings, an integer range, an enum, an array of strings.
  json_schema: {
    json: {
      type: 'object',
      properties: {
        name: { type: 'string' },
        age: { type: 'integer', minimum: 0, maximum: 150 },
        role: { enum: ['admin', 'user', 'guest'] },
        summary: { type: 'string' },
        tags: { type: 'array', items: { type: 'string' } },
      },
      required: ['name', 'age', 'role', 'summary', 'tags'],
    },
  },
  // Free text from a class of characters (most of the vocabulary's lowercase words).
  regex: { regex: '[a-z ,.]+' },
};

async function complete(base, body) {
  const r = await fetch(base + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const j = await r.json();
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${JSON.stringify(j)}`);
  return { tokens: j.usage.completion_tokens, ids: j.choices[0].token_ids || [] };
}

// Runs the bodies `concurrency` at a time; the results in order and the wall seconds.
async function phase(base, bodies) {
  const out = new Array(bodies.length);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < bodies.length) {
      const i = next++;
      out[i] = await complete(base, bodies[i]);
    }
  }));
  return { out, seconds: (performance.now() - t0) / 1000 };
}

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };

(async () => {
  const args = model ? [model] : [];
  const ahead = await startServer(fathom, args);
  const inline = await startServer(fathom, [...args, '--no-grammar-masks-ahead']);
  const url = (s) => `http://127.0.0.1:${s.port}`;
  try {
    for (const [name, spec] of Object.entries(grammars)) {
      const base = (i) => ({ prompt: randomPrompt(1000 + i, 32), temperature: 1, seed: i,
                             max_tokens: maxTokens, return_token_ids: true });
      const constrained = Array.from({ length: nRequests }, (_, i) => ({ ...base(i), structured_outputs: spec }));
      // Warm-up (compiles the grammar, fills the prefix caches) and the lengths.
      const warm = await phase(url(ahead), constrained);
      await phase(url(inline), constrained);
      const plain = warm.out.map((r, i) => ({ ...base(i), max_tokens: r.tokens, ignore_eos: true }));
      await phase(url(ahead), plain);
      const total = warm.out.reduce((a, r) => a + r.tokens, 0);
      const tps = { ahead: [], inline: [], none: [] };
      for (let k = 0; k < rounds; k++) {
        const a = await phase(url(ahead), constrained);
        const b = await phase(url(inline), constrained);
        const c = await phase(url(ahead), plain);
        for (let i = 0; i < nRequests; i++) {
          if (JSON.stringify(a.out[i].ids) !== JSON.stringify(b.out[i].ids) || a.out[i].tokens !== warm.out[i].tokens)
            throw new Error(`request ${i}: the constrained outputs differ between runs`);
          if (c.out[i].tokens !== a.out[i].tokens) throw new Error(`request ${i}: unconstrained length differs`);
        }
        tps.ahead.push(total / a.seconds);
        tps.inline.push(total / b.seconds);
        tps.none.push(total / c.seconds);
      }
      const m = { ahead: median(tps.ahead), inline: median(tps.inline), none: median(tps.none) };
      console.log(JSON.stringify({
        grammar: name, requests: nRequests, concurrency, rounds, tokens_per_round: total,
        mean_completion_tokens: +(total / nRequests).toFixed(1),
        tokens_per_s: { ahead: +m.ahead.toFixed(1), inline: +m.inline.toFixed(1), none: +m.none.toFixed(1) },
        ahead_vs_none: +(m.ahead / m.none).toFixed(3), inline_vs_none: +(m.inline / m.none).toFixed(3),
        all_rounds: tps,
      }));
    }
  } finally {
    ahead.proc.kill('SIGTERM');
    inline.proc.kill('SIGTERM');
  }
})().catch((e) => { console.error(e); process.exit(1); });
