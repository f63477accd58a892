// Routing quality on a multi-turn trace: REPLICAS `fathom serve` replicas (one compute thread
// each) behind `fathom router`, once per policy, fresh replicas each time (every run starts
// cold). Two traces:
//
// mooncake (bench/mooncake_trace.js; the default when the first argument after FATHOM is a
// --flag): sessions start at Poisson times, each turn extends its own session's history (prompt
// + the answer's ids + a new user message) after a random think time, turn counts and lengths
// vary per session, some sessions share a system prompt; deterministic for --seed. Answers are
// streamed (greedy, ignore_eos, max_tokens = the turn's output length), so TTFT is measured.
//   node bench/router_trace.js FATHOM [--replicas 4] [--policies cache_aware,round_robin,least_load]
//     [--repeats 1] [--model DIR] [--serve-args "FLAGS"] [--router-args "FLAGS"] [TRACE OPTIONS]
//   TRACE OPTIONS: --seed --sessions --rate --turns --max-turns --first-tokens --add-tokens
//     --output-tokens --sigma --think-ms --system-prompts --system-tokens --system-share
//     --max-prompt-tokens (bench/mooncake_trace.js has their meaning and defaults).
//   --jsonl FILE replays a Mooncake JSONL file instead (the published traces, or
//     bench/mooncake_trace.js's output): each row at timestamp × --time-scale (open loop), its
//     prompt from its hash_ids (an id = --hash-block fixed pseudo-random tokens; below 512 every
//     length is scaled by hash-block / 512), max_tokens = its output_length (scaled);
//     --max-requests N replays the first N rows.
// Prints one JSON object: the trace's shape; per run (policy, repeat) the prompt tokens the
// replicas served from their prefix cache (hit_rate = cached / prompt tokens), the router's
// predicted hit tokens beside the reported ones, requests/s and tokens/s over the trace's wall
// time, TTFT (mean, p50, p90, p99) and end-to-end latency, the replicas' CPU seconds (the work
// done, which other jobs on a shared machine inflate far less than wall time) and requests per
// CPU second, requests and prefix-cache blocks per replica; then per policy the mean and each
// ratio to round_robin. Each run's object also goes to stderr as it ends.
//
// lockstep (the original trace; positional arguments): SESSIONS sessions of TURNS turns; a
// session's first prompt is FIRST random token ids, each later turn is the previous prompt + the
// previous answer's ids + ADD new ids; CONCURRENCY sessions run at once, each turn right after
// the previous one's answer (greedy, 16 tokens, ignore_eos); cache_aware then round_robin.
// Sessions advance in step, so round robin's rotation often brings a session back to the same
// replica (hits by structure).
//   node bench/router_trace.js FATHOM [REPLICAS] [SESSIONS] [TURNS] [CONCURRENCY] [FIRST] [ADD]
'use strict';
const fs = require('fs');
const { startServer, startRouter, randomPrompt } = require('../tests/serve/start_server.js');
const { makeTrace, parseOptions, describe, readJsonl, describeRows, promptFromHashIds, scaled } = require('./mooncake_trace.js');
const [fathom, ...rest] = process.argv.slice(2);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// REPLICAS fresh replicas and a router with POLICY; resolves once the router sees them all up
// (and, for cache_aware, follows every replica's KV events).
async function startFleet(replicas, policy, serveArgs = [], routerArgs = []) {
  const reps = [];
  for (let i = 0; i < replicas; i++) reps.push(await startServer(fathom, ['--threads', '1', ...serveArgs]));
  const router = await startRouter(fathom, [...reps.flatMap((r) => ['--replica', `http://127.0.0.1:${r.port}`]),
    '--policy', policy, ...routerArgs]);
  const base = `http://127.0.0.1:${router.port}`;
  for (let i = 0; ; i++) {
    const m = await (await fetch(base + '/metrics')).text();
    const up = (m.match(/^fathom_router_replica_up\{.*\} 1$/mg) || []).length;
    const fed = (m.match(/^fathom_router_kv_event_fed\{.*\} 1$/mg) || []).length;
    if (up === replicas && (policy !== 'cache_aware' || fed === replicas || i > 50)) break;
    await sleep(100);
  }
  // Each replica's prefix cache at the end (blocks and bytes held) and the CPU seconds it used
  // (user + system, /proc/PID/stat): the work, which other jobs on the machine do not inflate
  // as they do wall time.
  const caches = async () => Promise.all(reps.map(async (r) => {
    const m = await (await fetch(`http://127.0.0.1:${r.port}/metrics`)).text();
    const g = (name) => Number((m.match(new RegExp('^' + name + ' ([\\d.e+]+)', 'm')) || [0, 0])[1]);
    const f = fs.readFileSync(`/proc/${r.proc.pid}/stat`, 'utf8');
    const x = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return { blocks: g('fathom_prefix_cache_blocks'), mb: +(g('fathom_prefix_cache_bytes') / 1048576).toFixed(1),
      cpu_s: (Number(x[11]) + Number(x[12])) / 100 };  // utime, stime in clock ticks (USER_HZ = 100)
  }));
  const stop = async () => {
    router.proc.kill('SIGTERM');
    for (const r of reps) r.proc.kill('SIGTERM');
    await sleep(500);
  };
  return { base, stop, caches };
}

