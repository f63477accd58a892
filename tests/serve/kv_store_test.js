// End to end: the KV store's disk tier makes a prefix-cache hit survive a restart.
//   - the truth: a server with no prefix cache and no store answers a long prompt, greedy and
//     seeded (temperature 1);
//   - a server with --kv-store-dir answers it cold, is stopped (SIGTERM) and restarted on the
//     same directory: each answer after a restart reports cached tokens >= the prompt rounded
//     down to 128 tokens less one block, and equals the truth (greedy and seeded, each from
//     the disk, one restart each), while a request of another tenant (cache_salt) gets no
//     hit;
//   - the files are then damaged (bytes flipped, truncated, one object's bytes under another's
//     name): the answer after a restart still equals the truth, and /metrics counts the
//     corrupt objects;
//   - retention classes (--retention agent=3s,chat=1h, another directory): a prompt sent with
//     retention "agent", one with "chat" and a Messages prompt whose cache_control (ttl 5m)
//     maps onto chat (over its API key's default class, agent) are answered, the server is stopped, more than 3 s pass, and a server on
//     the same directory gets no cached tokens for the agent prompt (expired on disk, counted)
//     and a hit for the other two, every answer identical to its cold one; a bad `retention`
//     or `cache_control` is a 400 in each protocol's error shape.
// FATHOM_TEST_LIGHT=1 (the sanitizer build) uses a shorter prompt.
// Usage: node kv_store_test.js FATHOM NODE_MODULES
'use strict';
const { startServer, checker, randomPrompt } = require('./start_server.js');
const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');

const [fathom] = process.argv.slice(2);
const t = checker();
const check = t.check;

const light = process.env.FATHOM_TEST_LIGHT === '1';
const N = light ? 640 : 2048;
const prompt = randomPrompt(4242, N);
const requests = {
  greedy: { prompt, max_tokens: 16, temperature: 0, ignore_eos: true, return_token_ids: true },
  seeded: { prompt, max_tokens: 16, temperature: 1, seed: 77, ignore_eos: true, return_token_ids: true },
};
const minCached = Math.floor(N / 128) * 128 - 128;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fathom-kv-store-'));

