// `fathom router` against hostile clients and replicas, on loopback: what the coroutine router
// (src/router/remote_generator.cc, async_http_client.cc) must survive without a hang, a leak
// or a crash.
//   - CLIENTS concurrent streaming clients (two real `fathom serve` replicas, the demo model)
//     that each leave at a random moment (before the head, mid-stream): afterwards the router's
//     fathom_router_replica_in_flight and the replicas' fathom_running_sequences are back to 0,
//     the router runs no more threads than before, and /health answered throughout.
//   - Scripted fake replicas (a node `net` server) in front of a real one: one that accepts and
//     never answers (the client leaves: the wait ends), one that trickles a byte every 0.5 s
//     (the idle timeout bounds a whole line), one that streams an endless line without a
//     newline, one that sends a 100 MB body (and a 500 of 100 MB), one that closes inside a
//     chunk, one that answers more tokens than max_tokens, one that answers garbage: each request completes on the healthy replica, nothing
//     stays in flight, the router's memory stays bounded.
//   - SIGTERM with streams in flight: every client gets an end, the router exits 0 in time.
//   - P/D: a client that leaves while P holds its hand-off: no transfer failure counted, no
//     request sent to D, D's room and reserved pages gone once the lease ends.
// FATHOM_HOSTILE_CLIENTS (default 200), FATHOM_HOSTILE_ONLY (fake behaviours to run, by name),
// FATHOM_HOSTILE_SKIP_SIGTERM and FATHOM_HOSTILE_PROBE=NAME (one fake behind a router alone,
// printing the router's RSS and CPU for 20 s) serve exploration.
// Usage: node hostile_test.js FATHOM NODE_MODULES
'use strict';
const assert = require('assert');
const fs = require('fs');
const http = require('http');
const net = require('net');
const { startServer, startRouter, checker, metrics, metric, waitFor } = require('../serve/start_server.js');

const [fathom] = process.argv.slice(2);  // NODE_MODULES unused: node's own http and net
const CLIENTS = Number(process.env.FATHOM_HOSTILE_CLIENTS || 200);
const t = checker();
const check = t.check;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function procStatus(pid, field) {
  const m = new RegExp('^' + field + ':\\s+(\\d+)', 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}
const url = (s) => `http://127.0.0.1:${s.port}`;

// One streamed chat request with the raw http client. leaveAfterMs >= 0: the client destroys
// its socket then. Resolves to { status, body, ended (the stream's [DONE] came), error }.
function streamChat(port, i, leaveAfterMs = -1, maxTokens = 24) {
  return new Promise((resolve) => {
    const body = JSON.stringify({ model: 'deepseek-chat', max_tokens: maxTokens, stream: true,
      temperature: 0, messages: [{ role: 'user', content: `Hostile ${i}: say something.` }] });
    const out = { status: 0, body: '', ended: false, error: null };
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions',
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } },
    (res) => {
      out.status = res.statusCode;
      res.on('data', (d) => { out.body += d.toString(); });
      res.on('end', () => { out.ended = /data: \[DONE\]/.test(out.body); resolve(out); });
      res.on('error', (e) => { out.error = e; resolve(out); });
      res.on('aborted', () => { out.error = out.error || new Error('aborted'); });
    });
    req.on('error', (e) => { out.error = e; resolve(out); });
    req.on('close', () => resolve(out));
    if (leaveAfterMs >= 0) setTimeout(() => req.destroy(), leaveAfterMs);
    // The hang guard: a request the router never ends fails here, not at the test's timeout.
    const guard = setTimeout(() => { out.error = new Error('no end within 60 s'); req.destroy(); }, 60000);
    req.on('close', () => clearTimeout(guard));
    req.end(body);
  });
}

