// End to end: the KV store's Redis Cluster tier shares prefix blocks between replicas.
//   - the test starts a Redis Cluster of three masters on loopback (redis-server in cluster
//     mode, `redis-cli --cluster create`);
//   - the truth: a server with no prefix cache and no store;
//   - server A (--kv-store-redis) answers a long prompt cold; 4,000 slots then move (with
//     their keys) from one master to another, so server B, started before on another port
//     with the same --kv-store-redis, has a stale slot map: it follows MOVED and gets a hit
//     (cached tokens >= the prompt rounded down to 128 less a block) with the identical
//     answer;
//   - retention: the objects A wrote for a request of the default class (chat) have a PTTL of
//     about 7 days; those of a prompt sent with retention "agent" about 3 days; after their
//     PTTLs are cut to 10 minutes, B's hit (a chat request) refreshes the objects it read to
//     about 7 days again;
//   - pipelined gets: on a longer prompt (A cold, then B), B's hit of every block reads them
//     with fewer Redis round trips (fathom_kv_store_redis_round_trips_total, counted by the
//     client for every request it sends and waits for) than blocks, identically;
//   - the objects in Redis are damaged (bytes overwritten, truncated, replaced): a fresh
//     server still gives the identical answer and counts the corrupt objects;
//   - one master is killed: every request to both servers still completes, identically.
// FATHOM_TEST_LIGHT=1 (the sanitizer build) uses a shorter prompt.
// Usage: node kv_store_redis_test.js FATHOM NODE_MODULES
'use strict';
const { startServer, checker, randomPrompt } = require('./start_server.js');
const assert = require('assert');
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const [fathom] = process.argv.slice(2);
const t = checker();
const check = t.check;

const light = process.env.FATHOM_TEST_LIGHT === '1';
const N = light ? 640 : 1024;
const makePrompt = (seed) => randomPrompt(seed, N);
// The pipelining check's prompt: enough blocks that one round trip a block would show.
const NLONG = light ? 1536 : 2048;
const prompts = { one: makePrompt(31337), two: makePrompt(2718), long: randomPrompt(4242, NLONG),
                  agent: makePrompt(1618) };
const body = (p) => ({ prompt: p, max_tokens: 12, temperature: 0, ignore_eos: true, return_token_ids: true });
const minCached = Math.floor(N / 128) * 128 - 128;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fathom-redis-'));
// Below Linux's ephemeral range (32768 up), cluster bus ports (+10000) included: a client
// socket in TIME_WAIT there (any test's connections leave hundreds) would block the bind.
const base = 17000 + (process.pid % 1000) * 3;
const ports = [base, base + 1, base + 2];
const redis = [];