async function withServer(args, fn) {
  const { proc, port } = await startServer(fathom, args);
  const base = `http://127.0.0.1:${port}`;
  const run = async (body) => {
    const r = await fetch(base + '/v1/completions', { method: 'POST',
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const j = await r.json();
    assert.equal(r.status, 200, JSON.stringify(j));
    return { ids: j.choices[0].token_ids.join(','), cached: j.usage.prompt_tokens_details.cached_tokens };
  };
  const metric = async (name) => {
    const text = await (await fetch(base + '/metrics')).text();
    // The engine's counters have no label; each tier's have tier="disk".
    const m = text.match(new RegExp('^' + name + '(\\{tier="disk"\\})? (\\d+)$', 'm'));
    assert.ok(m, name + ' missing from /metrics');
    return Number(m[2]);
  };
  try {
    return await fn(run, metric);
  } finally {
    proc.kill('SIGTERM');
    await new Promise((res) => proc.on('exit', res));
  }
}

// DIR/class-<class>/<2 hex>/<32 hex>.fkv
function objectFiles() {
  const out = [];
  for (const cls of fs.readdirSync(dir)) {
    if (!cls.startsWith('class-')) continue;
    for (const shard of fs.readdirSync(path.join(dir, cls))) {
      const p = path.join(dir, cls, shard);
      if (shard.length !== 2 || !fs.statSync(p).isDirectory()) continue;
      for (const f of fs.readdirSync(p)) if (f.endsWith('.fkv')) out.push(path.join(p, f));
    }
  }
  return out.sort();
}

async function post(base, route, body, key = 'k-chat') {
  const r = await fetch(base + route, { method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + key }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

// The disk tier's bytes written for `cls`, once its write queue is empty.
async function writtenBytes(base, cls) {
  for (let i = 0; ; i++) {
    const text = await (await fetch(base + '/metrics')).text();
    const m = text.match(new RegExp(`^fathom_kv_store_class_written_bytes_total\\{tier="disk",class="${cls}"\\} (\\d+)$`, 'm'));
    if (/^fathom_kv_store_queued_bytes\{tier="disk"\} 0$/m.test(text) && m) return Number(m[1]);
    if (i > 200) throw new Error('the disk writes did not finish:\n' + text);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// The Prometheus histogram `name` for the disk tier and class `cls`: its buckets must rise to
// +Inf, which equals its count; returns the count.
function histogramCount(text, name, cls) {
  const labels = `tier="disk",class="${cls}"`;
  const buckets = [...text.matchAll(new RegExp(`^${name}_bucket\\{${labels},le="([^"]+)"\\} (\\d+)$`, 'gm'))];
  assert.ok(buckets.length > 1, `${name} has no buckets for ${cls}`);
  for (let i = 1; i < buckets.length; i++) {
    assert.ok(Number(buckets[i][2]) >= Number(buckets[i - 1][2]), `${name} buckets fall`);
    assert.ok(buckets[i][1] === '+Inf' || Number(buckets[i][1]) > Number(buckets[i - 1][1]), `${name} bounds`);
  }
  assert.equal(buckets[buckets.length - 1][1], '+Inf');
  const count = text.match(new RegExp(`^${name}_count\\{${labels}\\} (\\d+)$`, 'm'));
  assert.ok(count && text.match(new RegExp(`^${name}_sum\\{${labels}\\} \\S+$`, 'm')), `${name} sum/count`);
  assert.equal(Number(buckets[buckets.length - 1][2]), Number(count[1]));
  return Number(count[1]);
}

// Retention classes end to end (see the header).
async function retentionChecks() {
  const rdir = fs.mkdtempSync(path.join(os.tmpdir(), 'fathom-kv-retention-'));
  // Two API keys; requests made with k-agent default to the agent class.
  const args = ['--kv-store-dir', rdir, '--retention', 'agent=3s,chat=1h', '--api-key', 'k-chat',
    '--api-key', 'k-agent', '--api-key-retention', 'k-agent=agent'];
  const R = 384;  // three blocks: two can be cached (the last token always runs)
  const agentPrompt = randomPrompt(1111, R), chatPrompt = randomPrompt(2222, R);
  const completion = (p, retention) => ({ prompt: p, max_tokens: 8, temperature: 0, ignore_eos: true,
    return_token_ids: true, retention });
  // ~500 tokens of text, sent with the key whose default class is agent; the system block's
  // cache_control (5 minutes) overrides that: it maps onto chat (1 h), the smallest class
  // that keeps it that long (agent keeps 3 s).
  const words = randomPrompt(3333, 200).map((x) => 'w' + (x % 9973)).join(' ');
  const messages = { model: 'fathom-demo', max_tokens: 8, temperature: 0,
    thinking: { type: 'disabled' },
    system: [{ type: 'text', text: 'Notes: ' + words, cache_control: { type: 'ephemeral', ttl: '5m' } }],
    messages: [{ role: 'user', content: 'Summarise.' }] };
  const cold = {};
  try {
    await check('retention: agent, chat and cache_control prompts answered cold; written in their classes', async () => {
      const { proc, port } = await startServer(fathom, args);
      const base = `http://127.0.0.1:${port}`;
      try {
        const m = await post(base, '/v1/messages', messages, 'k-agent');
        assert.equal(m.status, 200, JSON.stringify(m.json));
        assert.equal(m.json.usage.cache_read_input_tokens, 0);
        cold.messages = JSON.stringify(m.json.content);
        // The agent prompt last: its objects are on disk, unexpired, when this server stops
        // (it removes nothing after its last request), so the next one finds them expired.
        for (const [name, p, r] of [['chat', chatPrompt, 'chat'], ['agent', agentPrompt, 'agent']]) {
          const a = await post(base, '/v1/completions', completion(p, r));
          assert.equal(a.status, 200, JSON.stringify(a.json));
          assert.equal(a.json.usage.prompt_tokens_details.cached_tokens, 0);
          cold[name] = a.json.choices[0].token_ids.join(',');
        }
        assert.ok(await writtenBytes(base, 'agent') > 0 && await writtenBytes(base, 'chat') > 0);
        // Each object written is timed in its class; each admission looked in the store
        // (reads by the asking request's class: the agent prompt's misses are agent reads).
        const text = await (await fetch(base + '/metrics')).text();
        assert.ok(histogramCount(text, 'fathom_kv_store_write_seconds', 'agent') >= 2);
        assert.ok(histogramCount(text, 'fathom_kv_store_write_seconds', 'chat') >= 2);
        assert.ok(histogramCount(text, 'fathom_kv_store_read_seconds', 'agent') >= 1);
      } finally {
        proc.kill('SIGTERM');
        await new Promise((res) => proc.on('exit', res));
      }
      const classes = fs.readdirSync(rdir).filter((d) => d.startsWith('class-')).sort();
      assert.deepEqual(classes, ['class-agent', 'class-chat']);
      const agentFiles = fs.readdirSync(path.join(rdir, 'class-agent'), { recursive: true })
        .filter((f) => f.endsWith('.fkv'));
      assert.ok(agentFiles.length >= 2, `${agentFiles.length} agent objects`);
    });
    await new Promise((r) => setTimeout(r, 3500));  // the agent objects' 3 s run out
    await check('retention: after 3.5 s and a restart the agent prompt misses, chat and cache_control hit, identical', async () => {
      const { proc, port } = await startServer(fathom, args);
      const base = `http://127.0.0.1:${port}`;
      try {
        const a = await post(base, '/v1/completions', completion(agentPrompt, 'agent'));
        assert.equal(a.status, 200, JSON.stringify(a.json));
        assert.equal(a.json.usage.prompt_tokens_details.cached_tokens, 0, 'the agent prompt hit');
        assert.equal(a.json.choices[0].token_ids.join(','), cold.agent);
        const c = await post(base, '/v1/completions', completion(chatPrompt, 'chat'));
        assert.equal(c.status, 200, JSON.stringify(c.json));
        assert.ok(c.json.usage.prompt_tokens_details.cached_tokens >= 256,
          `chat prompt: cached ${c.json.usage.prompt_tokens_details.cached_tokens}`);
        assert.equal(c.json.choices[0].token_ids.join(','), cold.chat);
        const m = await post(base, '/v1/messages', messages, 'k-agent');
        assert.equal(m.status, 200, JSON.stringify(m.json));
        assert.ok(m.json.usage.cache_read_input_tokens >= 256, `messages: cached ${m.json.usage.cache_read_input_tokens}`);
        assert.equal(JSON.stringify(m.json.content), cold.messages);
        const text = await (await fetch(base + '/metrics')).text();
        const exp = text.match(/^fathom_kv_store_class_expirations_total\{tier="disk",class="agent"\} (\d+)$/m);
        assert.ok(exp && Number(exp[1]) >= 2, 'agent expirations: ' + (exp && exp[1]));
        assert.match(text, /^fathom_kv_store_class_expirations_total\{tier="disk",class="chat"\} 0$/m);
        assert.match(text, /^fathom_kv_store_expirations_total\{tier="disk"\} [1-9]/m);
        const hits = text.match(/^fathom_kv_store_class_hits_total\{tier="disk",class="chat"\} (\d+)$/m);
        assert.ok(hits && Number(hits[1]) >= 4, 'chat hits: ' + (hits && hits[1]));

        // An API key's default class: k-agent's request writes agent objects, none for chat.
        const agent0 = await writtenBytes(base, 'agent'), chat0 = await writtenBytes(base, 'chat');
        const k = await post(base, '/v1/completions', completion(randomPrompt(4444, 256)), 'k-agent');
        assert.equal(k.status, 200, JSON.stringify(k.json));
        assert.ok(await writtenBytes(base, 'agent') > agent0, 'k-agent wrote no agent object');
        assert.equal(await writtenBytes(base, 'chat'), chat0);

        // Bad values: a 400 naming the field, in each protocol's error shape.
        const openai = async (route, body, param) => {
          const r = await post(base, route, body);
          assert.equal(r.status, 400, route + ' ' + JSON.stringify(body));
          assert.equal(r.json.error.type, 'invalid_request_error');
          assert.equal(r.json.error.param, param, JSON.stringify(r.json));
          assert.match(r.json.error.message, new RegExp(param));
        };
        const chatBody = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 };
        for (const bad of ['gold', 5, '', ['chat']]) {
          await openai('/v1/chat/completions', { ...chatBody, retention: bad }, 'retention');
          await openai('/v1/responses', { input: 'hi', max_output_tokens: 16, retention: bad }, 'retention');
          await openai('/v1/completions', { prompt: 'hi', max_tokens: 1, retention: bad }, 'retention');
        }
        const anthropic = async (body, needle) => {
          const r = await post(base, '/v1/messages', body);
          assert.equal(r.status, 400, JSON.stringify(body));
          assert.equal(r.json.type, 'error');
          assert.equal(r.json.error.type, 'invalid_request_error');
          assert.ok(r.json.error.message.includes(needle), r.json.error.message);
        };
        const small = { max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] };
        await anthropic({ ...small, retention: 'gold' }, 'retention');
        await anthropic({ ...small, retention: 7 }, 'retention');
        await anthropic({ ...small, cache_control: { type: 'persistent' } }, 'cache_control.type');
        await anthropic({ ...small, cache_control: 'ephemeral' }, 'cache_control');
        await anthropic({ ...small, system: [{ type: 'text', text: 's', cache_control: { type: 'ephemeral', ttl: '10m' } }] },
          'system.0.cache_control.ttl');
        await anthropic({ ...small, messages: [{ role: 'user', content: [{ type: 'text', text: 'hi',
          cache_control: { type: 'ephemeral', ttl: 3600 } }] }] }, 'messages.0.content.0.cache_control.ttl');
        await anthropic({ ...small, tools: [{ name: 't', input_schema: { type: 'object' }, cache_control: [] }] },
          'tools.0.cache_control');
        // Valid ones pass: both ttls, and `retention` naming a class beside cache_control.
        for (const body of [{ ...small, cache_control: { type: 'ephemeral' } },
          { ...small, cache_control: { type: 'ephemeral', ttl: '1h' }, retention: 'agent' }]) {
          const r = await post(base, '/v1/messages', body);
          assert.equal(r.status, 200, JSON.stringify(r.json));
        }
      } finally {
        proc.kill('SIGTERM');
        await new Promise((res) => proc.on('exit', res));
      }
    });
    await check('retention: a bad --retention or --api-key-retention is a startup error (exit 2)', async () => {
      const { spawnSync } = require('child_process');
      for (const bad of [['--retention', 'agent=3'], ['--retention', 'Agent=3d'], ['--retention', 'a=1d,a=2d'],
        ['--api-key', 'k', '--api-key-retention', 'k=gold'], ['--api-key-retention', 'other=chat']]) {
        const r = spawnSync(fathom, ['serve', '--port', '0', ...bad], { encoding: 'utf8', timeout: 60000 });
        assert.equal(r.status, 2, bad.join(' ') + ': ' + r.stderr);
        assert.match(r.stderr, /retention/);
      }
    });
  } finally {
    fs.rmSync(rdir, { recursive: true, force: true });
  }
}

(async () => {
  const store = ['--kv-store-dir', dir];
  const want = await withServer(['--no-prefix-cache'], async (run) =>
    ({ greedy: (await run(requests.greedy)).ids, seeded: (await run(requests.seeded)).ids }));
  console.log(`truth: ${N}-token prompt, no prefix cache, no store`);

  await check('cold with a store: the truth, nothing cached, blocks written', () => withServer(store, async (run, metric) => {
    const a = await run(requests.greedy);
    assert.equal(a.ids, want.greedy);
    assert.equal(a.cached, 0);
    assert.ok(await metric('fathom_kv_store_writes_total') + await metric('fathom_kv_store_queued_bytes') > 0);
  }));
  const files = objectFiles();
  await check('the store directory holds the blocks and window objects', async () => {
    assert.ok(files.length >= Math.floor(N / 128), `${files.length} files`);
  });

  for (const kind of ['greedy', 'seeded']) {
    await check(`after a restart (${kind}): a hit from disk, identical`, () => withServer(store, async (run, metric) => {
      const a = await run(requests[kind]);
      assert.ok(a.cached >= minCached, `cached ${a.cached} < ${minCached}`);
      assert.equal(a.ids, want[kind]);
      assert.ok(await metric('fathom_kv_store_hits_total') >= minCached / 128);
      assert.ok(await metric('fathom_kv_store_read_bytes_total') > 0);
      assert.equal(await metric('fathom_kv_store_corrupt_total'), 0);
      if (kind === 'seeded') {
        // Another tenant (vLLM's cache_salt; OpenAI's user works the same) shares nothing: a
        // 512-token prefix of the prompt hits for its own tenant (3 blocks: the last token
        // always runs), never for another.
        const head = { ...requests.greedy, prompt: prompt.slice(0, 512), max_tokens: 2 };
        await run(head);
        assert.equal((await run(head)).cached, 384);
        assert.equal((await run({ ...head, cache_salt: 'tenant-b' })).cached, 0);
        assert.equal((await run({ ...head, cache_salt: 'tenant-b' })).cached, 384);
      }
    }));
  }

  await check('damaged files: detected, counted, recomputed, identical', async () => {
    const f = objectFiles();
    assert.ok(f.length >= 4);
    const originals = f.map((p) => fs.readFileSync(p));
    f.forEach((p, i) => {
      const b = Buffer.from(originals[i]);
      if (i % 3 === 0) {
        b[b.length >> 1] ^= 0x40;  // a flipped bit in the payload
        b[20] ^= 0x01;             // and in the header's fingerprint
        fs.writeFileSync(p, b);
      } else if (i % 3 === 1) {
        fs.writeFileSync(p, b.subarray(0, b.length - 100));  // truncated
      } else {
        fs.writeFileSync(p, originals[(i + 1) % f.length]);  // another object's valid bytes
      }
    });
    await withServer(store, async (run, metric) => {
      for (const kind of ['greedy', 'seeded']) {
        const a = await run(requests[kind]);
        assert.equal(a.ids, want[kind], kind);
      }
      assert.ok(await metric('fathom_kv_store_corrupt_total') >= 1);
    });
  });

  await retentionChecks();

  fs.rmSync(dir, { recursive: true, force: true });
  console.log(t.failures === 0 ? 'PASS' : `FAIL: ${t.failures} check(s)`);
  process.exit(t.failures === 0 ? 0 : 1);
})().catch((e) => {
  console.log('FAIL: ' + (e && e.stack || e));
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(1);
});