// A scripted replica: /health answers 200 (role both), the KV feeds 404 (the router predicts),
// and every POST gets `behave(socket, its head)`. Counts the POSTs it took and the sockets still open.
function fakeReplica(behave) {
  const f = { posts: 0, open: 0, sockets: new Set() };
  f.server = net.createServer((sock) => {
    f.open++;
    f.sockets.add(sock);
    sock.on('close', () => { f.open--; f.sockets.delete(sock); });
    sock.on('error', () => {});
    let head = '';
    let handled = false;
    sock.on('data', (d) => {
      if (handled) return;
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      handled = true;
      if (head.startsWith('GET /health')) {
        sock.end('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{"status":"ok"}');
      } else if (head.startsWith('POST ')) {
        f.posts++;
        behave(sock, head);
      } else {
        sock.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n');
      }
    });
  });
  return new Promise((resolve) => f.server.listen(0, '127.0.0.1', () => {
    f.port = f.server.address().port;
    f.close = () => { for (const s of f.sockets) s.destroy(); f.server.close(); };
    resolve(f);
  }));
}

const SSE_HEAD = 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n';
// Writes `chunk` until `total` bytes went out (or the peer left), respecting backpressure.
function pump(sock, chunk, total, then) {
  let sent = 0;
  const go = () => {
    while (sent < total && !sock.destroyed) {
      sent += chunk.length;
      if (!sock.write(chunk)) return sock.once('drain', go);
    }
    if (then && !sock.destroyed) then();
  };
  go();
}
const BEHAVIOURS = {
  // Accepts and reads, never answers (the router's head wait; the client leaves).
  silent: () => {},
  // A head, then one byte of an event every 0.5 s, never a whole line.
  trickle: (sock) => {
    sock.write(SSE_HEAD);
    const iv = setInterval(() => (sock.destroyed ? clearInterval(iv) : sock.write('d')), 500);
    sock.on('close', () => clearInterval(iv));
  },
  // A head, then a line that never ends, as fast as the router reads it (512 MB at most).
  endless: (sock) => {
    sock.write(SSE_HEAD + 'data: {"choices":[{"index":0,"token_ids":[');
    pump(sock, Buffer.alloc(1 << 16, '1'), 512 << 20, () => sock.end());
  },
  // A 100 MB body of SSE comment lines, without a finish.
  huge: (sock) => {
    sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: ' + (100 << 20) + '\r\n\r\n');
    const line = ': ' + 'x'.repeat(1021) + '\n';
    pump(sock, Buffer.from(line.repeat(64)), 100 << 20, () => sock.end());
  },
  // A 500 whose body is 100 MB.
  hugeError: (sock) => {
    sock.write('HTTP/1.1 500 Internal Server Error\r\nContent-Length: ' + (100 << 20) + '\r\n\r\n');
    pump(sock, Buffer.alloc(1 << 16, 'e'), 100 << 20, () => sock.end());
  },
  // A chunked stream cut inside its first chunk.
  cut: (sock) => {
    sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n' +
      '80\r\ndata: {"choices":[{"index":0,"tok');
    setTimeout(() => sock.destroy(), 50);
  },
  // 20 tokens at once for a request of max_tokens 8: an answer outside the protocol, whose
  // tokens must not reach the client (the healthy replica answers instead).
  tooManyTokens: (sock) => {
    sock.end(SSE_HEAD + 'data: {"choices":[{"index":0,"token_ids":[' + Array(20).fill(300).join(',') +
      '],"finish_reason":"length"}]}\n\ndata: [DONE]\n\n');
  },
  // Not HTTP at all.
  garbage: (sock) => {
    sock.end(Buffer.from('\x00\xff garbage \r\n\r\n' + 'z'.repeat(1000), 'latin1'));
  },
};

