// `fathom router` end to end, on loopback: two `fathom serve` replicas (the demo model) behind
// the router, driven with the official openai and @anthropic-ai/sdk clients.
//   - Through the router, Chat (streamed and not), Messages and Responses answer exactly what
//     a replica answers directly (greedy and seeded).
//   - Failover: 16 concurrent greedy and seeded requests (12 streamed, 4 not), one replica
//     SIGKILLed while they stream: all 16 complete with the outputs of the direct run, and the
//     router's metrics show continuations (requests moved mid-stream with the output so far).
//   - The killed replica restarts on its port: the router sees it up again and routes to it.
//   - The router runs no thread per request: with the 16 in flight, no more threads than idle.
//   - n = 3 seeded and streamed, its replica SIGKILLed once every choice streams: each choice
//     continues on its own (its tokens so far and its sample index) and equals the direct run.
//   - A client that leaves mid-stream: the replica drops its request.
//   - A replica SIGSTOPped mid-stream: its stream moves on once the probe has seen it down for
//     --replica-down-abandon, with the direct run's output.
//   - Hostile: a feature's bad value is a 400 naming it, as from a replica; a bad --replica or
//     --policy exits 2; with no replica up a request gets a 503 in the protocol's shape.
// Usage: node failover_test.js FATHOM NODE_MODULES
'use strict';
const { spawnSync } = require('child_process');
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const { startServer, startRouter, checker, metrics, metric, waitFor } = require('../serve/start_server.js');

const [fathom, modules] = process.argv.slice(2);
const OpenAI = require(path.join(modules, 'openai')).default;
const Anthropic = require(path.join(modules, '@anthropic-ai/sdk')).default;
const light = process.env.FATHOM_TEST_LIGHT === '1';
const maxTokens = light ? 32 : 64;

const t = checker();
const check = t.check;


// The threads a process runs now (Linux).
function threadsOf(pid) {
  return Number(/^Threads:\s+(\d+)$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
}

// The 16 requests: distinct user messages; even ones greedy, odd ones seeded at temperature 1.
function chatRequest(i) {
  const r = { model: 'deepseek-chat', max_tokens: maxTokens,
    // ~100 prompt tokens: the output runs past position 114, where a prefill row and a decode
    // step of the demo model differ — a continuation must recompute the output as decode steps.
    messages: [{ role: 'user', content: `Request ${i}: ` + `tell me about the number ${i * 37}. `.repeat(10) }] };
  if (i % 2 === 0) r.temperature = 0; else { r.temperature = 1; r.seed = 1000 + i; }
  return r;
}
async function chat(client, i, stream) {
  if (!stream) {
    const r = await client.chat.completions.create(chatRequest(i));
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason,
             tokens: r.usage.completion_tokens };
  }
  const s = await client.chat.completions.create({ ...chatRequest(i), stream: true,
    stream_options: { include_usage: true } });
  let text = '', finish = null, tokens = -1, chunks = 0;
  for await (const c of s) {
    if (c.choices.length) {
      text += c.choices[0].delta.content || '';
      finish = c.choices[0].finish_reason || finish;
      chunks++;
    }
    if (c.usage) tokens = c.usage.completion_tokens;
  }
  return { text, finish, tokens, chunks };
}

