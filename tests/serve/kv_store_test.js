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
//     corrupt objects.
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

  fs.rmSync(dir, { recursive: true, force: true });
  console.log(t.failures === 0 ? 'PASS' : `FAIL: ${t.failures} check(s)`);
  process.exit(t.failures === 0 ? 0 : 1);
})().catch((e) => {
  console.log('FAIL: ' + (e && e.stack || e));
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(1);
});
