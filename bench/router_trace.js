// Routing quality on a multi-turn trace: REPLICAS `fathom serve` replicas (the demo model,
// one compute thread each) behind `fathom router`, once per policy (cache_aware, then
// round_robin; fresh replicas each time, so both start cold). The trace (Mooncake-like): SESSIONS
// sessions of TURNS turns; a session's first prompt is FIRST random token ids, each later turn
// is the previous prompt + the previous answer's ids + ADD new ids; CONCURRENCY sessions run at
// once, each turn after the previous one's answer (greedy, 16 tokens, ignore_eos). Prints one
// JSON object: per policy the prompt tokens the replicas served from their prefix cache
// (hit_rate = cached / prompt tokens), the requests per replica, and the trace's wall time and
// throughput; then the ratios cache_aware / round_robin.
// Usage: node bench/router_trace.js FATHOM [REPLICAS] [SESSIONS] [TURNS] [CONCURRENCY] [FIRST] [ADD]
'use strict';
const { startServer, startRouter, randomPrompt } = require('../tests/serve/start_server.js');
const [fathom, ...rest] = process.argv.slice(2);
const [replicas, sessions, turns, concurrency, first, add] =
  [4, 16, 5, 8, 384, 128].map((d, i) => Number(rest[i] || d));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function runPolicy(policy) {
  const reps = [];
  for (let i = 0; i < replicas; i++) reps.push(await startServer(fathom, ['--threads', '1']));
  const router = await startRouter(fathom, [...reps.flatMap((r) => ['--replica', `http://127.0.0.1:${r.port}`]),
    '--policy', policy]);
  const base = `http://127.0.0.1:${router.port}`;
  for (;;) {
    const m = await (await fetch(base + '/metrics')).text();
    if ((m.match(/^fathom_router_replica_up\{.*\} 1$/mg) || []).length === replicas) break;
    await sleep(100);
  }
  let prompt = 0, cached = 0, generated = 0;
  const t0 = performance.now();
  let next = 0;
  async function session(s) {
    let ids = randomPrompt(1000 + s, first);
    for (let t = 0; t < turns; t++) {
      const r = await fetch(base + '/v1/completions', { method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: ids, max_tokens: 16, temperature: 0, ignore_eos: true,
          return_token_ids: true }) });
      const j = await r.json();
      if (r.status !== 200) throw new Error(JSON.stringify(j));
      prompt += j.usage.prompt_tokens;
      cached += j.usage.prompt_tokens_details.cached_tokens;
      generated += j.usage.completion_tokens;
      ids = ids.concat(j.choices[0].token_ids, randomPrompt(5000 + s * 100 + t, add));
    }
  }
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < sessions) await session(next++);
  }));
  const seconds = (performance.now() - t0) / 1000;
  const m = await (await fetch(base + '/metrics')).text();
  const routed = [...m.matchAll(/^fathom_router_replica_routed_total\{replica="[^"]+"\} (\d+)$/mg)].map((x) => Number(x[1]));
  const predicted = Number(m.match(/^fathom_router_predicted_hit_blocks_total (\d+)/m)[1]);
  router.proc.kill('SIGTERM');
  for (const r of reps) r.proc.kill('SIGTERM');
  await sleep(500);
  return { policy, requests: sessions * turns, seconds: +seconds.toFixed(2),
    requests_per_s: +(sessions * turns / seconds).toFixed(3),
    prompt_tokens: prompt, cached_tokens: cached, hit_rate: +(cached / prompt).toFixed(4),
    predicted_hit_tokens: predicted * 128, generated_tokens: generated, routed_per_replica: routed };
}

(async () => {
  const out = { replicas, sessions, turns, concurrency, first, add, runs: [] };
  for (const policy of ['cache_aware', 'round_robin']) out.runs.push(await runPolicy(policy));
  const [ca, rr] = out.runs;
  out.throughput_ratio = +(ca.requests_per_s / rr.requests_per_s).toFixed(3);
  out.hit_rate_ratio = rr.hit_rate > 0 ? +(ca.hit_rate / rr.hit_rate).toFixed(3) : null;
  console.log(JSON.stringify(out));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