(async () => {
  let a, b, router;
  const procs = [];
  try {
    // Started together: with no demo model yet, each generates one and the first rename wins.
    [a, b] = await Promise.all([startServer(fathom, []), startServer(fathom, [])]);
    procs.push(a.proc, b.proc);
    const direct = new OpenAI({ baseURL: `http://127.0.0.1:${a.port}/v1`, apiKey: 'none', maxRetries: 0 });

    // The reference: every request, directly on replica A.
    const want = [];
    for (let i = 0; i < 16; i++) want.push(await chat(direct, i, false));

    router = await startRouter(fathom, ['--replica', `http://127.0.0.1:${a.port}`,
      '--replica', `http://127.0.0.1:${b.port}`, '--policy', 'round_robin']);
    procs.push(router.proc);
    const base = `http://127.0.0.1:${router.port}`;
    await waitFor(async () => {
      const m = await metrics(router.port);
      return metric(m, `fathom_router_replica_up{replica="http://127.0.0.1:${a.port}"}`) === 1 &&
             metric(m, `fathom_router_replica_up{replica="http://127.0.0.1:${b.port}"}`) === 1;
    }, 'both replicas up');
    const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0 });

    await check('chat through the router equals the replica (streamed and not, greedy and seeded)', async () => {
      for (const i of [0, 1]) {
        for (const stream of [false, true]) {
          const got = await chat(client, i, stream);
          assert.equal(got.text, want[i].text, `request ${i}, stream ${stream}`);
          assert.equal(got.finish, want[i].finish);
          assert.equal(got.tokens, want[i].tokens);
        }
      }
    });

    await check('Messages and Responses through the router equal the replica', async () => {
      const msg = { model: 'deepseek-chat', max_tokens: 24, temperature: 0,
        messages: [{ role: 'user', content: 'Anthropic through a router' }] };
      const viaRouter = await new Anthropic({ baseURL: base, apiKey: 'none', maxRetries: 0 }).messages.create(msg);
      const viaReplica = await new Anthropic({ baseURL: `http://127.0.0.1:${a.port}`, apiKey: 'none', maxRetries: 0 }).messages.create(msg);
      assert.deepEqual(viaRouter.content, viaReplica.content);
      assert.deepEqual(viaRouter.usage.output_tokens, viaReplica.usage.output_tokens);
      const rq = { model: 'deepseek-chat', input: 'Responses through a router', max_output_tokens: 24, temperature: 0 };
      const r1 = await client.responses.create(rq);
      const r2 = await direct.responses.create(rq);
      assert.equal(r1.output_text, r2.output_text);
    });

    await check('a feature\'s bad value is a 400 naming it, as from a replica', async () => {
      const bad = [{ logprobs: true, top_logprobs: 21 },
        { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'nope' } } } }];
      for (const extra of bad) {
        const body = JSON.stringify({ ...chatRequest(0), ...extra });
        const got = [];
        for (const port of [router.port, a.port]) {
          const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
            headers: { 'Content-Type': 'application/json' }, body });
          got.push({ status: r.status, error: (await r.json()).error });
        }
        assert.equal(got[0].status, 400, JSON.stringify(got[0]));
        assert.deepEqual(got[0], got[1]);
      }
    });

    await check('a client that leaves mid-stream cancels its request on the replica', async () => {
      const ac = new AbortController();
      const r = await fetch(base + '/v1/completions', { method: 'POST', signal: ac.signal,
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: [1, 2, 3, 4, 5], max_tokens: 4000, ignore_eos: true, stream: true }) });
      const reader = r.body.getReader();
      await reader.read();
      await reader.read();
      ac.abort();
      await waitFor(async () => {
        for (const port of [a.port, b.port])
          if (metric(await metrics(port), 'fathom_running_sequences') !== 0 ||
              metric(await metrics(port), 'fathom_queue_depth') !== 0) return false;
        return metric(await metrics(router.port), `fathom_router_replica_in_flight{replica="http://127.0.0.1:${a.port}"}`) === 0 &&
               metric(await metrics(router.port), `fathom_router_replica_in_flight{replica="http://127.0.0.1:${b.port}"}`) === 0;
      }, 'the replicas to drop the request', 20000);
    });

    const idleThreads = threadsOf(router.proc.pid);
    await check('a replica SIGKILLed mid-stream: all 16 requests complete with the direct outputs', async () => {
      const before = await metrics(router.port);
      const progress = new Array(16).fill(0);
      const runs = [];
      for (let i = 0; i < 16; i++) {
        const stream = i % 4 !== 3;
        if (!stream) { runs.push(chat(client, i, false)); continue; }
        runs.push((async () => {
          const s = await client.chat.completions.create({ ...chatRequest(i), stream: true,
            stream_options: { include_usage: true } });
          let text = '', finish = null, tokens = -1;
          for await (const c of s) {
            if (c.choices.length) {
              text += c.choices[0].delta.content || '';
              finish = c.choices[0].finish_reason || finish;
              progress[i]++;
            }
            if (c.usage) tokens = c.usage.completion_tokens;
          }
          return { text, finish, tokens };
        })());
      }
      // Every streamed request has its first tokens: B is serving half of them now.
      await waitFor(async () => progress.every((p, i) => i % 4 === 3 || p >= 2), 'the streams to start', 120000);
      // No thread per request: 16 requests in flight, the router runs the threads it ran idle.
      const busyThreads = threadsOf(router.proc.pid);
      assert.ok(busyThreads <= idleThreads, `router threads: ${idleThreads} idle, ${busyThreads} with 16 in flight`);
      b.proc.kill('SIGKILL');
      const got = await Promise.all(runs);
      for (let i = 0; i < 16; i++) {
        assert.equal(got[i].text, want[i].text, `request ${i}`);
        assert.equal(got[i].finish, want[i].finish, `request ${i}`);
        assert.equal(got[i].tokens, want[i].tokens, `request ${i}`);
      }
      const after = await metrics(router.port);
      const moved = metric(after, 'fathom_router_continuations_total') - metric(before, 'fathom_router_continuations_total');
      assert.ok(moved >= 1, `continuations: ${moved}`);
      assert.equal(metric(after, `fathom_router_replica_up{replica="http://127.0.0.1:${b.port}"}`), 0);
      assert.equal(metric(after, 'fathom_router_failed_requests_total'), 0);
      console.log(`     ${moved} requests continued on the surviving replica`);
    });

    await check('the killed replica restarts on its port and gets traffic again', async () => {
      const bUrl = `http://127.0.0.1:${b.port}`;
      b = await startServer(fathom, ['--port', String(b.port)]);
      procs.push(b.proc);
      await waitFor(async () => metric(await metrics(router.port), `fathom_router_replica_up{replica="${bUrl}"}`) === 1,
        'the restarted replica to be up');
      const routed0 = metric(await metrics(router.port), `fathom_router_replica_routed_total{replica="${bUrl}"}`);
      for (let i = 0; i < 4; i++) {
        const got = await chat(client, i, i % 2 === 0);
        assert.equal(got.text, want[i].text);
      }
      const routed1 = metric(await metrics(router.port), `fathom_router_replica_routed_total{replica="${bUrl}"}`);
      assert.ok(routed1 - routed0 >= 1, `routed to the restarted replica: ${routed1 - routed0}`);
    });

    await check('n = 3 (seeded, streamed), its replica SIGKILLed mid-stream: every choice completes as directly', async () => {
      const req = { model: 'deepseek-chat', max_tokens: maxTokens, n: 3, temperature: 1, seed: 77,
        messages: [{ role: 'user', content: 'Three answers: ' + 'count the stars. '.repeat(12) }] };
      // Choice i's text, finish and token count, streamed (progress[i]: chunks so far).
      const run = async (c, progress) => {
        const s = await c.chat.completions.create({ ...req, stream: true,
          stream_options: { include_usage: true } });
        const out = [0, 1, 2].map(() => ({ text: '', finish: null }));
        for await (const ch of s)
          for (const x of ch.choices) {
            out[x.index].text += x.delta.content || '';
            out[x.index].finish = x.finish_reason || out[x.index].finish;
            if (progress) progress[x.index]++;
          }
        return out;
      };
      const wantN = await run(direct, null);
      assert.ok(new Set(wantN.map((x) => x.text)).size > 1, 'the choices differ');
      const before = await metrics(router.port);
      const progress = [0, 0, 0];
      const running = run(client, progress);
      await waitFor(async () => progress.every((p) => p >= 3), 'every choice to start', 120000);
      // The replica serving it dies.
      let victim = null;
      for (const r of [a, b])
        if (metric(await metrics(r.port), 'fathom_running_sequences') > 0) victim = r;
      assert.ok(victim, 'a replica runs the request');
      victim.proc.kill('SIGKILL');
      const got = await running;
      assert.deepStrictEqual(got, wantN);
      const after = await metrics(router.port);
      const moved = metric(after, 'fathom_router_continuations_total') - metric(before, 'fathom_router_continuations_total');
      assert.ok(moved >= 1 && moved <= 3, `choices continued: ${moved}`);
      assert.equal(metric(after, 'fathom_router_failed_requests_total'), 0);
      console.log(`     ${moved} choices continued on the surviving replica`);
      // Back as it was for the checks below.
      const restarted = await startServer(fathom, ['--port', String(victim.port)]);
      procs.push(restarted.proc);
      if (victim === a) a = restarted; else b = restarted;
      await waitFor(async () => metric(await metrics(router.port),
        `fathom_router_replica_up{replica="http://127.0.0.1:${restarted.port}"}`) === 1, 'the replica to be back');
    });

    await check('a replica SIGSTOPped mid-stream (hung, not dead): after --replica-down-abandon the stream moves on and equals the direct run', async () => {
      const req = { model: 'deepseek-chat', max_tokens: 400, ignore_eos: true, temperature: 1, seed: 5,
        messages: [{ role: 'user', content: 'A long story about a lighthouse keeper.' }] };
      const run = async (c, progress) => {
        const st = await c.chat.completions.create({ ...req, stream: true });
        let text = '';
        for await (const ch of st) {
          if (ch.choices.length) text += ch.choices[0].delta.content || '';
          progress.n++;
        }
        return text;
      };
      const wantText = await run(direct, { n: 0 });
      const before = await metrics(router.port);
      const progress = { n: 0 };
      const t0 = Date.now();
      const running = run(client, progress);
      await waitFor(async () => progress.n >= 3, 'the stream to start', 120000);
      let victim = null;
      for (const r of [a, b])
        if (metric(await metrics(r.port), 'fathom_running_sequences') > 0) victim = r;
      assert.ok(victim, 'a replica runs the request');
      victim.proc.kill('SIGSTOP');
      let got;
      try {
        got = await running;
      } finally {
        victim.proc.kill('SIGCONT');
      }
      const took = (Date.now() - t0) / 1000;
      assert.equal(got, wantText);
      // Moved by the probe's verdict, not by --replica-idle-timeout (120 s), which would also
      // end the wait: a wide margin, not a speed requirement.
      assert.ok(took < 60, `took ${took} s`);
      const after = await metrics(router.port);
      assert.ok(metric(after, 'fathom_router_continuations_total') - metric(before, 'fathom_router_continuations_total') >= 1);
      assert.equal(metric(after, 'fathom_router_failed_requests_total'), 0);
      console.log(`     the stream moved on and completed in ${took.toFixed(1)} s (default --replica-down-abandon 5)`);
      await waitFor(async () => metric(await metrics(router.port),
        `fathom_router_replica_up{replica="http://127.0.0.1:${victim.port}"}`) === 1, 'the replica to be back');
    });

    await check('with no replica up: 503 in each protocol\'s shape, /health 503', async () => {
      a.proc.kill('SIGKILL');
      b.proc.kill('SIGKILL');
      await waitFor(async () => (await fetch(base + '/health')).status === 503, 'router /health 503');
      const r = await fetch(base + '/v1/chat/completions', { method: 'POST',
        headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(chatRequest(0)) });
      assert.equal(r.status, 503);
      assert.match((await r.json()).error.message, /no replica/);
      const m = await fetch(base + '/v1/messages', { method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'deepseek-chat', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }) });
      assert.equal(m.status, 529);
      assert.equal((await m.json()).type, 'error');
    });

    await check('bad flags exit 2 with the reason', async () => {
      for (const [args, why] of [[['--replica', 'localhost:1'], /http:\/\/HOST:PORT/],
                                  [['--replica', 'http://127.0.0.1:1', '--policy', 'random'], /policy/],
                                  [['--replica', 'http://127.0.0.1:1', '--replica', 'http://127.0.0.1:1'], /twice/]]) {
        const r = spawnSync(fathom, ['router', '--port', '0', ...args], { encoding: 'utf8', timeout: 20000 });
        assert.equal(r.status, 2, r.stderr);
        assert.match(r.stderr, why);
      }
    });

    await check('SIGTERM stops the router', async () => {
      const exited = new Promise((r) => router.proc.once('exit', (code) => r(code)));
      router.proc.kill('SIGTERM');
      assert.equal(await exited, 0);
    });
  } catch (e) {
    t.failures++;
    console.log('FAIL setup: ' + (e && e.stack || e));
  } finally {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
  }
  console.log(`${t.failures === 0 ? 'router tests passed' : 'router tests FAILED'}`);
  process.exit(t.failures === 0 ? 0 : 1);
})();
