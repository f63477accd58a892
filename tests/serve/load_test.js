// Loopback load test of `fathom serve` (embedded demo model): ROUNDS waves of STREAMS
// concurrent SSE streams of /v1/completions (token-id prompts, 8-16 tokens each) while
// SLOW clients dribble request headers (reconnecting when the server drops them at
// --header-timeout) and /health is probed every 50 ms. Passes when every stream ends with
// [DONE] and its token count, /health p99 < 100 ms throughout, the server exits 0 on SIGTERM,
// and the server's RSS after the run is within 10% of its RSS after a warm-up. In the
// sanitizer build (FATHOM_TEST_LIGHT=1) RSS is not a leak measure (ASan's quarantine keeps up
// to 256 MB of freed memory resident), so there LeakSanitizer's check at the server's exit
// (a leak makes the exit code non-zero) takes the RSS bound's place. Bounded: every loop stops
// at the deadline.
// Prints one JSON line of figures.
// Usage: node load_test.js FATHOM NODE_MODULES [STREAMS] [SLOW] [ROUNDS]
// (defaults 512, 100, 2; with FATHOM_TEST_LIGHT=1, the sanitizer build, 128, 25, 1)
'use strict';
const fs = require('fs');
const net = require('net');
const { startServer } = require('./start_server.js');

const [fathom, , streamsArg, slowArg, roundsArg] = process.argv.slice(2);
const light = process.env.FATHOM_TEST_LIGHT === '1';
const STREAMS = Number(streamsArg || (light ? 128 : 512));
const SLOW = Number(slowArg || (light ? 25 : 100));
const ROUNDS = Number(roundsArg || (light ? 1 : 2));
const DEADLINE_MS = 150000;

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
const rssKb = (pid) => Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : null; };

async function stream(base, c, i) {
  const maxTokens = 8 + ((c * 7 + i) % 9);
  const prompt = [0, ...Array.from({ length: 16 }, (_, k) => 100 + ((c * 131 + i * 17 + k * 7) % 50000))];
  const t0 = performance.now();
  const r = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, ignore_eos: true, stream: true, temperature: 0,
                           stream_options: { include_usage: true } }) });
  if (r.status !== 200) throw new Error('status ' + r.status + ': ' + (await r.text()));
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let text = '', ttft = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
    // The first event, not a keep-alive comment sent while the request queued.
    if (ttft === null && text.includes('data: ')) ttft = (performance.now() - t0) / 1000;
  }
  if (!text.includes('data: [DONE]')) throw new Error('no [DONE]: ' + text.slice(-200));
  const m = text.match(/"completion_tokens":(\d+)/);
  if (!m || Number(m[1]) !== maxTokens) throw new Error('tokens ' + (m && m[1]) + ' != ' + maxTokens);
  return { ttft, tokens: maxTokens };
}

// A client that sends a request line and then one header line a second, reconnecting each
// time the server drops it, until `stop()`.
function slowClient(port, state) {
  return (async () => {
    while (!state.stop) {
      await new Promise((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        let timer = null;
        s.on('error', () => {});
        s.on('connect', () => {
          s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\n');
          let i = 0;
          timer = setInterval(() => {
            if (state.stop) { s.destroy(); return; }
            s.write(`X-Slow-${i++}: 1\r\n`);
          }, 1000);
        });
        s.on('close', () => { clearInterval(timer); state.drops++; resolve(); });
      });
      if (!state.stop) await sleep(100);
    }
  })();
}

(async () => {
  const { proc, port } = await startServer(fathom, []);
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + DEADLINE_MS;
  const rssIdle = rssKb(proc.pid);
  // Warm-up: one wave of 64 streams touches the engine's buffers and the page pool.
  await Promise.all(Array.from({ length: 64 }, (_, c) => stream(base, c, 0)));
  const rssStart = rssKb(proc.pid);

  const slowState = { stop: false, drops: 0 };
  const slow = Array.from({ length: SLOW }, () => slowClient(port, slowState));
  const health = [];
  let healthErrors = 0, probing = true;
  const prober = (async () => {
    while (probing && Date.now() < deadline) {
      const t0 = performance.now();
      try {
        const r = await fetch(base + '/health');
        await r.text();
        if (r.status !== 200) healthErrors++;
      } catch (e) {
        healthErrors++;
      }
      health.push(performance.now() - t0);
      await sleep(50);
    }
  })();
  let rssPeak = rssStart;
  const sampler = setInterval(() => { rssPeak = Math.max(rssPeak, rssKb(proc.pid)); }, 250);

  const t0 = performance.now();
  let done = 0, tokens = 0;
  const errors = [];
  const ttfts = [];
  const rssAfterWave = [];
  // ROUNDS waves of STREAMS concurrent streams; RSS after each shows whether memory plateaus.
  for (let i = 0; i < ROUNDS && Date.now() < deadline; i++) {
    await Promise.all(Array.from({ length: STREAMS }, async (_, c) => {
      try {
        const r = await stream(base, c, i + 1);
        done++;
        tokens += r.tokens;
        ttfts.push(r.ttft);
      } catch (e) {
        errors.push(String(e));
      }
    }));
    rssAfterWave.push(rssKb(proc.pid) / 1024);
  }
  const elapsed = (performance.now() - t0) / 1000;
  slowState.stop = true;
  probing = false;
  await prober;
  await Promise.all(slow);
  clearInterval(sampler);
  await sleep(500);
  const rssEnd = rssKb(proc.pid);
  const metrics = await (await fetch(base + '/metrics')).text();
  const headerTimeouts = Number(metrics.match(/fathom_http_header_timeouts_total (\d+)/)[1]);
  proc.kill('SIGTERM');
  const code = await new Promise((res) => proc.on('exit', (c) => res(c)));
  const result = {
    streams: STREAMS, rounds: ROUNDS, slow_clients: SLOW, seconds: Number(elapsed.toFixed(2)),
    requests_completed: done, expected: STREAMS * ROUNDS, errors: errors.length,
    tokens_per_s: Number((tokens / elapsed).toFixed(1)),
    ttft_p50_s: pct(ttfts, 0.5), ttft_p99_s: pct(ttfts, 0.99),
    health_probes: health.length, health_errors: healthErrors,
    health_p50_ms: Number(pct(health, 0.5).toFixed(2)), health_p99_ms: Number(pct(health, 0.99).toFixed(2)),
    health_max_ms: Number(Math.max(...health).toFixed(2)),
    slow_client_drops: slowState.drops, header_timeouts: headerTimeouts,
    rss_idle_mb: rssIdle / 1024, rss_start_mb: rssStart / 1024, rss_peak_mb: rssPeak / 1024,
    rss_after_wave_mb: rssAfterWave, rss_end_mb: rssEnd / 1024, rss_growth_pct: Number((100 * (rssEnd - rssStart) / rssStart).toFixed(2)),
    server_exit: code,
  };
  console.log(JSON.stringify(result));
  for (const e of errors.slice(0, 5)) console.log('error: ' + e);
  const rssOk = light || Math.abs(result.rss_growth_pct) <= 10;
  const ok = errors.length === 0 && done === STREAMS * ROUNDS && healthErrors === 0 &&
             result.health_p99_ms < 100 && rssOk && code === 0;
  console.log(ok ? 'serve load: ok' : 'serve load: FAIL');
  process.exit(ok ? 0 : 1);
})().catch((e) => { console.error(e); process.exit(1); });