async function routerCounters(base) {
  const m = await (await fetch(base + '/metrics')).text();
  const one = (name) => Number((m.match(new RegExp('^' + name + ' (\\d+)', 'm')) || [0, 0])[1]);
  return {
    routed: [...m.matchAll(/^fathom_router_replica_routed_total\{replica="[^"]+"\} (\d+)$/mg)].map((x) => Number(x[1])),
    predictedBlocks: one('fathom_router_predicted_hit_blocks_total'),
    reportedCached: one('fathom_router_reported_cached_tokens_total'),
  };
}

// ---- lockstep: the original trace (positional arguments) ----
async function lockstep() {
  const [replicas, sessions, turns, concurrency, first, add] =
    [4, 16, 5, 8, 384, 128].map((d, i) => Number(rest[i] || d));
  async function runPolicy(policy) {
    const { base, stop } = await startFleet(replicas, policy);
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
    const c = await routerCounters(base);
    await stop();
    return { policy, requests: sessions * turns, seconds: +seconds.toFixed(2),
      requests_per_s: +(sessions * turns / seconds).toFixed(3),
      prompt_tokens: prompt, cached_tokens: cached, hit_rate: +(cached / prompt).toFixed(4),
      predicted_hit_tokens: c.predictedBlocks * 128, generated_tokens: generated, routed_per_replica: c.routed };
  }
  const out = { trace: 'lockstep', replicas, sessions, turns, concurrency, first, add, runs: [] };
  for (const policy of ['cache_aware', 'round_robin']) out.runs.push(await runPolicy(policy));
  const [ca, rr] = out.runs;
  out.throughput_ratio = +(ca.requests_per_s / rr.requests_per_s).toFixed(3);
  out.hit_rate_ratio = rr.hit_rate > 0 ? +(ca.hit_rate / rr.hit_rate).toFixed(3) : null;
  return out;
}

// ---- mooncake: bench/mooncake_trace.js's sessions ----
// One streamed completion: TTFT (to the first event carrying an output token), latency, the
// usage and the output ids.
async function complete(base, prompt, maxTokens) {
  const t0 = performance.now();
  const r = await fetch(base + '/v1/completions', { method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true,
      return_token_ids: true, stream: true, stream_options: { include_usage: true } }) });
  if (r.status !== 200) throw new Error('HTTP ' + r.status + ': ' + await r.text());
  const dec = new TextDecoder();
  let buf = '', ttft = null, usage = null;
  const ids = [];
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut).trim();
      buf = buf.slice(cut + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const j = JSON.parse(event.slice(6));
      if (j.error) throw new Error(JSON.stringify(j.error));
      for (const ch of j.choices || []) {
        if (ch.token_ids && ch.token_ids.length) {
          if (ttft === null) ttft = (performance.now() - t0) / 1000;
          ids.push(...ch.token_ids);
        }
      }
      if (j.usage) usage = j.usage;
    }
  }
  if (!usage) throw new Error('no usage in the stream');
  return { ttft, seconds: (performance.now() - t0) / 1000, usage, ids };
}

