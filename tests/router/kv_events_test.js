// The router's exact, event-fed cache index end to end, on loopback: two `fathom serve`
// replicas of the demo model (B with a prefix cache of 3 MiB: about four 128-token blocks with
// their window side objects) and `fathom router --policy cache_aware` in front.
//   - A replica's feed: GET /v1/kv_events starts with a start line and carries stored events;
//     an id from the future is a resync line; GET /v1/kv_snapshot lists the cached blocks.
//   - Blocks B cached for a request the router never saw reach the router's view (its
//     GET /v1/router/kv_index equals B's /v1/kv_snapshot), and the router sends that prefix to B
//     (a predicted hit of 2 blocks, B reports 256 cached tokens).
//   - Eviction: a longer prompt sent to B evicts the first one's blocks; the router's view
//     equals B's snapshot again, and the evicted prefix is no longer predicted as a hit.
//   - B SIGKILLed: its view is dropped; restarted on its port: the router reloads its snapshot
//     (a new instance) and follows its events again.
//   - Three requests sent at once with a shared new 3-block prefix: the router counts the
//     first's prompt blocks as its replica's while it prefills, so all three go there, and
//     that replica computes the prefix once (cached tokens 0, 384, 384).
// Usage: node kv_events_test.js FATHOM NODE_MODULES
'use strict';
const assert = require('assert');
const { startServer, startRouter, checker, randomPrompt, metrics, metric, waitFor } = require('../serve/start_server.js');

const [fathom] = process.argv.slice(2);
const t = checker();
const check = t.check;

async function getJson(port, p) {
  const r = await fetch(`http://127.0.0.1:${port}${p}`);
  assert.equal(r.status, 200, p);
  return r.json();
}
async function complete(port, prompt) {
  const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0 }) });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  return JSON.parse(text).usage;
}
// A replica's cached blocks (sorted hashes) and the router's view of replica i.
async function snapshotBlocks(port) {
  return (await getJson(port, '/v1/kv_snapshot')).blocks.map((b) => b[0]).sort();
}
async function routerView(port, i) {
  return (await getJson(port, `/v1/router/kv_index?replica=${i}`)).replicas[0];
}
async function viewsAgree(routerPort, i, replicaPort) {
  const [v, s] = [await routerView(routerPort, i), await snapshotBlocks(replicaPort)];
  return v.source === 'events' && JSON.stringify(v.blocks) === JSON.stringify(s);
}
// The first lines of GET /v1/kv_events?QUERY (the stream stays open: read until `until`).
async function feedLines(port, query, until) {
  const ac = new AbortController();
  const r = await fetch(`http://127.0.0.1:${port}/v1/kv_events?${query}`, { signal: ac.signal });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /application\/x-ndjson/);
  const reader = r.body.getReader();
  let text = '';
  const dec = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value);
    const lines = text.split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
    if (until(lines)) {
      ac.abort();
      return lines;
    }
  }
  return text.split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

