// End-to-end: caching, batching, chunking and scheduling are invisible in the output. The same
// 1,100-token prompt, greedy and seeded (temperature 1), must give the same tokens from
//   - the reference: no prefix cache, the whole prompt in one chunk, synchronous scheduling,
//     the request alone;
//   - the default server (asynchronous scheduling, 128-token chunks), cold and then warm
//     (a prefix-cache hit of 1,024 tokens: the window state comes from the block's side
//     object), alone and among 8 concurrent requests;
//   - a server with a small step budget (64-token chunks), synchronous scheduling and DSpark
//     speculative decoding (the demo model's draft stages; each step verifies 5 drafts).
// Usage: node invariance_test.js FATHOM NODE_MODULES
'use strict';
const { startServer, checker, randomPrompt } = require('./start_server.js');
const assert = require('assert');

const [fathom] = process.argv.slice(2);

const t = checker();
const check = t.check;

// A fixed pseudo-random prompt of 1,100 ids (xorshift; the demo model's vocabulary is 129,280);
// 520 with FATHOM_TEST_LIGHT=1 (the sanitizer build), still past the 128-token window.
const light = process.env.FATHOM_TEST_LIGHT === '1';
const promptLength = light ? 520 : 1100;
const cachedAtLeast = Math.floor(promptLength / 128) * 128;
const prompt = randomPrompt(12345, promptLength);
const requests = {
  greedy: { prompt, max_tokens: 24, temperature: 0, ignore_eos: true, return_token_ids: true },
  seeded: { prompt, max_tokens: 24, temperature: 1, seed: 1234, ignore_eos: true, return_token_ids: true },
};

async function withServer(args, fn) {
  const { proc, port } = await startServer(fathom, args);
  const base = `http://127.0.0.1:${port}`;
  const run = async (body) => {
    const r = await fetch(base + '/v1/completions', { method: 'POST',
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const j = await r.json();
    assert.equal(r.status, 200, JSON.stringify(j));
    return { ids: j.choices[0].token_ids.join(','), cached: j.usage.prompt_tokens_details.cached_tokens,
             text: j.choices[0].text, completion: j.usage.completion_tokens, finish: j.choices[0].finish_reason };
  };
  try {
    return await fn(run, base);
  } finally {
    proc.kill('SIGTERM');
    await new Promise((res) => proc.on('exit', res));
  }
}

// Eight other requests of different lengths, sharing the steps with the one under test.
function load(run, salt) {
  return Array.from({ length: 8 }, (_, i) => run({ prompt: prompt.slice(0, (light ? 80 : 200) + (light ? 40 : 97) * i).map((t) => (t + salt + i) % 128000),
    max_tokens: 16 + i, temperature: 0.7, ignore_eos: true, return_token_ids: true }));
}

(async () => {
  // With a stop string from the middle of the greedy text: the text ends before it and the
  // usage and token ids end at the token that completed it, speculative or not.
  const want = await withServer(['--no-prefix-cache', '--no-async-scheduling', '--max-step-tokens', '2048'],
    async (run) => {
      const greedy = await run(requests.greedy);
      const chars = [...greedy.text];
      requests.stopped = { ...requests.greedy, stop: [chars.slice(Math.floor(chars.length / 2), Math.floor(chars.length / 2) + 2).join('')] };
      return { greedy: greedy.ids, seeded: (await run(requests.seeded)).ids, stopped: await run(requests.stopped) };
    });
  console.log('reference: no cache, one chunk, synchronous, alone');

  await withServer([], async (run) => {
    for (const kind of ['greedy', 'seeded']) {
      await check(`default server, ${kind}: cold, warm, among 8`, async () => {
        const cold = await run(requests[kind]);
        assert.equal(cold.ids, want[kind], 'cold');
        const warm = await run(requests[kind]);
        assert.ok(warm.cached >= cachedAtLeast, 'cached ' + warm.cached);
        assert.equal(warm.ids, want[kind], 'warm');
        const [busy] = await Promise.all([run(requests[kind]), ...load(run, kind.length)]);
        assert.equal(busy.ids, want[kind], 'among 8');
      });
    }
  });

  await withServer(['--no-async-scheduling', '--max-step-tokens', '64', '--speculative', 'dspark'], async (run, base) => {
    for (const kind of ['greedy', 'seeded']) {
      await check(`64-token chunks, synchronous, speculative, ${kind}: cold, among 8, warm`, async () => {
        const [busy] = await Promise.all([run(requests[kind]), ...load(run, 7)]);
        assert.equal(busy.ids, want[kind], 'cold among 8');
        const warm = await run(requests[kind]);
        assert.ok(warm.cached >= cachedAtLeast, 'cached ' + warm.cached);
        assert.equal(warm.ids, want[kind], 'warm');
      });
    }
    await check('speculative, a stop string: same text, usage and token ids', async () => {
      const got = await run(requests.stopped);
      for (const k of ['text', 'completion', 'ids', 'finish']) assert.equal(got[k], want.stopped[k], k);
      assert.equal(got.finish, 'stop');
    });
    await check('the speculative server verified drafts', async () => {
      const m = await (await fetch(base + '/metrics')).text();
      const steps = Number(m.match(/^fathom_spec_steps_total (\d+)/m)[1]);
      const verified = Number(m.match(/^fathom_spec_verified_tokens_total (\d+)/m)[1]);
      assert.ok(steps > 0 && verified >= steps, `steps ${steps}, verified ${verified}`);
    });
  });
  console.log(`serve invariance: ${t.failures} failures`);
  process.exit(t.failures ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