const quantile = (xs, q) => {
  if (!xs.length) return null;
  const s = xs.slice().sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};
const r3 = (x) => (x === null ? null : +x.toFixed(3));

async function mooncakeRun(trace, policy, a) {
  const { base, stop, caches } = await startFleet(a.replicas, policy, a.serveArgs, a.routerArgs);
  const records = [];
  const t0 = performance.now();
  async function session(s) {
    await sleep(s.startMs - (performance.now() - t0));
    let ids = s.systemIds.slice();
    for (let k = 0; k < s.turns.length; k++) {
      const turn = s.turns[k];
      if (k > 0) await sleep(turn.thinkMs);
      ids = ids.concat(turn.userIds);
      const res = await complete(base, ids, turn.outputTokens);
      records.push({ session: s.id, turn: k, ttft: res.ttft, seconds: res.seconds,
        prompt: res.usage.prompt_tokens, cached: res.usage.prompt_tokens_details.cached_tokens,
        generated: res.usage.completion_tokens });
      ids = ids.concat(res.ids);
    }
  }
  // A Mooncake JSONL file: each row at its timestamp (open loop), its prompt from its hash ids.
  async function row(r) {
    await sleep(r.timestamp * a.timeScale - (performance.now() - t0));
    const res = await complete(base, promptFromHashIds(r, a.hashBlock), scaled(r.output_length || 1, a.hashBlock));
    records.push({ ttft: res.ttft, seconds: res.seconds, prompt: res.usage.prompt_tokens,
      cached: res.usage.prompt_tokens_details.cached_tokens, generated: res.usage.completion_tokens });
  }
  await Promise.all(trace.rows ? trace.rows.map(row) : trace.sessions.map(session));
  const seconds = (performance.now() - t0) / 1000;
  const c = await routerCounters(base);
  const cache = await caches();
  await stop();
  const sum = (f) => records.reduce((x, r) => x + f(r), 0);
  const prompt = sum((r) => r.prompt), cached = sum((r) => r.cached), generated = sum((r) => r.generated);
  const ttfts = records.map((r) => r.ttft).filter((x) => x !== null);
  const lat = records.map((r) => r.seconds);
  return { policy, requests: records.length, seconds: +seconds.toFixed(2),
    requests_per_s: r3(records.length / seconds),
    prompt_tokens_per_s: +(prompt / seconds).toFixed(1),
    prefilled_tokens_per_s: +((prompt - cached) / seconds).toFixed(1),
    generated_tokens_per_s: +(generated / seconds).toFixed(1),
    prompt_tokens: prompt, cached_tokens: cached, hit_rate: +(cached / prompt).toFixed(4),
    predicted_hit_tokens: policy === 'cache_aware' ? c.predictedBlocks * 128 : null,
    router_reported_cached_tokens: c.reportedCached, generated_tokens: generated,
    ttft_mean_s: r3(ttfts.reduce((x, y) => x + y, 0) / ttfts.length), ttft_p50_s: r3(quantile(ttfts, 0.5)),
    ttft_p90_s: r3(quantile(ttfts, 0.9)), ttft_p99_s: r3(quantile(ttfts, 0.99)),
    latency_p50_s: r3(quantile(lat, 0.5)), latency_p99_s: r3(quantile(lat, 0.99)),
    replica_cpu_s: +cache.reduce((x, r) => x + r.cpu_s, 0).toFixed(1),
    requests_per_replica_cpu_s: r3(records.length / cache.reduce((x, r) => x + r.cpu_s, 0)),
    routed_per_replica: c.routed, prefix_cache_per_replica: cache };
}