function redisCli(args) {
  return execFileSync('redis-cli', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

async function startCluster() {
  for (const p of ports) {
    const d = path.join(dir, String(p));
    fs.mkdirSync(d);
    const proc = spawn('redis-server', ['--port', String(p), '--bind', '127.0.0.1', '--dir', d,
      '--save', '', '--appendonly', 'no', '--cluster-enabled', 'yes',
      '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'],
      { stdio: 'ignore' });
    redis.push(proc);
  }
  for (const p of ports) {
    for (let i = 0; ; i++) {
      try { if (redisCli(['-p', String(p), 'PING']).trim() === 'PONG') break; } catch (e) { /* not yet */ }
      if (i > 100) throw new Error('redis-server on ' + p + ' did not start');
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  redisCli(['--cluster', 'create', ...ports.map((p) => '127.0.0.1:' + p), '--cluster-replicas', '0', '--cluster-yes']);
  for (let i = 0; ; i++) {
    const ok = ports.every((p) => /cluster_state:ok/.test(redisCli(['-p', String(p), 'CLUSTER', 'INFO'])));
    if (ok) break;
    if (i > 200) throw new Error('the cluster did not become ok');
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function stopRedis() {
  for (const proc of redis) {
    if (proc.exitCode !== null || proc.signalCode !== null) continue;
    proc.kill('SIGTERM');
    await new Promise((res) => proc.on('exit', res));
  }
}

async function server(args) {
  const { proc, port } = await startServer(fathom, args);
  const url = `http://127.0.0.1:${port}`;
  const s = {
    proc,
    port,
    run: async (b) => {
      const r = await fetch(url + '/v1/completions', { method: 'POST',
        headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(b) });
      const j = await r.json();
      assert.equal(r.status, 200, JSON.stringify(j));
      return { ids: j.choices[0].token_ids.join(','), cached: j.usage.prompt_tokens_details.cached_tokens };
    },
    metric: async (name, tier) => {
      const text = await (await fetch(url + '/metrics')).text();
      const m = text.match(new RegExp('^' + name + (tier ? `\\{tier="${tier}"\\}` : '') + ' (\\d+)$', 'm'));
      assert.ok(m, name + ' missing from /metrics');
      return Number(m[1]);
    },
    stop: async () => {
      proc.kill('SIGTERM');
      await new Promise((res) => proc.on('exit', res));
    },
  };
  return s;
}

// Every object key in the cluster with its PTTL (ms), from each master that answers.
function ttls() {
  const out = new Map();
  for (const p of ports) {
    let keys;
    try { keys = redisCli(['-p', String(p), '--scan', '--pattern', 'fkv:*']).split('\n').filter((k) => k); } catch (e) { continue; }
    for (const k of keys) out.set(k, Number(redisCli(['-p', String(p), 'PTTL', k]).trim()));
  }
  return out;
}
function portOf(key) {
  for (const p of ports) if (redisCli(['-p', String(p), 'EXISTS', key]).trim() === '1') return p;
  return null;
}
const DAY = 86400e3;
const about = (ms, days) => ms > days * DAY - 600e3 && ms <= days * DAY;

// Waits until the server's Redis writes are done.
async function drained(s) {
  for (let i = 0; i < 200; i++) {
    if (await s.metric('fathom_kv_store_queued_bytes', 'redis') === 0 &&
        await s.metric('fathom_kv_store_writes_total', 'redis') > 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the Redis writes did not finish');
}

(async () => {
  const servers = [];
  try {
    const ref = await server(['--no-prefix-cache']);
    const want = { one: (await ref.run(body(prompts.one))).ids, two: (await ref.run(body(prompts.two))).ids,
      long: (await ref.run(body(prompts.long))).ids };
    await ref.stop();
    console.log(`truth: ${N}-token prompts, no prefix cache, no store`);

    await startCluster();
    console.log(`redis cluster: 3 masters on ports ${ports.join(', ')}`);
    const nodes = ['--kv-store-redis', ports.map((p) => '127.0.0.1:' + p).join(',')];
    const a = await server(nodes);
    servers.push(a);
    const b = await server(nodes);
    servers.push(b);

    await check('server A: cold, the truth, blocks written to Redis', async () => {
      const r = await a.run(body(prompts.one));
      assert.equal(r.ids, want.one);
      assert.equal(r.cached, 0);
      await drained(a);
    });
    let chatKeys = [];
    await check('retention in Redis: chat objects live ~7 d, agent objects ~3 d (PX on write)', async () => {
      const before = ttls();
      chatKeys = [...before.keys()];
      assert.ok(before.size >= Math.floor(N / 128), `${before.size} objects`);
      for (const [k, ms] of before) assert.ok(about(ms, 7), `${k}: PTTL ${ms}`);
      const r = await a.run({ ...body(prompts.agent), retention: 'agent' });
      assert.equal(r.cached, 0);
      for (let i = 0; i < 100 && ttls().size < before.size + Math.floor(N / 128); i++)
        await new Promise((res) => setTimeout(res, 50));
      const added = [...ttls()].filter(([k]) => !before.has(k));
      assert.ok(added.length >= Math.floor(N / 128), `${added.length} agent objects`);
      for (const [k, ms] of added) assert.ok(about(ms, 3), `${k}: PTTL ${ms}`);
      const text = await (await fetch(`http://127.0.0.1:${a.port}/metrics`)).text();
      assert.match(text, /^fathom_kv_store_class_written_bytes_total\{tier="redis",class="agent"\} [1-9]/m);
      assert.match(text, /^fathom_kv_store_class_written_bytes_total\{tier="redis",class="chat"\} [1-9]/m);
    });
    await check('slots moved between masters (keys migrated): B follows MOVED', async () => {
      const id = (p) => redisCli(['-p', String(p), 'CLUSTER', 'MYID']).trim();
      // Most of the first master's slots, with their keys, to the second; B's slot map is stale.
      redisCli(['--cluster', 'reshard', '127.0.0.1:' + ports[0], '--cluster-from', id(ports[0]),
        '--cluster-to', id(ports[1]), '--cluster-slots', '4000', '--cluster-yes']);
      for (let i = 0; ; i++) {
        const ok = ports.every((p) => /cluster_state:ok/.test(redisCli(['-p', String(p), 'CLUSTER', 'INFO'])));
        if (ok) break;
        if (i > 200) throw new Error('the cluster did not settle after the reshard');
        await new Promise((r) => setTimeout(r, 50));
      }
    });
    await check('server B: a hit from Redis, identical; the hit refreshes the PTTLs', async () => {
      // The chat prompt's objects get 10 minutes left; the ones B reads get ~7 days again.
      for (const k of chatKeys) redisCli(['-p', String(portOf(k)), 'PEXPIRE', k, '600000']);
      const r = await b.run(body(prompts.one));
      const now = ttls();
      const refreshed = chatKeys.filter((k) => about(now.get(k), 7)).length;
      assert.ok(refreshed >= minCached / 128, `${refreshed} objects refreshed`);
      assert.ok(chatKeys.every((k) => about(now.get(k), 7) || now.get(k) <= 600000), 'a PTTL neither cut nor refreshed');
      assert.ok(r.cached >= minCached, `cached ${r.cached} < ${minCached}`);
      assert.equal(r.ids, want.one);
      assert.ok(await b.metric('fathom_kv_store_hits_total') >= minCached / 128);
      assert.equal(await b.metric('fathom_kv_store_corrupt_total'), 0);
      assert.ok(await b.metric('fathom_kv_store_redirects_total', 'redis') > 0, 'no MOVED followed');
    });
    await check('pipelined gets: a multi-block hit takes fewer Redis round trips than blocks', async () => {
      const r0 = await a.run(body(prompts.long));
      assert.equal(r0.ids, want.long);
      await drained(a);
      const trips0 = await b.metric('fathom_kv_store_redis_round_trips_total');
      const hits0 = await b.metric('fathom_kv_store_hits_total');
      const pre0 = await b.metric('fathom_kv_store_prefetched_blocks_total');
      const r = await b.run(body(prompts.long));
      const trips = await b.metric('fathom_kv_store_redis_round_trips_total') - trips0;
      const blocks = await b.metric('fathom_kv_store_hits_total') - hits0;
      // On an idle server the request may be admitted before or while its prefetch reads
      // (engine_tests' EngineKvStore.AQueuedRequestsBlocksAreReadWhileItWaits checks a queued one).
      const pre = await b.metric('fathom_kv_store_prefetched_blocks_total') - pre0;
      assert.ok(pre >= 0 && pre <= blocks, `${pre} prefetched of ${blocks}`);
      assert.equal(r.ids, want.long);
      const wantBlocks = Math.floor((NLONG - 1) / 128);
      assert.equal(blocks, wantBlocks, `${blocks} blocks read from Redis`);
      assert.equal(r.cached, wantBlocks * 128);
      assert.ok(trips < blocks, `${trips} round trips for ${blocks} blocks`);
      console.log(`  ${blocks} blocks from Redis in ${trips} round trips (the request's reads and writes' checks), ${pre} prefetched`);
    });
    await check('damaged objects in Redis: detected, counted, recomputed, identical', async () => {
      let i = 0;
      for (const p of ports) {
        const keys = redisCli(['-p', String(p), '--scan', '--pattern', 'fkv:*']).split('\n').filter((k) => k);
        for (const k of keys) {
          if (i % 3 === 0) redisCli(['-p', String(p), 'SETRANGE', k, '100', 'garbage']);
          else if (i % 3 === 1) redisCli(['-p', String(p), 'SET', k, 'FATHOMKV truncated']);
          else redisCli(['-p', String(p), 'SETRANGE', k, '20', '\x01']);  // the fingerprint
          i++;
        }
      }
      assert.ok(i >= Math.floor(N / 128), `${i} objects in Redis`);
      const c = await server(nodes);
      servers.push(c);
      const r = await c.run(body(prompts.one));
      assert.equal(r.ids, want.one);
      assert.ok(await c.metric('fathom_kv_store_corrupt_total') >= 1);
    });
    await check('one master killed: every request completes, identically', async () => {
      redis[1].kill('SIGKILL');
      await new Promise((res) => redis[1].on('exit', res));
      // One request at a time: the point is the dead master, not batching.
      const results = [];
      for (const [srv, p] of [[a, prompts.two], [b, prompts.two], [a, prompts.one], [b, prompts.one]])
        results.push(await srv.run(body(p)));
      assert.equal(results[0].ids, want.two);
      assert.equal(results[1].ids, want.two);
      assert.equal(results[2].ids, want.one);
      assert.equal(results[3].ids, want.one);
      const d = await server(nodes);
      servers.push(d);
      assert.equal((await d.run(body(prompts.two))).ids, want.two);
    });
  } catch (e) {
    t.failures++;
    console.log('FAIL: ' + (e && e.stack || e));
  } finally {
    for (const s of servers) await s.stop();
    await stopRedis();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  console.log(t.failures === 0 ? 'PASS' : `FAIL: ${t.failures} check(s)`);
  process.exit(t.failures === 0 ? 0 : 1);
})();
