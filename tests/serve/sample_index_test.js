// End-to-end: Fathom's `sample_index` on /v1/completions, against independent truth — the
// engine's own n-sample run. A seeded n = 3 request gives three choices; each choice i, cut
// after k tokens and sent back as `n: 1, sample_index: i, resume_output_ids: <first k>` with
// the same seed, must stream exactly choice i's remaining tokens (what `fathom router` relies
// on to continue one choice of an n > 1 request on another replica). Without sample_index the
// continuation of choice 1 is choice 0's random numbers: it must differ. Misuse is a 400 in
// OpenAI's error shape naming the field.
// Usage: node sample_index_test.js FATHOM NODE_MODULES
'use strict';
const assert = require('assert');
const { startServer, checker } = require('./start_server.js');

const [fathom] = process.argv.slice(2);
const t = checker();
const check = t.check;

const N = 3;
const MAX_TOKENS = 24;
const CUTS = [5, 13];
const base = { model: 'fathom-demo', prompt: [0, 17, 2024, 999, 31337], max_tokens: MAX_TOKENS,
               temperature: 1, seed: 4242, ignore_eos: true, return_token_ids: true };

// A streamed completion's generated ids (choice 0) and its finish reason; throws on an error
// status or an error event.
async function streamed(post, body) {
  const r = await post('/v1/completions', { ...body, stream: true });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  const ids = [];
  let finish = null, done = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    const data = line.slice(6);
    if (data === '[DONE]') { done = true; continue; }
    const ev = JSON.parse(data);
    assert.ok(!ev.error, data);
    for (const c of ev.choices || []) {
      assert.equal(c.index, 0, data);
      if (c.token_ids) ids.push(...c.token_ids);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(done, 'no [DONE]: ' + text);
  return { ids, finish };
}

(async () => {
  const { proc, port } = await startServer(fathom, []);
  const url = `http://127.0.0.1:${port}`;
  const post = (p, body) => fetch(url + p, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                             body: JSON.stringify(body) });
  try {
    // The truth: the engine's n-sample run, each choice's ids.
    let choices = null;
    await check(`a seeded n = ${N} run: ${N} distinct choices of ${MAX_TOKENS} tokens`, async () => {
      const r = await post('/v1/completions', { ...base, n: N });
      const j = await r.json();
      assert.equal(r.status, 200, JSON.stringify(j));
      assert.equal(j.choices.length, N);
      choices = j.choices.sort((a, b) => a.index - b.index).map((c) => c.token_ids);
      for (const c of choices) assert.equal(c.length, MAX_TOKENS);
      assert.equal(new Set(choices.map((c) => c.join(','))).size, N, JSON.stringify(choices));
    });
    if (!choices) throw new Error('no n-sample run to compare with');

    await check('n = 1 with sample_index i gives choice i whole', async () => {
      for (let i = 0; i < N; i++) {
        const { ids, finish } = await streamed(post, { ...base, sample_index: i });
        assert.deepEqual(ids, choices[i], `choice ${i}`);
        assert.equal(finish, 'length');
      }
    });

    await check(`sample_index i + resume_output_ids (first k of choice i, k in ${CUTS}) continue choice i exactly`,
                async () => {
      for (let i = 0; i < N; i++) {
        for (const k of CUTS) {
          const { ids, finish } = await streamed(post, { ...base, sample_index: i,
                                                         resume_output_ids: choices[i].slice(0, k) });
          assert.deepEqual(ids, choices[i].slice(k), `choice ${i} cut at ${k}`);
          assert.equal(finish, 'length');
        }
      }
    });

    await check('without sample_index (0) a continuation of choice 1 is not choice 1', async () => {
      for (const k of CUTS) {
        const { ids } = await streamed(post, { ...base, resume_output_ids: choices[1].slice(0, k) });
        assert.equal(ids.length, MAX_TOKENS - k);
        assert.notDeepEqual(ids, choices[1].slice(k), `cut at ${k}`);
        // ... and is what sample_index 0 says it is: choice 0's random numbers.
        const zero = await streamed(post, { ...base, sample_index: 0, resume_output_ids: choices[1].slice(0, k) });
        assert.deepEqual(zero.ids, ids);
      }
    });

    await check('greedy: sample_index changes nothing', async () => {
      const greedy = { ...base, temperature: 0 };
      const plain = await streamed(post, greedy);
      for (const i of [1, 2]) assert.deepEqual((await streamed(post, { ...greedy, sample_index: i })).ids, plain.ids);
    });

    await check('misuse is a 400 invalid_request_error naming sample_index', async () => {
      const cases = [
        { n: 2, sample_index: 1 },
        { n: 3, sample_index: 0 },
        { sample_index: -1 },
        { sample_index: 128 },
        { sample_index: 1.5 },
        { sample_index: '1' },
        { sample_index: true },
        { sample_index: [1] },
      ];
      for (const extra of cases) {
        const r = await post('/v1/completions', { ...base, ...extra });
        const j = await r.json();
        assert.equal(r.status, 400, JSON.stringify(extra) + ' -> ' + JSON.stringify(j));
        assert.equal(j.error.type, 'invalid_request_error', JSON.stringify(j));
        assert.equal(j.error.param, 'sample_index', JSON.stringify(extra) + ' -> ' + JSON.stringify(j));
        assert.ok(j.error.message.includes('sample_index'), j.error.message);
      }
      // The server still answers afterwards.
      assert.equal((await streamed(post, { ...base, sample_index: 127, max_tokens: 2 })).ids.length, 2);
    });
  } finally {
    proc.kill('SIGTERM');
    const code = await new Promise((res) => proc.on('exit', (c) => res(c)));
    if (code !== 0) { t.failures++; console.log('FAIL graceful shutdown: exit code ' + code); }
  }
  console.log(`serve sample_index: ${t.failures} failures`);
  process.exit(t.failures ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