(async () => {
  const procs = [];
  try {
    const a = await startServer(fathom, []);
    procs.push(a.proc);
    let b = await startServer(fathom, ['--prefix-cache-mb', '3']);
    procs.push(b.proc);
    const router = await startRouter(fathom, ['--policy', 'cache_aware',
      '--replica', `http://127.0.0.1:${a.port}`, '--replica', `http://127.0.0.1:${b.port}`]);
    procs.push(router.proc);
    const urlB = `http://127.0.0.1:${b.port}`;
    const p1 = randomPrompt(11, 2 * 128 + 9);   // two full blocks
    const p2 = randomPrompt(12, 4 * 128 + 3);   // four: with p1's two, more than B keeps

    await check('both replicas feed the router (snapshots loaded)', async () => {
      await waitFor(async () => (await routerView(router.port, 0)).source === 'events' &&
        (await routerView(router.port, 1)).source === 'events', 'event-fed views');
    });

    await check('/v1/router/kv_index: no query is every replica; a bad replica query is a 400', async () => {
      assert.equal((await getJson(router.port, '/v1/router/kv_index')).replicas.length, 2);
      for (const q of ['replica=-1', 'replica=abc', 'replica=0x1', 'replica=', 'replica=2', 'replica=1.0', 'r=1']) {
        const r = await fetch(`http://127.0.0.1:${router.port}/v1/router/kv_index?${q}`);
        assert.equal(r.status, 400, q);
        assert.equal((await r.json()).error.type, 'invalid_request_error', q);
      }
    });

    await check('blocks B cached behind the router reach its view; the prefix is routed to B', async () => {
      const u = await complete(b.port, p1);  // straight to B: the router does not see it
      assert.equal(u.prompt_tokens_details.cached_tokens, 0);
      const s = await snapshotBlocks(b.port);
      assert.equal(s.length, 2, JSON.stringify(s));
      await waitFor(() => viewsAgree(router.port, 1, b.port), "the router's view of B = B's snapshot");
      const m0 = await metrics(router.port);
      const u2 = await complete(router.port, p1);
      const m1 = await metrics(router.port);
      assert.equal(u2.prompt_tokens_details.cached_tokens, 256);
      assert.equal(metric(m1, `fathom_router_replica_routed_total{replica="${urlB}"}`) -
        metric(m0, `fathom_router_replica_routed_total{replica="${urlB}"}`), 1);
      assert.equal(metric(m1, 'fathom_router_predicted_hit_blocks_total') -
        metric(m0, 'fathom_router_predicted_hit_blocks_total'), 2);
    });

    await check('the feed: a start line and stored events; a future id is a resync', async () => {
      const lines = await feedLines(b.port, 'since=0', (l) => l.length >= 3);
      assert.equal(lines[0].type, 'start');
      assert.match(lines[0].instance, /^[0-9a-f]{16}$/);
      assert.equal(lines[1].event_id, 1);
      assert.equal(lines[1].type, 'stored');
      assert.equal(lines[1].parent_block_hash, null);
      assert.ok(lines[1].block_hashes.every((h) => /^[0-9a-f]{16}$/.test(h)));
      const rs = await feedLines(b.port, 'since=999999', () => false);  // ends by itself
      assert.equal(rs.length, 1);
      assert.equal(rs[0].type, 'resync');
      assert.equal(rs[0].instance, lines[0].instance);
    });

    await check("an eviction on B: the router's view follows, the evicted prefix is no hit", async () => {
      const before = await snapshotBlocks(b.port);
      await complete(b.port, p2);
      const after = await snapshotBlocks(b.port);
      assert.ok(after.length <= 4, JSON.stringify(after));
      assert.ok(before.every((h) => !after.includes(h)), "p1's blocks were evicted");
      await waitFor(() => viewsAgree(router.port, 1, b.port), "the router's view of B = B's snapshot");
      const v = await routerView(router.port, 1);
      assert.ok(before.every((h) => !v.blocks.includes(h)));
      const a0 = await snapshotBlocks(a.port);
      assert.ok(before.every((h) => !a0.includes(h)), 'A never held p1');
      const m0 = await metrics(router.port);
      const u = await complete(router.port, p1);
      const m1 = await metrics(router.port);
      assert.equal(metric(m1, 'fathom_router_predicted_hit_blocks_total') -
        metric(m0, 'fathom_router_predicted_hit_blocks_total'), 0);
      assert.equal(u.prompt_tokens_details.cached_tokens, 0);
      const applied = metric(m1, `fathom_router_kv_events_applied_total{replica="${urlB}"}`);
      assert.ok(applied >= 3, `events applied for B: ${applied}`);
    });

    await check('B restarted: its view is dropped, then rebuilt from the new snapshot', async () => {
      const m0 = await metrics(router.port);
      const loads0 = metric(m0, `fathom_router_kv_snapshot_loads_total{replica="${urlB}"}`);
      const exited = new Promise((r) => b.proc.once('exit', r));
      b.proc.kill('SIGKILL');
      await exited;
      await waitFor(async () => (await routerView(router.port, 1)).index_blocks === 0,
        "B's view dropped");
      b = await startServer(fathom, ['--port', String(b.port), '--prefix-cache-mb', '3']);
      procs.push(b.proc);
      await complete(b.port, p1);
      await waitFor(async () => (await snapshotBlocks(b.port)).length === 2 &&
        viewsAgree(router.port, 1, b.port), "the router's view of the restarted B");
      const m1 = await metrics(router.port);
      assert.ok(metric(m1, `fathom_router_kv_snapshot_loads_total{replica="${urlB}"}`) > loads0);
      assert.equal(metric(m1, `fathom_router_kv_event_fed{replica="${urlB}"}`), 1);
      assert.equal(metric(m1, `fathom_router_index_blocks{replica="${urlB}"}`), 2);
      assert.equal(metric(m1, 'fathom_router_index_dropped_blocks_total'), 0);
    });

    await check('requests sent at once with a shared new prefix go to one replica and compute it once', async () => {
      // 3 blocks: a replica lacking them costs 3, more than the busy one's load can reach (2).
      const prefix = randomPrompt(21, 3 * 128);
      const m0 = await metrics(router.port);
      const usages = await Promise.all([0, 1, 2].map((i) => complete(router.port, prefix.concat(randomPrompt(30 + i, 9)))));
      const m1 = await metrics(router.port);
      const routed = [a.port, b.port].map((port) => {
        const name = `fathom_router_replica_routed_total{replica="http://127.0.0.1:${port}"}`;
        return metric(m1, name) - metric(m0, name);
      });
      assert.deepEqual([...routed].sort(), [0, 3], `routed to A, B: ${routed}`);
      // The first computes the prefix; the others wait for its blocks and resume from them.
      const cached = usages.map((u) => u.prompt_tokens_details.cached_tokens).sort((x, y) => x - y);
      assert.deepEqual(cached, [0, 384, 384]);
      await waitFor(async () => (await routerView(router.port, routed[0] === 3 ? 0 : 1)).in_flight_blocks === 0,
        'nothing left counted in flight');
    });
  } catch (e) {
    t.failures++;
    console.log('FAIL setup: ' + (e && e.stack || e));
  } finally {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
  }
  console.log(`${t.failures === 0 ? 'kv event tests passed' : 'kv event tests FAILED'}`);
  process.exit(t.failures === 0 ? 0 : 1);
})();
