// Load benchmark of `fathom serve` (the embedded demo model unless MODEL is given): streaming
// /v1/completions clients (token-id prompts, ignore_eos, fixed max_tokens) at 1, 8 and 32
// concurrent streams — generated tokens/s and time to first token — and the prefix-cache TTFT
// gain on a repeated 2k-token prompt (cold vs warm), with where the engine thread spent each
// level's time (/metrics fathom_engine_seconds_total). Prints one JSON object.
// Usage: node bench/serve_load.js FATHOM [SECONDS_PER_LEVEL] [MODEL]
// FATHOM_SERVE_ARGS adds server flags (e.g. "--swa-side-objects" or "--no-async-scheduling").
'use strict';
const { startServer } = require('../tests/serve/start_server.js');
const [fathom, secondsArg, model] = process.argv.slice(2);
const seconds = Number(secondsArg || 20);


async function stream(base, prompt, maxTokens) {
  const t0 = performance.now();
  const r = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, ignore_eos: true, stream: true, temperature: 0 }) });
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let ttft = null, buf = '', tokens = 0, cached = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (ttft === null) ttft = (performance.now() - t0) / 1000;
    buf += dec.decode(value, { stream: true });
  }
  const m = buf.match(/"completion_tokens":(\d+)/g);
  if (m) tokens = Number(m[m.length - 1].split(':')[1]);
  const c = buf.match(/"cached_tokens":(\d+)/g);
  if (c) cached = Number(c[c.length - 1].split(':')[1]);
  return { ttft, tokens, cached, seconds: (performance.now() - t0) / 1000 };
}

async function phases(base) {
  const m = await (await fetch(base + '/metrics')).text();
  const out = {};
  for (const x of m.matchAll(/fathom_engine_seconds_total\{phase="(\w+)"\} ([\d.e+-]+)/g)) out[x[1]] = Number(x[2]);
  return out;
}

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.floor(s.length / 2)] : null; };

(async () => {
  const extra = (process.env.FATHOM_SERVE_ARGS || '').split(' ').filter((x) => x);
  const { proc, port } = await startServer(fathom, [...(model ? [model] : []), ...extra]);
  const base = `http://127.0.0.1:${port}`;
  const result = { seconds_per_level: seconds, levels: [] };
  let salt = 0;
  for (const n of [1, 8, 32]) {
    const deadline = performance.now() + seconds * 1000;
    const ttfts = [];
    let tokens = 0;
    const before = await phases(base);
    const t0 = performance.now();
    await Promise.all(Array.from({ length: n }, async (_, c) => {
      while (performance.now() < deadline) {
        const prompt = [0, ...Array.from({ length: 64 }, (_, i) => 100 + ((c * 131 + i * 17 + salt++) % 50000))];
        const r = await stream(base, prompt, 64);
        ttfts.push(r.ttft);
        tokens += r.tokens;
      }
    }));
    const el = (performance.now() - t0) / 1000;
    const after = await phases(base);
    const engine_s = {};
    for (const k of Object.keys(after)) engine_s[k] = Number((after[k] - (before[k] || 0)).toFixed(3));
    result.levels.push({ concurrency: n, requests: ttfts.length, generated_tokens: tokens,
      tokens_per_s: tokens / el, ttft_median_s: median(ttfts), ttft_max_s: Math.max(...ttfts), engine_s });
  }
  // Prefix cache: a 2,048-token prompt, cold then warm (same prefix, new last token).
  const long = [0, ...Array.from({ length: 2047 }, (_, i) => 1000 + (i * 7919) % 60000)];
  const cold = await stream(base, long, 1);
  const warm = await stream(base, [...long.slice(0, -1), 4242], 1);
  result.prefix_cache = { prompt_tokens: long.length, cold_ttft_s: cold.ttft, warm_ttft_s: warm.ttft,
    warm_cached_tokens: warm.cached, speedup: cold.ttft / warm.ttft };
  proc.kill('SIGTERM');
  console.log(JSON.stringify(result));
})().catch((e) => { console.error(e); process.exit(1); });
