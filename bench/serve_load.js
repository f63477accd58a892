// Load benchmark of `fathom serve` (the embedded demo model unless MODEL is given): streaming
// /v1/completions clients (token-id prompts, ignore_eos, fixed max_tokens) at each level of
// concurrent streams (default 1, 8 and 32) — generated tokens/s, time to first token (median,
// p99, max), the server's resident memory (start, peak, end of each level; /proc/PID/status)
// the server's CPU seconds and the failed requests — then the prefix-cache TTFT gain on a repeated 2k-token prompt
// (cold vs warm), with where the engine thread spent each level's time (/metrics
// fathom_engine_seconds_total; with --speculative dspark, the drafts proposed, the K chosen and
// the mean accepted length), and whether seeded sampling is batch-invariant: the same
// seeded requests alone, one at a time, and then all at once (token ids compared). Each level
// starts requests for SECONDS_PER_LEVEL and waits for the last ones. Prints one JSON object.
// Usage: node bench/serve_load.js FATHOM [SECONDS_PER_LEVEL] [MODEL] [LEVELS] [MAX_TOKENS]
//   LEVELS: comma-separated stream counts (e.g. 64,256,512); MODEL "" = the demo model.
// FATHOM_SERVE_ARGS adds server flags (e.g. "--swa-side-objects" or "--no-async-scheduling").
// PROMPTS=FILE.jsonl takes the level prompts from FILE ({"ids": [...]} a line, e.g. the tiny
// pair's held-out text, train/corpus.py), BOS + up to 64 of a line's ids, lines in turn.
'use strict';
const fs = require('fs');
const { startServer } = require('../tests/serve/start_server.js');
const [fathom, secondsArg, model, levelsArg, maxTokensArg] = process.argv.slice(2);
const seconds = Number(secondsArg || 20);
const levels = (levelsArg || '1,8,32').split(',').map(Number);
const maxTokens = Number(maxTokensArg || 64);
const promptLines = process.env.PROMPTS
  ? fs.readFileSync(process.env.PROMPTS, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l).ids)
  : null;
// The server's CPU seconds (user + system, all threads) from /proc/PID/stat.
const cpuS = (pid) => {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const x = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(x[11]) + Number(x[12])) / 100;  // utime, stime in clock ticks (USER_HZ = 100)
};
const rssMb = (pid) => Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) / 1024;

async function stream(base, prompt, maxTokens) {
  const t0 = performance.now();
  const r = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, ignore_eos: true, stream: true, temperature: 0,
                           stream_options: { include_usage: true } }) });
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
  // Speculative decoding's counters (--speculative dspark): drafted, chosen, accepted.
  for (const [k, name] of [['spec_steps', 'fathom_spec_steps_total'], ['spec_draft', 'fathom_spec_draft_tokens_total'],
    ['spec_verified', 'fathom_spec_verified_tokens_total'], ['spec_accepted', 'fathom_spec_accepted_tokens_total'],
    ['spec_drafting_steps', 'fathom_spec_chosen_per_step_count']]) {
    const x = m.match(new RegExp('^' + name + ' ([\\d.e+-]+)$', 'm'));
    if (x) out[k] = Number(x[1]);
  }
  return out;
}

const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : null; };