async function probeOne(name, seconds) {
  const f = await fakeReplica(BEHAVIOURS[name]);
  const r = await startRouter(fathom, ['--replica', `http://127.0.0.1:${f.port}`, '--max-attempts', '1',
    '--replica-idle-timeout', '2', '--no-kv-events']);
  await sleep(500);
  const t0 = Date.now();
  const p = streamChat(r.port, 0, -1, 8).then((o) => console.log('client after', Date.now() - t0, 'ms:', o.status, o.body.slice(0, 300)));
  for (let i = 0; i < seconds; i++) {
    await sleep(1000);
    const st = fs.readFileSync(`/proc/${r.proc.pid}/stat`, 'utf8').split(' ');
    console.log(`${i + 1}s RSS ${procStatus(r.proc.pid, 'VmRSS')} kB, cpu ${(Number(st[13]) + Number(st[14])) / 100} s`);
  }
  r.proc.kill('SIGKILL'); f.close();
  process.exit(0);
}

async function main() {
  if (process.env.FATHOM_HOSTILE_PROBE) return probeOne(process.env.FATHOM_HOSTILE_PROBE, 20);
  const procs = [];
  const fakes = [];
  try {
    const [a, b] = await Promise.all([startServer(fathom, []), startServer(fathom, [])]);
    procs.push(a.proc, b.proc);

    if (CLIENTS > 0) await check(`${CLIENTS} streaming clients leaving at random moments: nothing stays in flight`, async () => {
      const r = await startRouter(fathom, ['--replica', url(a), '--replica', url(b)]);
      procs.push(r.proc);
      await waitFor(async () => metric(await metrics(r.port), `fathom_router_replica_up{replica="${url(b)}"}`) === 1, 'both up');
      const threads0 = procStatus(r.proc.pid, 'Threads');
      const rss0 = procStatus(r.proc.pid, 'VmRSS');
      let healthMax = 0, healthOk = true, storm = true;
      const prober = (async () => {
        while (storm) {
          const t0 = Date.now();
          const h = await fetch(`${url(r)}/health`, { signal: AbortSignal.timeout(20000) }).catch(() => null);
          healthMax = Math.max(healthMax, Date.now() - t0);
          if (!h || h.status !== 200) healthOk = false;
          await sleep(100);
        }
      })();
      let seed = 12345;
      const rand = () => { seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed / 2 ** 32; };
      // A quarter leave before the head can come (0-5 ms), the rest mid-stream (up to 3 s);
      // every tenth stays to its end.
      const runs = [];
      let threadsPeak = threads0;
      for (let i = 0; i < CLIENTS; i++) {
        const leave = i % 10 === 9 ? -1 : i % 4 === 0 ? Math.floor(rand() * 5) : Math.floor(rand() * 3000);
        runs.push(streamChat(r.port, i, leave));
      }
      const peak = setInterval(() => { threadsPeak = Math.max(threadsPeak, procStatus(r.proc.pid, 'Threads')); }, 50);
      const outs = await Promise.all(runs);
      clearInterval(peak);
      const stayed = outs.filter((o, i) => i % 10 === 9);
      for (const o of stayed) assert.ok(o.status === 200 && o.ended, JSON.stringify(o).slice(0, 300));
      await waitFor(async () => {
        const m = await metrics(r.port);
        return metric(m, `fathom_router_replica_in_flight{replica="${url(a)}"}`) === 0 &&
            metric(m, `fathom_router_replica_in_flight{replica="${url(b)}"}`) === 0;
      }, 'the router\'s in-flight to return to 0');
      for (const s of [a, b])
        await waitFor(async () => metric(await metrics(s.port), 'fathom_running_sequences') === 0,
          'the replicas\' running sequences to return to 0');
      storm = false;
      await prober;
      const threads1 = procStatus(r.proc.pid, 'Threads');
      const rss1 = procStatus(r.proc.pid, 'VmRSS');
      const m = await metrics(r.port);
      console.log(`     threads ${threads0} -> peak ${threadsPeak} -> ${threads1}; RSS ${rss0} -> ${rss1} kB; ` +
        `/health max ${healthMax} ms; requests ${metric(m, 'fathom_router_decisions_total{policy="cache_aware"}')}, ` +
        `attempts ${metric(m, 'fathom_router_attempts_total')}, failed ${metric(m, 'fathom_router_failed_requests_total')}`);
      assert.ok(healthOk, '/health failed during the storm');
      assert.ok(threadsPeak <= threads0, `threads ${threads0} -> peak ${threadsPeak}`);
      assert.equal(threads1, threads0);
      assert.equal(metric(m, 'fathom_router_failed_requests_total'), 0);
      r.proc.kill('SIGKILL');
    });

    const only = process.env.FATHOM_HOSTILE_ONLY;
    for (const [name, behave] of Object.entries(BEHAVIOURS)) {
      if (only && !only.split(',').includes(name)) continue;
      await check(`a replica that ${name === 'silent' ? 'never answers (the client leaves)' : 'answers ' + name}: ` +
          'the request ends, nothing stays in flight, memory stays bounded', async () => {
        const f = await fakeReplica(behave);
        fakes.push(f);
        // The fake first (least_load breaks ties by order), the healthy replica second.
        const r = await startRouter(fathom, ['--replica', `http://127.0.0.1:${f.port}`, '--replica', url(a),
          '--policy', 'least_load', '--replica-idle-timeout', '2', '--no-kv-events']);
        procs.push(r.proc);
        await waitFor(async () => {
          const m = await metrics(r.port);
          return metric(m, `fathom_router_replica_up{replica="http://127.0.0.1:${f.port}"}`) === 1 &&
              metric(m, `fathom_router_replica_up{replica="${url(a)}"}`) === 1;
        }, 'both up');
        const rss0 = procStatus(r.proc.pid, 'VmRSS');
        const t0 = Date.now();
        const o = await streamChat(r.port, 0, name === 'silent' ? 1500 : -1, 8);
        const took = Date.now() - t0;
        assert.equal(f.posts, 1, 'the fake replica got the request');
        if (name !== 'silent') {
          assert.equal(o.status, 200, JSON.stringify(o).slice(0, 300));
          assert.ok(o.ended && !/"error"/.test(o.body), o.body.slice(0, 400));
        }
        await waitFor(async () => {
          const m = await metrics(r.port);
          return metric(m, `fathom_router_replica_in_flight{replica="http://127.0.0.1:${f.port}"}`) === 0 &&
              metric(m, `fathom_router_replica_in_flight{replica="${url(a)}"}`) === 0;
        }, 'in-flight to return to 0', 15000);
        // The router let go of the fake's connection.
        await waitFor(async () => f.open === 0, 'the router to close the fake\'s connection', 15000);
        const rssPeak = procStatus(r.proc.pid, 'VmHWM');
        const m = await metrics(r.port);
        console.log(`     ${took} ms; RSS ${rss0} -> peak ${rssPeak} kB; attempts ${metric(m, 'fathom_router_attempts_total')}, ` +
          `failures on the fake ${metric(m, `fathom_router_replica_failures_total{replica="http://127.0.0.1:${f.port}"}`)}`);
        // The overrun failed the fake's attempt: the healthy replica answered.
        if (name === 'tooManyTokens')
          assert.equal(metric(m, `fathom_router_replica_failures_total{replica="http://127.0.0.1:${f.port}"}`), 1);
        // A replica's bytes are bounded by the router (a line, a body), not held whole.
        assert.ok(rssPeak - rss0 < 96 * 1024, `RSS grew ${rss0} -> ${rssPeak} kB`);
        r.proc.kill('SIGKILL');
        f.close();
      });
    }

    await check('the router tells the replica who the client is (X-Forwarded-For: what it resolved, addresses only)', async () => {
      let seen = null;
      const err = '{"error":{"message":"scripted","type":"invalid_request_error"}}';
      const f = await fakeReplica((sock, head) => {
        seen = head;
        sock.end(`HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: ${err.length}\r\n\r\n${err}`);
      });
      fakes.push(f);
      // The router trusts 127.0.0.2 as a proxy: the client is the right-most entry it wrote.
      const r = await startRouter(fathom, ['--replica', `http://127.0.0.1:${f.port}`, '--max-attempts', '1',
        '--no-kv-events', '--forwarded-allow-ips', '127.0.0.2']);
      procs.push(r.proc);
      await waitFor(async () => metric(await metrics(r.port),
        `fathom_router_replica_up{replica="http://127.0.0.1:${f.port}"}`) === 1, 'the replica up');
      // From 127.0.0.2, a chain with a header-splitting attempt in it; what the client wrote
      // left of the entry its proxy vouches for (6.6.6.6) is not sent on.
      const body = JSON.stringify({ model: 'deepseek-chat', max_tokens: 4,
        messages: [{ role: 'user', content: 'who am I?' }] });
      const status = await new Promise((resolve) => {
        const req = http.request({ host: '127.0.0.1', port: r.port, method: 'POST', path: '/v1/chat/completions',
          localAddress: '127.0.0.2', headers: { 'Content-Type': 'application/json',
            'Content-Length': Buffer.byteLength(body), 'X-Forwarded-For': '6.6.6.6, bogus X-Evil: 1, 2001:db8::1' } },
        (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); });
        req.on('error', () => resolve(0));
        req.end(body);
      });
      assert.equal(status, 400);
      assert.ok(seen, 'the replica got no request');
      const xff = seen.split('\r\n').filter((l) => /^x-forwarded-for:/i.test(l));
      assert.deepStrictEqual(xff, ['X-Forwarded-For: 2001:db8::1, 127.0.0.2'], seen);
      assert.ok(!/X-Evil/.test(seen), seen);
      r.proc.kill('SIGKILL');
      f.close();
    });

    if (!process.env.FATHOM_HOSTILE_SKIP_SIGTERM) await check('SIGTERM with 50 streams in flight: each client gets an end, the router exits 0', async () => {
      const r = await startRouter(fathom, ['--replica', url(a), '--replica', url(b),
        '--shutdown-timeout', '1']);
      procs.push(r.proc);
      await waitFor(async () => metric(await metrics(r.port), `fathom_router_replica_up{replica="${url(b)}"}`) === 1, 'both up');
      const runs = [];
      for (let i = 0; i < 50; i++) runs.push(streamChat(r.port, 1000 + i, -1, 200));
      await waitFor(async () => {
        const m = await metrics(r.port);
        return metric(m, `fathom_router_replica_in_flight{replica="${url(a)}"}`) +
            metric(m, `fathom_router_replica_in_flight{replica="${url(b)}"}`) >= 40;
      }, 'streams in flight');
      const exited = new Promise((resolve) => r.proc.on('exit', (code, sig) => resolve({ code, sig })));
      const t0 = Date.now();
      r.proc.kill('SIGTERM');
      const e = await Promise.race([exited, sleep(20000).then(() => null)]);
      assert.ok(e, 'the router did not exit within 20 s of SIGTERM');
      const took = Date.now() - t0;
      const outs = await Promise.all(runs);
      let finished = 0, cut = 0;
      for (const o of outs) {
        if (o.ended) finished++; else cut++;
        // No client waits forever: every one resolved (an end or a closed connection).
      }
      console.log(`     exited ${JSON.stringify(e)} after ${took} ms; ${finished} streams ended with [DONE], ${cut} cut`);
      assert.deepStrictEqual(e, { code: 0, sig: null });
      for (const s of [a, b])
        await waitFor(async () => metric(await metrics(s.port), 'fathom_running_sequences') === 0,
          'the replicas\' running sequences to return to 0');
    });

    await check('P/D: a client that leaves during the hand-off leaves nothing on D once the lease ends', async () => {
      // P waits 3 s before its push: the client leaves (1 s in) while P holds the hand-off.
      const [p, d] = await Promise.all([
        startServer(fathom, ['--pd-stage-mb', '128', '--role', 'prefill', '--pd-test-push-delay-ms', '3000']),
        startServer(fathom, ['--pd-stage-mb', '128', '--role', 'decode', '--pd-lease-seconds', '4'])]);
      procs.push(p.proc, d.proc);
      const r = await startRouter(fathom, ['--replica', url(p), '--replica', url(d)]);
      procs.push(r.proc);
      await waitFor(async () => {
        const m = await metrics(r.port);
        return metric(m, `fathom_router_replica_role{replica="${url(p)}",role="prefill"}`) === 1 &&
            metric(m, `fathom_router_replica_role{replica="${url(d)}",role="decode"}`) === 1;
      }, 'the router to learn the roles');
      let w = '';
      for (let i = 0; i < 700; i++) w += 'w' + ((i * 7919) % 100000) + ' ';  // ~2,000 tokens
      const body = JSON.stringify({ model: 'deepseek-chat', max_tokens: 8, stream: true, temperature: 0,
        messages: [{ role: 'user', content: w }] });
      const out = await new Promise((resolve) => {
        const req = http.request({ host: '127.0.0.1', port: r.port, method: 'POST', path: '/v1/chat/completions',
          headers: { 'Content-Type': 'application/json' } }, (res) => res.resume());
        req.on('error', () => {});
        req.on('close', () => resolve('closed'));
        setTimeout(() => req.destroy(), 1000);
        req.end(body);
      });
      assert.equal(out, 'closed');
      await waitFor(async () => {
        const m = await metrics(r.port);
        return metric(m, `fathom_router_replica_in_flight{replica="${url(p)}"}`) === 0 &&
            metric(m, `fathom_router_replica_in_flight{replica="${url(d)}"}`) === 0;
      }, 'the router\'s in-flight to return to 0', 15000);
      await waitFor(async () => {
        const m = await metrics(d.port);
        return metric(m, 'fathom_pd_open_rooms') === 0 && metric(m, 'fathom_pd_reserved_kv_pages') === 0 &&
            metric(m, 'fathom_running_sequences') === 0;
      }, 'D\'s rooms and reserved pages to return to 0', 20000);
      await waitFor(async () => metric(await metrics(p.port), 'fathom_running_sequences') === 0, 'P idle', 15000);
      const rm = await metrics(r.port);
      const dm = await metrics(d.port);
      console.log(`     router: disaggregated ${metric(rm, 'fathom_router_pd_requests_total{mode="disaggregated"}')}, ` +
        `local ${metric(rm, 'fathom_router_pd_requests_total{mode="local"}')}, transfer failures ` +
        `${metric(rm, 'fathom_router_pd_transfer_failures_total')}, attempts ${metric(rm, 'fathom_router_attempts_total')}, ` +
        `failed ${metric(rm, 'fathom_router_failed_requests_total')}; D: pushes ${metric(dm, 'fathom_pd_received_pushes_total')}`);
      assert.equal(metric(rm, 'fathom_router_pd_requests_total{mode="disaggregated"}'), 1);
      // A client that left is no transfer's failure, and D gets no request to prefill for no one.
      assert.equal(metric(rm, 'fathom_router_pd_transfer_failures_total'), 0);
      assert.equal(metric(rm, 'fathom_router_attempts_total'), 0);
      assert.equal(metric(rm, `fathom_router_replica_routed_total{replica="${url(d)}"}`), 0);
      assert.equal(metric(rm, 'fathom_router_failed_requests_total'), 0);
    });
  } finally {
    for (const x of procs) if (x.exitCode === null) x.kill('SIGKILL');
    for (const f of fakes) f.close();
  }
  console.log(t.failures === 0 ? 'PASS' : `${t.failures} FAILED`);
  process.exit(t.failures === 0 ? 0 : 1);
}

main().catch((e) => {
  console.log('FAIL ' + (e && e.stack || e));
  process.exit(1);
});
