// A burst of requests that share a new prefix (a long system prompt no request has sent
// before), each with a tail of its own, sent at once to `fathom serve`: the time to each
// answer (max_tokens 1: the prefill) and the prompt tokens each found cached, for each binary
// given, interleaved over REPEAT rounds (a new prefix each round, a fresh server each time).
// With REPLICAS=R > 1 the burst goes to `fathom router` (cache_aware) in front of R replicas
// of --threads THREADS each (default 2 / R, so that they share this machine's cores as one
// server would use them), and each run also prints the prompt tokens each replica computed.
// Prints one JSON line a run and a summary: the median over rounds of the burst's wall time and
// of its mean latency, and their ratios to the first binary's.
//
// Usage: [N=4] [PREFIX=1024] [TAIL=32] [REPEAT=3] [MODEL=DIR] [REPLICAS=1] [THREADS=N]
//        node bench/shared_prefix_burst.js FATHOM [FATHOM2 ...]
'use strict';
const { startServer, startRouter, randomPrompt, metrics, metric } = require('../tests/serve/start_server.js');

const binaries = process.argv.slice(2);
if (binaries.length === 0) throw new Error('usage: node bench/shared_prefix_burst.js FATHOM [FATHOM2 ...]');
const N = Number(process.env.N ?? 4);
const PREFIX = Number(process.env.PREFIX ?? 1024);
const TAIL = Number(process.env.TAIL ?? 32);
const repeat = Number(process.env.REPEAT ?? 3);
const model = process.env.MODEL;
const R = Number(process.env.REPLICAS ?? 1);
const threads = Number(process.env.THREADS ?? Math.max(1, Math.floor(2 / R)));

async function burst(fathom, round) {
  const procs = [], replicas = [];
  for (let r = 0; r < R; r++) {
    const s = await startServer(fathom, [...(model ? [model] : []), ...(R > 1 ? ['--threads', String(threads)] : [])]);
    procs.push(s.proc);
    replicas.push(s.port);
  }
  let port = replicas[0];
  if (R > 1) {
    const router = await startRouter(fathom, ['--policy', 'cache_aware', ...replicas.flatMap((p) => ['--replica', `http://127.0.0.1:${p}`])]);
    procs.push(router.proc);
    port = router.port;
    // The router follows every replica's events before the burst.
    for (let i = 0; ; i++) {
      const v = await (await fetch(`http://127.0.0.1:${port}/v1/router/kv_index`)).json();
      if (v.replicas.every((x) => x.source === 'events')) break;
      if (i > 200) throw new Error('the router never followed its replicas');
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  try {
    const prefix = randomPrompt(1000 + round, PREFIX);
    const t0 = performance.now();
    const answers = await Promise.all(Array.from({ length: N }, async (_, i) => {
      const prompt = prefix.concat(randomPrompt(5000 + 97 * round + i, TAIL));
      const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0, ignore_eos: true }) });
      const j = await r.json();
      if (r.status !== 200) throw new Error(JSON.stringify(j));
      return { s: (performance.now() - t0) / 1000, cached: j.usage.prompt_tokens_details.cached_tokens };
    }));
    const wall = (performance.now() - t0) / 1000;
    // Prompt tokens each replica computed (not served from its prefix cache).
    const computed = [];
    for (const p of replicas) {
      const m = await metrics(p);
      computed.push(metric(m, 'fathom_prompt_tokens_total') - metric(m, 'fathom_prefix_cache_hit_tokens_total'));
    }
    return { wall, mean: answers.reduce((a, x) => a + x.s, 0) / N, answers, computed };
  } finally {
    for (const proc of procs.reverse()) {
      proc.kill('SIGTERM');
      if (proc.exitCode === null) await new Promise((r) => proc.on('exit', r));
    }
  }
}

(async () => {
  const runs = binaries.map(() => []);
  for (let round = 0; round < repeat; round++)
    for (let b = 0; b < binaries.length; b++) {
      const r = await burst(binaries[b], round);
      runs[b].push(r);
      console.log(JSON.stringify({ binary: binaries[b], round, n: N, prefix: PREFIX, tail: TAIL,
        wall_s: +r.wall.toFixed(3), mean_s: +r.mean.toFixed(3),
        seconds: r.answers.map((a) => +a.s.toFixed(3)), cached: r.answers.map((a) => a.cached),
        computed_per_replica: r.computed }));
    }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const wall = runs.map((rs) => median(rs.map((r) => r.wall)));
  const mean = runs.map((rs) => median(rs.map((r) => r.mean)));
  console.log(JSON.stringify({ summary: binaries.map((bin, b) => ({ binary: bin, wall_s: +wall[b].toFixed(3),
    mean_s: +mean[b].toFixed(3), wall_ratio: +(wall[b] / wall[0]).toFixed(3), mean_ratio: +(mean[b] / mean[0]).toFixed(3) })) }));
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
