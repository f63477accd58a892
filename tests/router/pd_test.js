// Prefill/decode disaggregation end to end, on loopback: `fathom serve --role prefill` (P) and
// `--role decode` (D) behind `fathom router`, checked against one `--role both` replica (B).
//   - The router learns the roles from the replicas' /health.
//   - Chat Completions, streamed and not, greedy and seeded, on prompts of 400-700 tokens (past
//     the indexer's top-k point and several 128-token blocks): the router's answers equal B's;
//     D prefilled only each prompt's tail (its prompt tokens minus its cache hits), received
//     the blocks P pushed, and bytes moved. P pushes in 256 KiB chunks (--pd-push-chunk-bytes),
//     so every hand-off moves in several requests; D counts the chunks P sent. A second P with
//     the default 8 MiB chunks moves its hand-off in one.
//   - A prompt already cached on P (sent to P directly first): P's prefill is a prefix-cache
//     hit, the hand-off still moves the blocks, the answer equals B's.
//   - A short prompt is prefilled on D (not disaggregated).
//   - Transfer failures: a push altered by P (--pd-test-corrupt-push) is rejected by D's checks
//     and, with --kv-load-failure recompute, recomputed on D (equal to B); with fail, the client
//     gets a 503 naming the failure. P SIGKILLed after its prefill, before its push: D
//     recomputes, equal to B. P SIGKILLed between two chunks of its push: D recomputes, equal
//     to B, and the partial room is closed.
//   - Decode first: a D with a 3 MiB KV pool holds a reservation's pages (prompt + max_tokens)
//     from /v1/pd/reserve on; a second reservation is refused (503 kv_capacity) while the first
//     stands, and the router then prefills that request on D (equal to B) — or, with a second
//     decode replica behind it, hands it off to that one (equal to B); the held request
//     gets its answer (equal to B) and its hold ends at admission; then the second is
//     accepted; an unused room's hold ends with its lease; no KV page is left in use beyond
//     the prefix cache's.
//   - P hung (SIGSTOP) between its prefill and its push, under a 600 s --pd-timeout: once its
//     health probes have failed for --replica-down-abandon (1 s), the router abandons the
//     hand-off and D recomputes: the answer equals B's, in well under the hand-off's timeout.
//   - Partial pushes are bounded: a D whose staging tier is 1 MiB takes two ~0.9 MB hand-offs
//     pushed at once in 256 KiB chunks (1 s apart): one push fails with stage_full, its request
//     is recomputed on D; both answers equal B's.
// Usage: node pd_test.js FATHOM NODE_MODULES
'use strict';
const assert = require('assert');
const { startServer, startRouter, checker, randomPrompt, metrics, metric, waitFor } = require('../serve/start_server.js');

const [fathom] = process.argv.slice(2);
const t = checker();
const check = t.check;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const BLOCK = 128;

async function metricOf(port, name) {
  return metric(await metrics(port), name);
}

// A chat request whose prompt is about `words` * 3 tokens (distinct words per seed).
function chatBody(seed, words, extra) {
  let s = seed * 2654435761 >>> 0;
  const w = [];
  for (let i = 0; i < words; i++) {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    w.push('w' + (s % 100000));
  }
  return { messages: [{ role: 'user', content: w.join(' ') }], max_tokens: 12,
    temperature: 0, ...extra };
}

