// A Redis Cluster hit with the network's round-trip time in it: three redis-server masters on
// loopback, each behind a proxy that holds every chunk of bytes DELAY_MS milliseconds in each
// direction (the nodes announce the proxies' ports, so every command a client sends to a node
// pays the delay twice: a round trip of 2 x DELAY_MS). Loopback has no such delay and this
// machine no netem, hence the proxies.
//
// For each fathom binary given (interleaved, REPEAT rounds, a new prompt each round): a server
// with --kv-store-redis computes the prompt (cold, max_tokens 1) and writes its blocks; a second
// server with Redis only, and a third with an empty --kv-store-dir in front of Redis (the
// tiered store), which never saw the prompt, each ask for it: their TTFT, and the Redis round
// trips their hit took (fathom_kv_store_redis_round_trips_total). Prints one JSON line a run
// and a summary: the median of each binary's TTFTs, and their ratio to the first binary's.
//
// Usage: [DELAY_MS=1] [TOKENS=2048] [REPEAT=3] node bench/kv_store_redis_rtt.js FATHOM [FATHOM2 ...]
'use strict';
const { spawn, spawnSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const { startServer, randomPrompt, metrics, metric } = require('../tests/serve/start_server.js');

const binaries = process.argv.slice(2);
if (binaries.length === 0) throw new Error('usage: node bench/kv_store_redis_rtt.js FATHOM [FATHOM2 ...]');
const delay = Number(process.env.DELAY_MS ?? 1);
const N = Number(process.env.TOKENS ?? 2048);
const repeat = Number(process.env.REPEAT ?? 3);
// Redis on 17400-17402 (buses 27400-27402), the proxies on 17410-17412: below Linux's
// ephemeral range, away from the tests' ports.
const redisPorts = [17400, 17401, 17402];
const proxyPorts = [17410, 17411, 17412];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fathom_rtt_'));

// Forwards bytes between client and node, each chunk held `delay` ms (in order).
function proxy(listen, to) {
  const server = net.createServer((client) => {
    client.setNoDelay(true);
    const node = net.connect(to, '127.0.0.1');
    node.setNoDelay(true);
    const pipe = (from, into) => {
      from.on('data', (d) => setTimeout(() => into.destroyed || into.write(d), delay));
      from.on('close', () => setTimeout(() => into.destroy(), delay));
      from.on('error', () => {});
    };
    pipe(client, node);
    pipe(node, client);
  });
  server.listen(listen, '127.0.0.1');
  return server;
}

function cli(args) {
  return spawnSync('redis-cli', args, { encoding: 'utf8' }).stdout.trim();
}

async function startCluster() {
  const procs = [];
  for (let i = 0; i < 3; i++) {
    const d = path.join(dir, String(redisPorts[i]));
    fs.mkdirSync(d);
    procs.push(spawn('redis-server', ['--port', String(redisPorts[i]), '--bind', '127.0.0.1', '--dir', d,
      '--save', '', '--appendonly', 'no', '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
      '--cluster-announce-ip', '127.0.0.1', '--cluster-announce-port', String(proxyPorts[i]),
      '--cluster-announce-bus-port', String(redisPorts[i] + 10000)], { stdio: 'ignore' }));
  }
  for (const p of redisPorts)
    for (let i = 0; cli(['-p', String(p), 'PING']) !== 'PONG'; i++) {
      if (i > 100) throw new Error('redis-server on ' + p + ' did not start');
      await new Promise((r) => setTimeout(r, 50));
    }
  const ranges = [[0, 5460], [5461, 10922], [10923, 16383]];
  redisPorts.forEach((p, i) => cli(['-p', String(p), 'CLUSTER', 'ADDSLOTSRANGE', String(ranges[i][0]), String(ranges[i][1])]));
  for (const p of redisPorts.slice(1))
    cli(['-p', String(redisPorts[0]), 'CLUSTER', 'MEET', '127.0.0.1', String(p), String(p + 10000)]);
  for (let i = 0; !redisPorts.every((p) => /cluster_state:ok/.test(cli(['-p', String(p), 'CLUSTER', 'INFO']))); i++) {
    if (i > 200) throw new Error('the cluster did not become ok');
    await new Promise((r) => setTimeout(r, 50));
  }
  return procs;
}

async function withServer(fathom, args, fn) {
  const { proc, port } = await startServer(fathom, args);
  const base = `http://127.0.0.1:${port}`;
  try {
    return await fn({
      ask: async (prompt) => {
        const t0 = performance.now();
        const r = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0, ignore_eos: true }) });
        const j = await r.json();
        if (r.status !== 200) throw new Error(JSON.stringify(j));
        return { ms: performance.now() - t0, cached: j.usage.prompt_tokens_details.cached_tokens };
      },
      trips: async () => metric(await metrics(port), 'fathom_kv_store_redis_round_trips_total'),
    });
  } finally {
    proc.kill('SIGTERM');
    await new Promise((r) => proc.on('exit', r));
  }
}

async function hit(fathom, args, prompt) {
  return withServer(fathom, args, async (s) => {
    const t0 = await s.trips();
    const a = await s.ask(prompt);
    return { ms: Math.round(a.ms * 10) / 10, cached: a.cached, round_trips: (await s.trips()) - t0 };
  });
}

(async () => {
  const proxies = redisPorts.map((p, i) => proxy(proxyPorts[i], p));
  const procs = await startCluster();
  const redis = '--kv-store-redis=' + proxyPorts.map((p) => '127.0.0.1:' + p).join(',');
  const ttft = binaries.map(() => ({ redis: [], tiered: [] }));
  try {
    for (let round = 0; round < repeat; round++) {
      for (let b = 0; b < binaries.length; b++) {
        const prompt = randomPrompt(1 + round * 100 + b, N);
        await withServer(binaries[b], [redis], async (s) => {
          await s.ask(prompt);
        });
        await new Promise((r) => setTimeout(r, 500));  // the writer thread's queue drained
        const redisOnly = await hit(binaries[b], [redis], prompt);
        const d = fs.mkdtempSync(path.join(dir, 'disk_'));
        const tiered = await hit(binaries[b], [redis, '--kv-store-dir=' + d], prompt);
        ttft[b].redis.push(redisOnly.ms);
        ttft[b].tiered.push(tiered.ms);
        console.log(JSON.stringify({ binary: binaries[b], round, delay_ms: delay, tokens: N, redis: redisOnly, tiered }));
      }
    }
  } finally {
    procs.forEach((p) => p.kill('SIGTERM'));
    proxies.forEach((p) => p.close());
    await new Promise((r) => setTimeout(r, 300));
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const summary = binaries.map((bin, b) => ({ binary: bin, redis_ms: median(ttft[b].redis), tiered_ms: median(ttft[b].tiered),
    redis_ratio: median(ttft[b].redis) / median(ttft[0].redis), tiered_ratio: median(ttft[b].tiered) / median(ttft[0].tiered) }));
  console.log(JSON.stringify({ summary }));
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
