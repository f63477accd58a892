// Measures the P/D hand-off on loopback, side by side in one run (not part of the suite):
// TTFT of a cold TOKENS-token prompt through a router in front of one --role both replica and
// through a router in front of a prefill and a decode replica (alternating, a fresh prompt each
// time), the bytes each hand-off pushed, P's push time (so the loopback transfer rate: the
// frames over HTTP, D's checks and install included), P's prefill time and the whole hand-off.
// CHUNK_BYTES is P's --pd-push-chunk-bytes (default: the replica's, 8 MiB, one chunk for
// these prompts); the chunks each push took are reported.
// Usage: node pd_bench.js FATHOM [TOKENS] [REPEAT] [CHUNK_BYTES]    (prints one JSON line)
'use strict';
const { startServer, startRouter, randomPrompt, metrics, metric } = require('../serve/start_server.js');

const [fathom, tokensArg, repeatArg, chunkArg] = process.argv.slice(2);
const TOKENS = Number(tokensArg || 2048), REPEAT = Number(repeatArg || 3);

// Seconds to the first token of a streamed /v1/completions request, and the ids.
async function ttft(port, prompt) {
  const t0 = process.hrtime.bigint();
  const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 8, temperature: 0, stream: true, return_token_ids: true }) });
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let text = '', first = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value);
    if (!first && /"token_ids":\[\d/.test(text)) first = Number(process.hrtime.bigint() - t0) / 1e9;
  }
  const ids = [];
  for (const m of text.matchAll(/"token_ids":\[([\d,]*)\]/g)) if (m[1]) ids.push(...m[1].split(',').map(Number));
  return { seconds: first, ids };
}
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

async function main() {
  const procs = [];
  const small = ['--kv-budget-mb', '1024', '--prefix-cache-mb', '512'];
  try {
    const [b, p, d] = await Promise.all([startServer(fathom, small),
      startServer(fathom, [...small, '--role', 'prefill',
        ...(chunkArg ? ['--pd-push-chunk-bytes', chunkArg] : [])]),
      startServer(fathom, [...small, '--role', 'decode'])]);
    procs.push(b.proc, p.proc, d.proc);
    const u = (s) => `http://127.0.0.1:${s.port}`;
    const [r0, r] = await Promise.all([startRouter(fathom, ['--replica', u(b)]),
      startRouter(fathom, ['--replica', u(p), '--replica', u(d)])]);
    procs.push(r0.proc, r.proc);
    await new Promise((res) => setTimeout(res, 1000));  // the probes have the roles
    const local = [], pd = [];
    for (let i = 0; i < REPEAT; i++) {
      const a = await ttft(r0.port, randomPrompt(1000 + i, TOKENS));
      const x = await ttft(r.port, randomPrompt(1000 + i, TOKENS));  // the same prompt, cold on P and D
      if (JSON.stringify(a.ids) !== JSON.stringify(x.ids)) throw new Error('outputs differ');
      local.push(a.seconds);
      pd.push(x.seconds);
    }
    const [rm, pm] = await Promise.all([metrics(r.port), metrics(p.port)]);
    const n = metric(rm, 'fathom_router_pd_requests_total{mode="disaggregated"}');
    const bytes = metric(rm, 'fathom_router_pd_transfer_bytes_total');
    const push = metric(rm, 'fathom_router_pd_transfer_seconds_sum');
    const handoff = metric(rm, 'fathom_router_pd_handoff_seconds_sum');
    const out = {
      tokens: TOKENS, repeat: REPEAT, disaggregated: n,
      ttft_local_median_s: +median(local).toFixed(4), ttft_pd_median_s: +median(pd).toFixed(4),
      ttft_local_s: local.map((x) => +x.toFixed(4)), ttft_pd_s: pd.map((x) => +x.toFixed(4)),
      bytes_per_request: Math.round(bytes / n),
      blocks_per_request: metric(rm, 'fathom_router_pd_transfer_blocks_total') / n,
      chunk_bytes: chunkArg ? Number(chunkArg) : 8 << 20,
      chunks_per_request: metric(pm, 'fathom_pd_pushed_chunks_total') / n,
      push_seconds_mean: +(push / n).toFixed(5),
      push_mb_per_s: +(bytes / push / 1e6).toFixed(1),
      handoff_seconds_mean: +(handoff / n).toFixed(4),
      p_prefill_tokens: metric(pm, 'fathom_prompt_tokens_total'),
      load_average: require('os').loadavg().map((x) => +x.toFixed(2)),
    };
    console.log(JSON.stringify(out));
  } finally {
    for (const x of procs) if (x.exitCode === null) x.kill('SIGKILL');
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