// The answer of a Chat Completions request: { status, text (reasoning + content), finish,
// prompt } — streamed or not, the same shape.
async function chat(port, body) {
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const raw = await r.text();
  if (r.status !== 200) return { status: r.status, error: raw };
  if (!body.stream) {
    const j = JSON.parse(raw);
    const m = j.choices[0].message;
    return { status: 200, text: (m.reasoning_content || '') + '|' + (m.content || ''),
      finish: j.choices[0].finish_reason, prompt: j.usage.prompt_tokens };
  }
  let reasoning = '', content = '', finish = null, prompt = 0, error = null;
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const j = JSON.parse(line.slice(6));
    if (j.error) error = j.error;
    if (j.usage) prompt = j.usage.prompt_tokens;
    for (const c of j.choices || []) {
      reasoning += c.delta.reasoning_content || '';
      content += c.delta.content || '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  if (error) return { status: 200, error: JSON.stringify(error) };
  return { status: 200, text: reasoning + '|' + content, finish, prompt };
}
function tail(L) {
  return L - BLOCK * Math.floor((L - 1) / BLOCK);
}

async function main() {
  const procs = [];
  const small = ['--kv-budget-mb', '512', '--prefix-cache-mb', '256'];
  const pd = ['--pd-stage-mb', '128'];
  const CHUNK = 256 * 1024;
  const chunked = ['--pd-push-chunk-bytes', String(CHUNK)];
  try {
    const t0 = Date.now();
    const [b, p, d, pBad, pSlow, dFail, pWhole, pMid, dTiny, pPace, dStage, pHang] = await Promise.all([
      startServer(fathom, [...small]),
      startServer(fathom, [...small, ...pd, ...chunked, '--role', 'prefill']),
      startServer(fathom, [...small, ...pd, '--role', 'decode']),
      startServer(fathom, [...small, ...pd, '--role', 'prefill', '--pd-test-corrupt-push']),
      startServer(fathom, [...small, ...pd, '--role', 'prefill', '--pd-test-push-delay-ms', '4000']),
      startServer(fathom, [...small, ...pd, '--role', 'decode', '--kv-load-failure', 'fail']),
      startServer(fathom, [...small, ...pd, '--role', 'prefill']),
      startServer(fathom, [...small, ...pd, ...chunked, '--role', 'prefill',
        '--pd-test-chunk-delay-ms', '4000']),
      startServer(fathom, ['--kv-budget-mb', '3', '--prefix-cache-mb', '1', ...pd, '--role',
        'decode', '--pd-lease-seconds', '5']),
      startServer(fathom, [...small, ...pd, ...chunked, '--role', 'prefill',
        '--pd-test-chunk-delay-ms', '1000']),
      startServer(fathom, [...small, '--pd-stage-mb', '1', '--role', 'decode']),
      startServer(fathom, [...small, ...pd, '--role', 'prefill', '--pd-test-push-delay-ms', '4000']),
    ]);
    procs.push(b.proc, p.proc, d.proc, pBad.proc, pSlow.proc, dFail.proc, pWhole.proc, pMid.proc,
      dTiny.proc, pPace.proc, dStage.proc, pHang.proc);
    const url = (s) => `http://127.0.0.1:${s.port}`;
    // A router in front of P and the decode replicas ds (with extra arguments).
    const routerOf = async (pp, ds, args = []) => {
      ds = [].concat(ds);
      const r = await startRouter(fathom, ['--replica', url(pp),
        ...ds.flatMap((dd) => ['--replica', url(dd)]), ...args]);
      procs.push(r.proc);
      await waitFor(async () => {
        const m = await metrics(r.port);
        return metric(m, `fathom_router_replica_role{replica="${url(pp)}",role="prefill"}`) === 1 &&
          ds.every((dd) =>
            metric(m, `fathom_router_replica_role{replica="${url(dd)}",role="decode"}`) === 1);
      }, 'the router to learn the roles');
      return r;
    };
    const [r, rBad, rFail, rSlow, rWhole, rMid, rTiny, rStage, rTwoD, rHang] = await Promise.all([
      routerOf(p, d), routerOf(pBad, d), routerOf(pBad, dFail), routerOf(pSlow, d),
      routerOf(pWhole, d), routerOf(pMid, d), routerOf(pWhole, dTiny), routerOf(pPace, dStage),
      // Round robin takes dTiny first, then d.
      routerOf(pWhole, [dTiny, d], ['--policy', 'round_robin']),
      routerOf(pHang, d, ['--replica-down-abandon', '1', '--pd-timeout', '600'])]);
    console.log(`# started 12 replicas and 10 routers in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

    await check('replicas report their role in /health and /v1/role', async () => {
      const h = await (await fetch(`${url(p)}/health`)).json();
      assert.equal(h.status, 'ok');
      assert.equal(h.role, 'prefill');
      assert.equal((await (await fetch(`${url(d)}/v1/role`)).json()).role, 'decode');
      assert.equal((await (await fetch(`${url(b)}/v1/role`)).json()).role, 'both');
    });

    const cases = [
      ['greedy, not streamed', chatBody(1, 150, {})],
      ['greedy, streamed', chatBody(2, 190, { stream: true, stream_options: { include_usage: true } })],
      ['seeded, not streamed', chatBody(3, 170, { temperature: 0.9, seed: 11 })],
      ['seeded, streamed', chatBody(4, 230, { temperature: 0.9, seed: 12, stream: true,
        stream_options: { include_usage: true } })],
    ];
    let tails = 0, blocks = 0;
    for (const [name, body] of cases) {
      await check(`P/D equals a --role both replica: chat ${name}`, async () => {
        const [got, want] = await Promise.all([chat(r.port, body), chat(b.port, body)]);
        assert.equal(got.status, 200, got.error);
        assert.ok(want.prompt > 2 * BLOCK + 114, `a long prompt (${want.prompt} tokens)`);
        assert.equal(got.prompt, want.prompt);
        assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
        tails += tail(want.prompt);
        blocks += Math.floor((want.prompt - 1) / BLOCK);
      });
    }
    await check('D prefilled only the tails; P pushed the blocks; bytes moved', async () => {
      const [dm, pm, rm] = await Promise.all([metrics(d.port), metrics(p.port), metrics(r.port)]);
      const prefilledOnD = metric(dm, 'fathom_prompt_tokens_total') -
        metric(dm, 'fathom_prefix_cache_hit_tokens_total');
      assert.equal(prefilledOnD, tails);
      assert.equal(metric(dm, 'fathom_pd_received_blocks_total'), blocks);
      assert.equal(metric(dm, 'fathom_pd_received_windows_total'), cases.length);
      assert.equal(metric(dm, 'fathom_kv_store_hits_total'), blocks);
      assert.equal(metric(pm, 'fathom_pd_pushed_blocks_total'), blocks);
      assert.equal(metric(rm, 'fathom_router_pd_requests_total{mode="disaggregated"}'), cases.length);
      const bytes = metric(rm, 'fathom_router_pd_transfer_bytes_total');
      assert.ok(bytes > blocks * 100000, `bytes moved: ${bytes}`);
      assert.equal(metric(pm, 'fathom_pd_pushed_bytes_total'), bytes);
      assert.equal(metric(dm, 'fathom_pd_received_bytes_total'), bytes);
      assert.equal(metric(rm, 'fathom_router_pd_transfer_seconds_count'), cases.length);
      // Chunked: every hand-off moved in several chunks of at most CHUNK stream bytes (plus a
      // 40-byte header each), all of them counted by D.
      const chunks = metric(pm, 'fathom_pd_pushed_chunks_total');
      assert.equal(metric(dm, 'fathom_pd_received_chunks_total'), chunks);
      assert.equal(metric(dm, 'fathom_pd_rejected_chunks_total'), 0);
      assert.ok(chunks >= 2 * cases.length, `${chunks} chunks for ${cases.length} pushes`);
      assert.ok(bytes <= chunks * (CHUNK + 40), `${bytes} bytes in ${chunks} chunks`);
      assert.ok(bytes > (chunks - cases.length) * CHUNK, `${bytes} bytes in ${chunks} chunks`);
      assert.equal(metric(dm, 'fathom_pd_open_rooms'), 0);
      console.log(`#   ${cases.length} hand-offs: ${blocks} blocks, ${(bytes / cases.length / 1e6).toFixed(2)} MB a request, ${chunks} chunks`);
    });

    await check('a hand-off in one chunk (default 8 MiB chunks) equals a --role both replica', async () => {
      const body = chatBody(10, 210, { temperature: 0.9, seed: 3 });
      const before = await metrics(d.port);
      const [got, want] = await Promise.all([chat(rWhole.port, body), chat(b.port, body)]);
      assert.equal(got.status, 200, got.error);
      assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
      const after = await metrics(d.port);
      const delta = (n) => metric(after, n) - metric(before, n);
      assert.equal(await metricOf(pWhole.port, 'fathom_pd_pushed_chunks_total'), 1);
      assert.equal(delta('fathom_pd_received_chunks_total'), 1);
      assert.equal(delta('fathom_pd_received_blocks_total'), Math.floor((want.prompt - 1) / BLOCK));
      assert.equal(delta('fathom_pd_recomputed_total'), 0);
    });

    await check('--pd-api-key: the hand-off takes only the router\'s key; a client\'s key is a 401 on every hand-off endpoint', async () => {
      // A client key that the replicas accept for generation must not reach the hand-off: it
      // could have P push KV anywhere or plant blocks in D's cache.
      const keys = ['--api-key', 'client-key', '--api-key', 'router-key', '--pd-api-key', 'router-key'];
      const [p2, d2] = await Promise.all([
        startServer(fathom, [...small, ...pd, ...keys, '--role', 'prefill', '--pd-push-api-key', 'router-key']),
        startServer(fathom, [...small, ...pd, ...keys, '--role', 'decode'])]);
      procs.push(p2.proc, d2.proc);
      const r2 = await routerOf(p2, d2, ['--replica-api-key', 'router-key']);
      const body = chatBody(21, 170, { temperature: 0.9, seed: 5 });
      const [got, want] = await Promise.all([chat(r2.port, body), chat(b.port, body)]);
      assert.equal(got.status, 200, got.error);
      assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
      assert.ok(metric(await metrics(d2.port), 'fathom_pd_received_blocks_total') > 0, 'a hand-off');
      const post = (srv, path, key) => fetch(url(srv) + path, { method: 'POST',
        headers: { Authorization: 'Bearer ' + key, 'Content-Type': 'application/json' }, body: '{}' });
      for (const [srv, path] of [[p2, '/v1/pd/prefill'], [d2, '/v1/pd/reserve'], [d2, '/v1/kv_push?room=x']]) {
        assert.equal((await post(srv, path, 'client-key')).status, 401, path);
        const ok = await post(srv, path, 'router-key');
        assert.ok(ok.status !== 401 && ok.status < 500, `${path} with the router's key: ${ok.status}`);
      }
      // The client key still generates on a replica directly.
      const direct = await fetch(url(d2) + '/v1/completions', { method: 'POST',
        headers: { Authorization: 'Bearer client-key', 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: 'hi', max_tokens: 2 }) });
      assert.equal(direct.status, 200);
    });

    await check('a prompt already cached on P: a prefix-cache hit there, the blocks still move', async () => {
      const body = chatBody(5, 200, {});
      const warm = await chat(p.port, body);  // P serves it directly once
      assert.equal(warm.status, 200, warm.error);
      const before = await metricOf(p.port, 'fathom_prefix_cache_hit_tokens_total');
      const blocksBefore = await metricOf(d.port, 'fathom_pd_received_blocks_total');
      const [got, want] = await Promise.all([chat(r.port, body), chat(b.port, body)]);
      assert.equal(got.status, 200, got.error);
      assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
      const h = Math.floor((want.prompt - 1) / BLOCK);
      assert.equal(await metricOf(p.port, 'fathom_prefix_cache_hit_tokens_total') - before, h * BLOCK);
      assert.equal(await metricOf(d.port, 'fathom_pd_received_blocks_total') - blocksBefore, h);
    });

    await check('a short prompt is prefilled on D', async () => {
      const body = chatBody(6, 40, {});
      const rooms = await metricOf(d.port, 'fathom_pd_rooms_total');
      const [got, want] = await Promise.all([chat(r.port, body), chat(b.port, body)]);
      assert.ok(want.prompt < 256, `${want.prompt} tokens`);
      assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
      assert.equal(await metricOf(d.port, 'fathom_pd_rooms_total'), rooms);
      assert.equal(await metricOf(r.port, 'fathom_router_pd_requests_total{mode="local"}'), 1);
    });

    await check('a corrupted push is rejected by D and recomputed there (recompute)', async () => {
      const body = chatBody(7, 160, { temperature: 0.9, seed: 5 });
      const [got, want] = await Promise.all([chat(rBad.port, body), chat(b.port, body)]);
      assert.equal(got.status, 200, got.error);
      assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
      const dm = await metrics(d.port);
      assert.equal(metric(dm, 'fathom_pd_rejected_pushes_total'), 1);
      assert.equal(metric(dm, 'fathom_pd_recomputed_total'), 1);
      assert.equal(await metricOf(rBad.port, 'fathom_router_pd_transfer_failures_total'), 1);
    });

    await check('a corrupted push under --kv-load-failure fail: a clear 503, streamed or not', async () => {
      for (const stream of [false, true]) {
        const got = await chat(rFail.port, chatBody(8, 160, { stream }));
        assert.equal(got.status, 503, JSON.stringify(got));
        const e = JSON.parse(got.error).error;
        assert.match(e.message, /KV transfer failed: the push was rejected: KV push object: KV object checksum/);
      }
      assert.equal(await metricOf(dFail.port, 'fathom_pd_transfer_failures_total'), 2);
      assert.equal(await metricOf(rFail.port, `fathom_router_replica_up{replica="${url(dFail)}"}`), 1);
    });

    await check('P SIGKILLed between its prefill and its push: D recomputes, same answer', async () => {
      const body = chatBody(9, 180, { stream: true });
      const want = await chat(b.port, body);
      const pending = chat(rSlow.port, body);
      // P's engine has finished the prefill (it then waits 4 s before pushing): kill it.
      await waitFor(async () => (await metricOf(pSlow.port, 'fathom_prompt_tokens_total')) > 0,
        'the prefill on P');
      pSlow.proc.kill('SIGKILL');
      const got = await pending;
      assert.equal(got.status, 200, got.error);
      assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
      assert.equal(await metricOf(d.port, 'fathom_pd_recomputed_total'), 2);
      assert.equal(await metricOf(rSlow.port, 'fathom_router_pd_transfer_failures_total'), 1);
    });

    await check('P SIGKILLed between two chunks of its push: D recomputes, same answer', async () => {
      const body = chatBody(11, 220, { temperature: 0.9, seed: 7 });
      const want = await chat(b.port, body);
      const chunksBefore = await metricOf(d.port, 'fathom_pd_received_chunks_total');
      const pending = chat(rMid.port, body);
      // P pushed its first chunk (it waits 4 s before each next one): kill it.
      await waitFor(async () =>
        (await metricOf(d.port, 'fathom_pd_received_chunks_total')) > chunksBefore,
      'the first chunk on D');
      assert.equal(await metricOf(d.port, 'fathom_pd_open_rooms'), 1);
      pMid.proc.kill('SIGKILL');
      const got = await pending;
      assert.equal(got.status, 200, got.error);
      assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
      const dm = await metrics(d.port);
      assert.equal(metric(dm, 'fathom_pd_received_chunks_total'), chunksBefore + 1);
      assert.equal(metric(dm, 'fathom_pd_recomputed_total'), 3);
      assert.equal(metric(dm, 'fathom_pd_open_rooms'), 0);
      assert.equal(await metricOf(rMid.port, 'fathom_router_pd_transfer_failures_total'), 1);
    });

    await check('D holds a reservation\'s KV pages: a second is refused until the first request ran', async () => {
      const reserve = (room, prompt) => fetch(`${url(dTiny)}/v1/pd/reserve`, { method: 'POST',
        body: JSON.stringify({ room, prompt, max_tokens: 64 }) });
      const complete = async (port, prompt, room) => {
        const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST',
          headers: { 'Content-Type': 'application/json', ...(room ? { 'X-Fathom-KV-Room': room } : {}) },
          body: JSON.stringify({ prompt, max_tokens: 12, temperature: 0 }) });
        const j = await r.json();
        assert.equal(r.status, 200, JSON.stringify(j));
        return [j.choices[0].text, j.choices[0].finish_reason];
      };
      const pa = randomPrompt(501, 600), pb = randomPrompt(502, 600);
      const [wantA, wantB] = await Promise.all([complete(b.port, pa), complete(b.port, pb)]);
      const pagesTotal = await metricOf(dTiny.port, 'fathom_kv_pages_total');
      const a = await reserve('hold-a', pa);
      assert.equal(a.status, 200, await a.text());
      const held = await metricOf(dTiny.port, 'fathom_pd_reserved_kv_pages');
      assert.ok(held > pagesTotal / 2 && held <= pagesTotal, `${held} of ${pagesTotal} pages held`);
      const refused = await reserve('hold-b', pb);
      assert.equal(refused.status, 503);
      const e = (await refused.json()).error;
      assert.equal(e.code, 'kv_capacity');
      assert.match(e.message, /no KV room for the hand-off: it needs \d+ pages/);
      // Through the router (which states the request's max_tokens): D refuses the room, the
      // request is prefilled on D, same answer.
      // At once (both while A's hold stands: its lease is 5 s), through a router in front of
      // dTiny alone and one in front of dTiny and d.
      const body = chatBody(12, 200, { max_tokens: 256 });
      const body2 = chatBody(15, 200, { max_tokens: 256, temperature: 0.8, seed: 9 });
      const pushesBefore = await metricOf(d.port, 'fathom_pd_received_pushes_total');
      const [got, want, got2, want2] = await Promise.all([chat(rTiny.port, body),
        chat(b.port, body), chat(rTwoD.port, body2), chat(b.port, body2)]);
      assert.equal(got.status, 200, got.error);
      assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
      assert.equal(await metricOf(rTiny.port, 'fathom_router_pd_requests_total{mode="local"}'), 1);
      assert.equal(await metricOf(rTiny.port, 'fathom_router_pd_refused_reservations_total'), 1);
      // With a second decode replica behind the router, the refused request goes there
      // instead, still disaggregated (P prefills, pushes to d), same answer.
      assert.equal(got2.status, 200, got2.error);
      assert.deepStrictEqual([got2.text, got2.finish], [want2.text, want2.finish]);
      const rm = await metrics(rTwoD.port);
      assert.equal(metric(rm, 'fathom_router_pd_refused_reservations_total'), 1);
      assert.equal(metric(rm, 'fathom_router_pd_requests_total{mode="disaggregated"}'), 1);
      assert.equal(metric(rm, 'fathom_router_pd_requests_total{mode="local"}'), 0);
      assert.equal(metric(rm, `fathom_router_replica_routed_total{replica="${url(d)}"}`), 1);
      assert.equal(metric(rm, `fathom_router_replica_routed_total{replica="${url(dTiny)}"}`), 0);
      assert.equal(await metricOf(d.port, 'fathom_pd_received_pushes_total'), pushesBefore + 1);
      assert.equal(await metricOf(dTiny.port, 'fathom_pd_refused_reservations_total'), 3);
      // A's request (no push came: D prefills it) takes its hold at admission.
      // (Its pages go back to the pool at the end of the step that sent its last token.)
      const idle = () => waitFor(async () =>
        (await metricOf(dTiny.port, 'fathom_running_sequences')) === 0, 'D to be idle');
      assert.deepStrictEqual(await complete(dTiny.port, pa, 'hold-a'), wantA);
      assert.equal(await metricOf(dTiny.port, 'fathom_pd_reserved_kv_pages'), 0);
      await idle();
      const b2 = await reserve('hold-b', pb);
      assert.equal(b2.status, 200, await b2.text());
      assert.deepStrictEqual(await complete(dTiny.port, pb, 'hold-b'), wantB);
      await idle();
      // A room never used: its hold ends with its lease (5 s).
      assert.equal((await reserve('hold-c', pa)).status, 200);
      assert.ok(await metricOf(dTiny.port, 'fathom_pd_reserved_kv_pages') > 0);
      await waitFor(async () => (await metricOf(dTiny.port, 'fathom_pd_reserved_kv_pages')) === 0,
        'the unused hold to end', 15000);
      assert.equal((await reserve('hold-d', pb)).status, 200);
      const dm = await metrics(dTiny.port);
      // Idle, D's pages in use are the prefix cache's (whose bytes also count the window side
      // objects kept off the pool); a request's pages left behind would be 30+ pages more.
      assert.equal(metric(dm, 'fathom_running_sequences'), 0);
      assert.ok(metric(dm, 'fathom_kv_bytes') <= metric(dm, 'fathom_prefix_cache_bytes'),
        `${metric(dm, 'fathom_kv_bytes')} bytes in use, ${metric(dm, 'fathom_prefix_cache_bytes')} cached`);
      assert.equal(metric(dm, 'fathom_pd_refused_reservations_total'), 3);
    });

    await check('partial pushes are bounded by D\'s staging tier: one fails (stage_full), both answers right', async () => {
      const bodies = [chatBody(13, 190, {}), chatBody(14, 195, { temperature: 0.9, seed: 4 })];
      const [got, want] = await Promise.all([Promise.all(bodies.map((x) => chat(rStage.port, x))),
        Promise.all(bodies.map((x) => chat(b.port, x)))]);
      for (let i = 0; i < 2; i++) {
        assert.equal(got[i].status, 200, got[i].error);
        assert.deepStrictEqual([got[i].text, got[i].finish], [want[i].text, want[i].finish]);
      }
      const dm = await metrics(dStage.port);
      assert.equal(metric(dm, 'fathom_pd_received_pushes_total'), 2);
      assert.equal(metric(dm, 'fathom_pd_rejected_pushes_total'), 1);
      assert.equal(metric(dm, 'fathom_pd_recomputed_total'), 1);
      assert.ok(metric(dm, 'fathom_pd_received_blocks_total') >= 4);
      assert.equal(metric(dm, 'fathom_pd_open_rooms'), 0);
    });

    await check('P hung between its prefill and its push: the hand-off is abandoned, D recomputes', async () => {
      const body = chatBody(16, 200, { stream: true });
      const want = await chat(b.port, body);
      const before = await metricOf(d.port, 'fathom_pd_recomputed_total');
      const t1 = Date.now();
      const pending = chat(rHang.port, body);
      // P's engine has finished the prefill (it then waits 4 s before pushing): stop it. Its
      // connections stay open; only its failing health probes tell the router.
      await waitFor(async () => (await metricOf(pHang.port, 'fathom_prompt_tokens_total')) > 0,
        'the prefill on P');
      pHang.proc.kill('SIGSTOP');
      // Without the rule the hand-off would wait out its 600 s: give up long before that.
      const got = await Promise.race([pending,
        sleep(60000).then(() => ({ status: 0, error: 'no answer in 60 s' }))]);
      assert.equal(got.status, 200, got.error);
      assert.deepStrictEqual([got.text, got.finish], [want.text, want.finish]);
      assert.equal(await metricOf(d.port, 'fathom_pd_recomputed_total'), before + 1);
      const rm = await metrics(rHang.port);
      assert.equal(metric(rm, 'fathom_router_pd_transfer_failures_total'), 1);
      assert.equal(metric(rm, `fathom_router_replica_up{replica="${url(pHang)}"}`), 0);
      console.log(`# answered ${((Date.now() - t1) / 1000).toFixed(1)} s after it was sent`);
    });
  } finally {
    for (const x of procs) if (x.exitCode === null) x.kill('SIGKILL');
  }
  console.log(t.failures === 0 ? 'PASS' : `${t.failures} FAILED`);
  process.exit(t.failures === 0 ? 0 : 1);
}

main().catch((e) => {
  console.log('FAIL ' + (e && e.stack || e));
  process.exit(1);
});