(async () => {
  const extra = (process.env.FATHOM_SERVE_ARGS || '').split(' ').filter((x) => x);
  const { proc, port } = await startServer(fathom, [...(model ? [model] : []), ...extra]);
  const base = `http://127.0.0.1:${port}`;
  const result = { seconds_per_level: seconds, max_tokens: maxTokens, rss_idle_mb: rssMb(proc.pid), levels: [] };
  let salt = 0;
  for (const n of levels) {
    const deadline = performance.now() + seconds * 1000;
    const ttfts = [];
    let tokens = 0, failed = 0;
    const errors = [];
    const before = await phases(base);
    const rssStart = rssMb(proc.pid);
    const cpuStart = cpuS(proc.pid);
    let rssPeak = rssStart;
    const sampler = setInterval(() => { rssPeak = Math.max(rssPeak, rssMb(proc.pid)); }, 250);
    const t0 = performance.now();
    await Promise.all(Array.from({ length: n }, async (_, c) => {
      while (performance.now() < deadline) {
        const prompt = promptLines
          ? [0, ...promptLines[(c * 131 + salt++) % promptLines.length].slice(0, 64)]
          : [0, ...Array.from({ length: 64 }, (_, i) => 100 + ((c * 131 + i * 17 + salt++) % 50000))];
        try {
          const r = await stream(base, prompt, maxTokens);
          if (r.tokens !== maxTokens) throw new Error('tokens ' + r.tokens);
          ttfts.push(r.ttft);
          tokens += r.tokens;
        } catch (e) {
          failed++;
          if (errors.length < 3) errors.push(String(e));
        }
      }
    }));
    const el = (performance.now() - t0) / 1000;
    clearInterval(sampler);
    const after = await phases(base);
    const engine_s = {};
    const spec = {};
    for (const k of Object.keys(after)) {
      const d = Number((after[k] - (before[k] || 0)).toFixed(3));
      if (k.startsWith('spec_')) spec[k.slice(5)] = d; else engine_s[k] = d;
    }
    // Per sequence step that drafted: tokens proposed and verified (the chosen K); per step
    // that verified: tokens emitted (accepted + the target's own).
    if (spec.drafting_steps > 0) {
      spec.mean_drafted = Number((spec.draft / spec.drafting_steps).toFixed(3));
      spec.mean_chosen_k = Number((spec.verified / spec.drafting_steps).toFixed(3));
    }
    if (spec.steps > 0) spec.mean_accepted_length = Number((1 + spec.accepted / spec.steps).toFixed(3));
    const r3 = (x) => (x === null ? null : Number(x.toFixed(3)));
    result.levels.push({ concurrency: n, requests: ttfts.length, failed, errors, seconds: r3(el),
      generated_tokens: tokens, tokens_per_s: Number((tokens / el).toFixed(1)), ttft_median_s: r3(pct(ttfts, 0.5)),
      ttft_p99_s: r3(pct(ttfts, 0.99)), ttft_max_s: r3(Math.max(...ttfts)),
      rss_start_mb: Number(rssStart.toFixed(1)), rss_peak_mb: Number(rssPeak.toFixed(1)),
      rss_end_mb: Number(rssMb(proc.pid).toFixed(1)), server_cpu_s: r3(cpuS(proc.pid) - cpuStart), engine_s,
      ...(Object.keys(spec).length ? { speculative: spec } : {}) });
  }
  // Seeded sampling alone vs batched: the largest level's count of seeded requests (temperature
  // 0.9, each its own prompt and seed), first one at a time, then all together.
  const seeded = async (i) => {
    const prompt = [0, ...Array.from({ length: 48 }, (_, k) => 200 + ((i * 977 + k * 31) % 40000))];
    const r = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt, max_tokens: maxTokens, ignore_eos: true, temperature: 0.9, seed: 1000 + i,
                             return_token_ids: true }) });
    const j = await r.json();
    return JSON.stringify(j.choices[0].token_ids);
  };
  const count = Math.max(...levels);
  const alone = [];
  for (let i = 0; i < count; ++i) alone.push(await seeded(i));
  const together = await Promise.all(Array.from({ length: count }, (_, i) => seeded(i)));
  const same = alone.filter((a, i) => a === together[i]).length;
  result.seeded = { requests: count, identical_alone_and_batched: same, all_identical: same === count };
  // Prefix cache: a 2,048-token prompt, cold then warm (same prefix, new last token).
  const long = [0, ...Array.from({ length: 2047 }, (_, i) => 1000 + (i * 7919) % 60000)];
  const cold = await stream(base, long, 1);
  const warm = await stream(base, [...long.slice(0, -1), 4242], 1);
  result.prefix_cache = { prompt_tokens: long.length, cold_ttft_s: cold.ttft, warm_ttft_s: warm.ttft,
    warm_cached_tokens: warm.cached, speedup: cold.ttft / warm.ttft };
  proc.kill('SIGTERM');
  console.log(JSON.stringify(result));
})().catch((e) => { console.error(e); process.exit(1); });
