// The HTTP layer's failure modes against the real `fathom serve` (embedded demo model): a
// second server on the same port exits 2; 404/405/413 come back as JSON in the API's error
// shape; a client that dribbles its headers is dropped at --header-timeout while /health
// stays fast; the connection cap answers 503; a non-streaming client that disconnects frees
// its sequence within a second; SIGTERM drains an in-flight stream that fits the deadline and
// cuts one that does not, exiting 0 either way; a stream silent for --sse-keepalive (a long
// prefill in small steps) gets SSE comments that the official clients skip, and an error after
// such a comment arrives as the protocol's in-stream error event.
// Usage: node http_test.js FATHOM NODE_MODULES
'use strict';
const net = require('net');
const { spawn } = require('child_process');
const assert = require('assert');
const { startServer, checker } = require('./start_server.js');

const path = require('path');

const [fathom, nodeModules] = process.argv.slice(2);

const t = checker();
const check = t.check;

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
const exitOf = (proc) => new Promise((res) => {
  if (proc.exitCode !== null) res(proc.exitCode);
  else proc.on('exit', (c) => res(c));
});

// Sends `text` on a fresh connection; resolves to everything read until the server closes
// (or 5 s pass).
function rawRequest(port, text) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let out = '';
    s.on('connect', () => s.write(text));
    s.on('data', (d) => { out += d; });
    s.on('error', () => {});
    s.on('close', () => resolve(out));
    setTimeout(() => { s.destroy(); resolve(out); }, 5000);
  });
}

async function running(base) {
  const m = await (await fetch(base + '/metrics')).text();
  return Number(m.match(/fathom_running_sequences (\d+)/)[1]);
}

// Reads an SSE response to its end; resolves to { text, chunks, done } (done: saw [DONE]).
async function readAll(res) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let text = '', chunks = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      chunks++;
      text += dec.decode(value, { stream: true });
    }
  } catch (e) {
    return { text, chunks, done: false, error: String(e) };
  }
  return { text, chunks, done: text.includes('data: [DONE]') };
}

// Sends SIGTERM and waits up to 10 s for the exit: { code ('timeout' if none), took (ms) }.
async function sigtermAndWait(proc) {
  const t0 = Date.now();
  proc.kill('SIGTERM');
  const code = await Promise.race([exitOf(proc), sleep(10000).then(() => 'timeout')]);
  const took = Date.now() - t0;
  if (code === 'timeout') proc.kill('SIGKILL');
  return { code, took };
}

function streamRequest(base, maxTokens) {
  return fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: [0, 5, 6, 7], max_tokens: maxTokens, ignore_eos: true, stream: true,
                           stream_options: { include_usage: true } }) });
}