async function mooncake() {
  const a = { replicas: 4, policies: 'cache_aware,round_robin,least_load', repeats: 1, model: '',
    serveArgs: '', routerArgs: '', jsonl: '', hashBlock: 512, timeScale: 1, maxRequests: 0 };
  const traceArgs = [];
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '').replace(/-(\w)/g, (_, ch) => ch.toUpperCase());
    if (key === 'trace') {
      if (rest[i + 1] !== 'mooncake') throw new Error('--trace: mooncake (lockstep takes positional arguments)');
    } else if (key in a) {
      a[key] = typeof a[key] === 'number' ? Number(rest[i + 1]) : rest[i + 1];
    } else {
      traceArgs.push(rest[i], rest[i + 1]);
    }
  }
  const policies = a.policies.split(',');
  a.serveArgs = [...(a.serveArgs ? a.serveArgs.split(/\s+/) : []), ...(a.model ? [a.model] : [])];
  a.routerArgs = a.routerArgs ? a.routerArgs.split(/\s+/) : [];
  let trace, out;
  if (a.jsonl) {
    if (traceArgs.length) throw new Error('--jsonl replays a file: no generator options (' + traceArgs[0] + ')');
    trace = { rows: readJsonl(a.jsonl, a.maxRequests) };
    out = { trace: 'jsonl', file: a.jsonl, hash_block: a.hashBlock, time_scale: a.timeScale, shape: describeRows(trace.rows, a.hashBlock) };
  } else {
    trace = makeTrace(parseOptions(traceArgs));
    out = { trace: 'mooncake', options: trace.options, shape: describe(trace) };
  }
  Object.assign(out, { replicas: a.replicas, model: a.model || 'embedded demo', serve_args: a.serveArgs,
    router_args: a.routerArgs, runs: [] });
  for (let rep = 0; rep < a.repeats; rep++)
    for (const policy of policies) {
      const run = await mooncakeRun(trace, policy, a);
      run.repeat = rep;
      out.runs.push(run);
      console.error(JSON.stringify(run));
    }
  // Per policy: the mean of each figure over the repeats, and its ratio to round_robin's.
  const keys = ['hit_rate', 'requests_per_s', 'prompt_tokens_per_s', 'generated_tokens_per_s', 'ttft_mean_s', 'ttft_p50_s',
    'ttft_p99_s', 'replica_cpu_s', 'requests_per_replica_cpu_s'];
  out.mean = {};
  for (const p of policies) {
    const runs = out.runs.filter((r) => r.policy === p);
    out.mean[p] = Object.fromEntries(keys.map((k) => [k, +(runs.reduce((x, r) => x + r[k], 0) / runs.length).toFixed(4)]));
  }
  if (out.mean.round_robin)
    for (const p of policies) {
      if (p === 'round_robin') continue;
      out.mean[p].hit_rate_ratio_to_round_robin = +(out.mean[p].hit_rate / out.mean.round_robin.hit_rate).toFixed(3);
      out.mean[p].requests_per_s_ratio_to_round_robin = +(out.mean[p].requests_per_s / out.mean.round_robin.requests_per_s).toFixed(3);
      out.mean[p].requests_per_replica_cpu_s_ratio_to_round_robin =
        +(out.mean[p].requests_per_replica_cpu_s / out.mean.round_robin.requests_per_replica_cpu_s).toFixed(3);
      out.mean[p].ttft_mean_ratio_to_round_robin = +(out.mean[p].ttft_mean_s / out.mean.round_robin.ttft_mean_s).toFixed(3);
    }
  return out;
}

(async () => {
  const usage = 'usage: node bench/router_trace.js FATHOM [--flags] | [REPLICAS SESSIONS TURNS CONCURRENCY FIRST ADD]';
  if (!fathom || fathom.startsWith('-')) throw new Error(usage);
  try {
    require('fs').accessSync(fathom, require('fs').constants.X_OK);
  } catch {
    throw new Error(`${fathom}: not an executable fathom binary\n${usage}`);
  }
  const out = rest.length && rest[0].startsWith('--') ? await mooncake() : await lockstep();
  console.log(JSON.stringify(out));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
