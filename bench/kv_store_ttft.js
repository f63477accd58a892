// The KV store's TTFT gain: one long prompt (default 2,048 ids) on `fathom serve` (the demo
// model unless MODEL is given), max_tokens 1, timed as
//   cold  — a server with --kv-store-dir on an empty directory (and --kv-store-redis when
//           REDIS is given), first request;
//   L1    — the same request again (the in-process prefix cache);
//   L2    — after a restart on the same directory (the disk);
//   L3    — (with REDIS) a server with --kv-store-redis only, which never saw the prompt;
// best of REPEAT runs each (a new prompt and directory each time), plus the bytes the store read
// per hit (and, for L3, the Redis round trips the hit took). Prints one JSON object. Start a
// Redis Cluster yourself for L3 (shared/spec/dependencies.md §4.2), e.g.
// REDIS=127.0.0.1:17001,...
// TIERS (default: l1,l2, and l3 when REDIS is given) picks the hits measured; the cold request
// always runs (it writes the store the others read).
// Usage: [TIERS=l1,l2,l3] [REDIS=HOST:PORT,...] node bench/kv_store_ttft.js FATHOM [TOKENS]
//        [REPEAT] [MODEL]
//   e.g. TIERS=l2,l3 REDIS=127.0.0.1:17001 node bench/kv_store_ttft.js build/fathom 8192 3
//   (8,192 tokens, the length issue #14 asks for; the demo model's context is 1,048,576).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { startServer } = require('../tests/serve/start_server.js');

const [fathom, tokensArg, repeatArg, model] = process.argv.slice(2);
const N = Number(tokensArg || 2048);
const repeat = Number(repeatArg || 3);
const redis = process.env.REDIS || '';
const tiers = new Set((process.env.TIERS || (redis ? 'l1,l2,l3' : 'l1,l2')).split(',').filter((t) => t));
for (const t of tiers) if (!['l1', 'l2', 'l3'].includes(t)) throw new Error(`TIERS: unknown tier '${t}' (l1, l2, l3)`);
if (tiers.has('l3') && !redis) throw new Error('TIERS has l3: give the Redis Cluster as REDIS=HOST:PORT,...');
// A prompt of its own for each run, so that no run finds another's blocks in Redis.
function makePrompt(seed) {
  const p = [];
  for (let i = 0, s = seed; i < N; i++) {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    p.push(s % 32000);
  }
  return p;
}
let prompt = [];

async function withServer(args, fn) {
  const { proc, port } = await startServer(fathom, [...(model ? [model] : []), ...args]);
  const base = `http://127.0.0.1:${port}`;
  const ask = async () => {
    const t0 = performance.now();
    const r = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0, ignore_eos: true }) });
    const j = await r.json();
    if (r.status !== 200) throw new Error(JSON.stringify(j));
    return { s: (performance.now() - t0) / 1000, cached: j.usage.prompt_tokens_details.cached_tokens };
  };
  const metric = async (name) => {
    const m = (await (await fetch(base + '/metrics')).text()).match(new RegExp('^' + name + '(\\{[^}]*\\})? (\\d+)$', 'm'));
    return m ? Number(m[2]) : 0;
  };
  try {
    return await fn(ask, metric);
  } finally {
    proc.kill('SIGTERM');
    await new Promise((res) => proc.on('exit', res));
  }
}

(async () => {
  const best = { cold: Infinity, l1: Infinity, l2: Infinity, l3: Infinity };
  const out = { tokens: N, repeat, tiers: [...tiers].join(',') };
  for (let r = 0; r < repeat; r++) {
    prompt = makePrompt(99991 + 7919 * r + (process.pid % 1000) * 104729);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fathom-kv-bench-'));
    const store = ['--kv-store-dir', dir, ...(redis ? ['--kv-store-redis', redis] : [])];
    await withServer(store, async (ask) => {
      best.cold = Math.min(best.cold, (await ask()).s);
      if (!tiers.has('l1')) return;
      const warm = await ask();
      best.l1 = Math.min(best.l1, warm.s);
      out.l1_cached = warm.cached;
    });
    if (tiers.has('l2')) {
      await withServer(['--kv-store-dir', dir], async (ask, metric) => {
        const hit = await ask();
        best.l2 = Math.min(best.l2, hit.s);
        out.l2_cached = hit.cached;
        out.l2_read_bytes = await metric('fathom_kv_store_read_bytes_total');
      });
    }
    if (tiers.has('l3')) {
      await withServer(['--kv-store-redis', redis], async (ask, metric) => {
        const hit = await ask();
        best.l3 = Math.min(best.l3, hit.s);
        out.l3_cached = hit.cached;
        out.l3_read_bytes = await metric('fathom_kv_store_read_bytes_total');
        out.l3_round_trips = await metric('fathom_kv_store_redis_round_trips_total');
      });
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }
  for (const k of Object.keys(best)) if (best[k] !== Infinity) out[k + '_ttft_s'] = Number(best[k].toFixed(4));
  if (tiers.has('l2')) out.l2_speedup = Number((best.cold / best.l2).toFixed(2));
  if (tiers.has('l3')) out.l3_speedup = Number((best.cold / best.l3).toFixed(2));
  console.log(JSON.stringify(out));
  process.exit(0);  // startServer's start-up timeout would hold the process for two minutes
})().catch((e) => { console.error(e); process.exit(1); });