(async () => {
  const { proc, port } = await startServer(fathom, ['--header-timeout', '2', '--max-connections', '16',
                                                     '--body-timeout', '2', '--served-model-name', 'org/Model:1']);
  const base = `http://127.0.0.1:${port}`;
  try {
    await check('a second server on the same port exits 2 with a clear message', async () => {
      const p2 = spawn(fathom, ['serve', '--port', String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
      let err = '';
      p2.stderr.on('data', (d) => { err += d; });
      const code = await Promise.race([exitOf(p2), sleep(60000).then(() => 'timeout')]);
      if (code === 'timeout') p2.kill('SIGKILL');
      assert.equal(code, 2, err);
      assert.ok(/in use/i.test(err), err);
      // The first server still answers.
      assert.equal((await fetch(base + '/health')).status, 200);
    });

    await check('/v1/models/{model} matches a name percent-encoded with either case of hex digits', async () => {
      // encodeURIComponent writes %2F and %3A; RFC 3986 makes %2f and %3a the same octets.
      for (const path of ['org%2FModel%3A1', 'org%2fModel%3a1', 'org%2FModel%3a1']) {
        const r = await fetch(base + '/v1/models/' + path);
        assert.equal(r.status, 200, path);
        assert.equal((await r.json()).id, 'org/Model:1', path);
      }
      // Only escapes change case: the name's own letters still have to match.
      assert.equal((await fetch(base + '/v1/models/org%2fmodel%3a1')).status, 404);
      assert.equal((await fetch(base + '/v1/models/org%2')).status, 404);
    });

    await check('404, 405 (with Allow) and 413 are JSON in the API\'s shape', async () => {
      let r = await fetch(base + '/v1/nope');
      assert.equal(r.status, 404);
      let j = await r.json();
      assert.equal(typeof j.error.message, 'string');
      r = await fetch(base + '/v1/chat/completions');
      assert.equal(r.status, 405);
      assert.equal(r.headers.get('allow'), 'POST');
      j = await r.json();
      assert.equal(j.error.code, 'method_not_allowed');
      r = await fetch(base + '/health', { method: 'POST', body: '{}' });
      assert.equal(r.status, 405);
      assert.equal(r.headers.get('allow'), 'GET');
      r = await fetch(base + '/v1/messages', { method: 'GET' });
      assert.equal(r.status, 405);
      j = await r.json();
      assert.equal(j.type, 'error');
      assert.equal(typeof j.error.message, 'string');
      const big = 'x'.repeat((32 << 20) + 10);
      r = await fetch(base + '/v1/chat/completions', { method: 'POST', body: big,
        headers: { 'Content-Type': 'application/json' } });
      assert.equal(r.status, 413);
      j = await r.json();
      assert.ok(/larger than/.test(j.error.message), JSON.stringify(j));
      r = await fetch(base + '/v1/messages', { method: 'POST', body: big });
      assert.equal(r.status, 413);
      j = await r.json();
      assert.equal(j.type, 'error');
      assert.equal(j.error.type, 'request_too_large');
    });

    await check('malformed HTTP is a 400, a compressed body 415, a transfer coding 501, a stalled body 408: JSON, then close', async () => {
      // [request, status, whether the body is Anthropic's shape]
      const cases = [
        ['GARBAGE\r\n\r\n', 400, false],
        ['PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 400, false],
        ['POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n', 400, true],
        ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}', 400, false],
        ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nab\r\n0\r\n\r\n', 400, false],
        ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}', 415, false],
        ['POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n', 501, true],
        ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"pro', 408, false],
      ];
      for (const [text, status, anthropic] of cases) {
        const t0 = Date.now();
        const out = await rawRequest(port, text);
        const took = Date.now() - t0;
        assert.ok(out.startsWith(`HTTP/1.1 ${status} `), JSON.stringify(text) + ' -> ' + JSON.stringify(out.slice(0, 200)));
        assert.ok(/\r\nConnection: close\r\n/i.test(out), out.slice(0, 300));
        const body = JSON.parse(out.slice(out.indexOf('\r\n\r\n') + 4));
        if (anthropic) assert.equal(body.type, 'error', JSON.stringify(body));
        else assert.equal(typeof body.error.message, 'string', JSON.stringify(body));
        if (status === 408) assert.ok(took >= 1900, 'took ' + took);  // not before --body-timeout
      }
      assert.equal((await fetch(base + '/health')).status, 200);
    });

    await check('a client dribbling its headers is dropped at --header-timeout; /health stays fast', async () => {
      const sock = net.connect(port, '127.0.0.1');
      await new Promise((res, rej) => { sock.on('connect', res); sock.on('error', rej); });
      const t0 = Date.now();
      const closed = new Promise((res) => sock.on('close', () => res(Date.now() - t0)));
      sock.on('error', () => {});
      sock.write('GET /health HTTP/1.1\r\nHost: x\r\n');
      let i = 0, closedAt = null;
      closed.then((ms) => { closedAt = ms; });
      const lat = [];
      while (closedAt === null && Date.now() - t0 < 8000) {
        if (i % 5 === 0 && !sock.destroyed) sock.write('X-Slow-' + i + ': 1\r\n');
        i++;
        const h0 = performance.now();
        const r = await fetch(base + '/health');
        assert.equal(r.status, 200);
        await r.json();
        lat.push(performance.now() - h0);
        await sleep(100);
      }
      sock.destroy();
      assert.ok(closedAt !== null, 'not dropped after 8 s');
      assert.ok(closedAt >= 1500 && closedAt < 4000, 'dropped after ' + closedAt + ' ms');
      const max = Math.max(...lat);
      assert.ok(max < 100, '/health max ' + max.toFixed(1) + ' ms');
      const m = await (await fetch(base + '/metrics')).text();
      assert.ok(Number(m.match(/fathom_http_header_timeouts_total (\d+)/)[1]) >= 1);
    });

    await check('connections beyond --max-connections get a JSON 503', async () => {
      const idle = [];
      try {
        for (let i = 0; i < 16; i++) {
          const s = net.connect(port, '127.0.0.1');
          s.on('error', () => {});
          await new Promise((res) => s.on('connect', res));
          idle.push(s);
        }
        await sleep(100);
        const r = await rawRequest(port, 'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n');
        assert.ok(r.startsWith('HTTP/1.1 503'), r);
        const j = JSON.parse(r.slice(r.indexOf('\r\n\r\n') + 4));
        assert.ok(/connection limit/.test(j.error.message), JSON.stringify(j));
      } finally {
        for (const s of idle) s.destroy();
      }
      for (let i = 0; i < 50; i++) {
        await sleep(20);
        const r = await rawRequest(port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
        if (r.startsWith('HTTP/1.1 200')) return;
      }
      assert.fail('the server did not recover after the idle connections closed');
    });

    await check('a non-streaming client that disconnects frees its sequence within 1 s', async () => {
      const ctl = new AbortController();
      const pending = fetch(base + '/v1/completions', { method: 'POST', signal: ctl.signal,
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: [0, 5, 6], max_tokens: 1000000, ignore_eos: true }) }).catch(() => null);
      let n = 0;
      for (let i = 0; i < 100 && n === 0; i++) { await sleep(20); n = await running(base); }
      assert.equal(n, 1, 'the request never ran');
      ctl.abort();
      await pending;
      const t0 = Date.now();
      while (Date.now() - t0 < 1000 && (n = await running(base)) !== 0) await sleep(20);
      assert.equal(n, 0, 'still running 1 s after the disconnect');
    });
  } finally {
    proc.kill('SIGTERM');
    const code = await exitOf(proc);
    if (code !== 0) { t.failures++; console.log('FAIL graceful shutdown: exit code ' + code); }
  }

  await check('timeouts that are not a number of seconds up to 1e9 are refused at start (exit 2, naming the flag)', async () => {
    // 1e10 s overflowed the clock into a negative deadline: the drain cancelled everything at once.
    for (const [flag, v] of [['--shutdown-timeout', 'nan'], ['--shutdown-timeout', '1e10'], ['--header-timeout', '0'],
      ['--sse-keepalive', '-1'], ['--body-timeout', 'inf']]) {
      const p = spawn(fathom, ['serve', '--port', '0', flag, v], { stdio: ['ignore', 'pipe', 'pipe'] });
      let err = '';
      p.stderr.on('data', (d) => { err += d; });
      const code = await Promise.race([exitOf(p), sleep(20000).then(() => 'timeout')]);
      if (code === 'timeout') p.kill('SIGKILL');
      assert.equal(code, 2, `${flag} ${v}: ${err}`);
      assert.ok(err.includes(flag), `${flag} ${v}: ${err}`);
    }
  });

  await check('SIGTERM: an in-flight stream that fits --shutdown-timeout completes; new connections are refused', async () => {
    const s = await startServer(fathom, ['--shutdown-timeout', '20']);
    const b = `http://127.0.0.1:${s.port}`;
    const r = await streamRequest(b, 200);
    const reader = r.body.getReader();
    await reader.read();  // the stream is under way
    const t0 = Date.now();
    s.proc.kill('SIGTERM');
    await sleep(200);
    const refused = await fetch(b + '/health').then(() => false, () => true);
    const dec = new TextDecoder();
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
    const code = await exitOf(s.proc);
    assert.ok(text.includes('"finish_reason":"length"') && text.includes('data: [DONE]'), text.slice(-300));
    assert.ok(/"completion_tokens":200/.test(text), text.slice(-300));
    assert.ok(refused, 'a new connection was served while draining');
    assert.equal(code, 0);
    console.log('     drained in ' + (Date.now() - t0) + ' ms');
  });

  await check('SIGTERM with --shutdown-timeout 1: long requests are cancelled as errors, never as a finish, and the process exits 0 promptly', async () => {
    const s = await startServer(fathom, ['--shutdown-timeout', '1']);
    const b = `http://127.0.0.1:${s.port}`;
    const r = await streamRequest(b, 1000000);
    const all = readAll(r);
    // The same cut without streaming: a 503 in the API's shape, not a 200 with a partial text.
    const whole = fetch(b + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 1000000, ignore_eos: true }) })
      .then(async (x) => ({ status: x.status, body: await x.json() }));
    await sleep(300);
    const { code, took } = await sigtermAndWait(s.proc);
    const res = await all;
    assert.equal(code, 0);
    assert.ok(took < 4000, 'exit took ' + took + ' ms');
    assert.ok(took >= 900, 'exit after ' + took + ' ms, before the deadline');
    assert.ok(res.chunks > 1, 'no tokens streamed');
    assert.ok(/data: \{"error":\{[^\n]*shutting down/.test(res.text), res.text.slice(-300));
    assert.ok(!res.text.includes('"finish_reason":"'), res.text.slice(-300));
    const w = await whole;
    assert.equal(w.status, 503, JSON.stringify(w.body));
    assert.ok(/shutting down/.test(w.body.error.message), JSON.stringify(w.body));
    console.log('     exited ' + took + ' ms after SIGTERM; stream ended ' + (res.done ? 'with [DONE]' : 'cut'));
  });

  await check('a second SIGTERM ends the grace period: the stream gets its cancellation error and the process exits 0', async () => {
    const s = await startServer(fathom, ['--shutdown-timeout', '60']);
    const b = `http://127.0.0.1:${s.port}`;
    const r = await streamRequest(b, 1000000);
    const all = readAll(r);
    await sleep(300);
    s.proc.kill('SIGTERM');
    await sleep(1000);
    // Still draining: one signal waits up to 60 s for the stream.
    const early = await Promise.race([exitOf(s.proc), sleep(10).then(() => 'running')]);
    assert.equal(early, 'running');
    const { code, took } = await sigtermAndWait(s.proc);
    const res = await all;
    assert.equal(code, 0);
    assert.ok(took < 4000, 'exit took ' + took + ' ms after the second signal');
    // Cancelled in the protocol's shape, as at the deadline: an error event, no finish_reason.
    assert.ok(/data: \{"error":\{[^\n]*cancel/.test(res.text), res.text.slice(-300));
    assert.ok(!res.text.includes('"finish_reason":"'), res.text.slice(-300));
    console.log('     exited ' + took + ' ms after the second SIGTERM');
  });

  await check('--sse-keepalive: a silent stream gets comments the clients skip; a later error is an in-stream event', async () => {
    // 600 prompt ids in 8-token steps: a prefill of 75 steps, far longer than 0.05 s (each
    // request a prompt of its own: a prefix-cache hit would skip most of the prefill).
    const s = await startServer(fathom, ['--sse-keepalive', '0.05', '--max-step-tokens', '8', '--allow-error-injection']);
    const b = `http://127.0.0.1:${s.port}`;
    try {
      const promptOf = (salt) => Array.from({ length: 600 }, (_, i) => 100 + ((i * 7919 + salt * 104729) % 50000));
      const post = (body, salt) => fetch(b + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: promptOf(salt), max_tokens: 4, ignore_eos: true, stream: true, ...body }) });
      let res = await readAll(await post({}, 1));
      const firstData = res.text.indexOf('data: ');
      assert.ok(res.text.indexOf(': keep-alive') >= 0 && res.text.indexOf(': keep-alive') < firstData, res.text.slice(0, 300));
      assert.ok(res.done, res.text.slice(-300));
      // Committed by a comment, then failing before the first token: a 200 stream with the
      // error event and no finish (then [DONE], as vLLM ends an errored stream).
      const r = await post({ fathom_inject_error_after: 0 }, 2);
      assert.equal(r.status, 200);
      res = await readAll(r);
      assert.ok(res.text.startsWith(': keep-alive'), res.text.slice(0, 200));
      assert.ok(/data: \{"error":\{/.test(res.text), res.text.slice(-300));
      assert.ok(!res.text.includes('"finish_reason":"'), res.text.slice(-300));
      // The official clients read such streams as if there were no comments.
      const OpenAI = require(path.join(nodeModules, 'openai')).default;
      const Anthropic = require(path.join(nodeModules, '@anthropic-ai/sdk')).default;
      const long = Array.from({ length: 300 }, (_, i) => 'word' + i).join(' ');
      const openai = new OpenAI({ apiKey: 'x', baseURL: b + '/v1', maxRetries: 0 });
      let text = '', finish = null;
      for await (const ch of await openai.chat.completions.create({ model: 'deepseek-chat', max_tokens: 4, stream: true,
        messages: [{ role: 'user', content: long }] })) {
        text += ch.choices[0]?.delta?.content || '';
        finish = ch.choices[0]?.finish_reason || finish;
      }
      assert.ok(finish === 'length' || finish === 'stop', 'openai finish ' + finish);
      const anthropic = new Anthropic({ apiKey: 'x', baseURL: b, maxRetries: 0 });
      const msg = await anthropic.messages.stream({ model: 'deepseek-chat', max_tokens: 4,
        messages: [{ role: 'user', content: long }] }).finalMessage();
      assert.ok(msg.stop_reason === 'max_tokens' || msg.stop_reason === 'end_turn', 'anthropic ' + msg.stop_reason);
      const m = await (await fetch(b + '/metrics')).text();
      const beats = Number(m.match(/fathom_http_stream_heartbeats_total (\d+)/)[1]);
      assert.ok(beats >= 4, 'heartbeats ' + beats);
      console.log('     ' + beats + ' keep-alive comments');
    } finally {
      s.proc.kill('SIGTERM');
      await exitOf(s.proc);
    }
  });

  console.log(`serve http: ${t.failures} failures`);
  process.exit(t.failures ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
