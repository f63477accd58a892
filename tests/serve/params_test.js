// End-to-end: the request parameters that change what a client gets back, checked against
// independent truth where there is one. Logprobs are compared with the model's own logits
// computed by `fathom forward` for the same ids; n and seeds against repeats and load; model
// names against OpenAI's 404; engine errors (injected) against each protocol's error shape,
// before and during a stream; unsupported inputs against a 400 naming them.
// Usage: node params_test.js FATHOM NODE_MODULES
'use strict';
const path = require('path');
const fs = require('fs');
const os = require('os');
const { execFileSync } = require('child_process');
const { startServer, checker } = require('./start_server.js');
const assert = require('assert');

const [fathom, nodeModules] = process.argv.slice(2);
const OpenAI = require(path.join(nodeModules, 'openai')).default;
const Anthropic = require(path.join(nodeModules, '@anthropic-ai/sdk')).default;
const cache = process.env.FATHOM_CACHE || path.join(os.homedir(), '.cache', 'fathom');
const demoModel = path.join(cache, 'models', 'demo-seed0');

const t = checker();
const check = t.check;

// The SSE events of a response body: [{event, data}] with data parsed when it is JSON.
async function sse(r) {
  const text = await r.text();
  const out = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = null, data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data += line.slice(5).trim();
    }
    let parsed = data;
    try { parsed = JSON.parse(data); } catch (e) { /* [DONE] */ }
    out.push({ event, data: parsed });
  }
  return out;
}

// log-softmax of one float32 row at index i (double precision).
function logSoftmaxAt(row, i) {
  let max = -Infinity;
  for (const v of row) max = Math.max(max, v);
  let sum = 0;
  for (const v of row) sum += Math.exp(v - max);
  return row[i] - max - Math.log(sum);
}

(async () => {
  const { proc, port } = await startServer(fathom, ['--allow-forced-output', '--allow-error-injection']);
  const base = `http://127.0.0.1:${port}`;
  const openai = new OpenAI({ apiKey: 'none', baseURL: base + '/v1', maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: 'none', baseURL: base, maxRetries: 0 });
  const post = (p, body) => fetch(base + p, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                              body: JSON.stringify(body) });
  try {
    await check('model names: served names listed, unknown model is a 404 model_not_found', async () => {
      const ids = (await openai.models.list()).data.map((m) => m.id);
      for (const n of ['fathom-demo', 'deepseek-chat', 'deepseek-reasoner']) assert.ok(ids.includes(n), ids.join(','));
      await assert.rejects(openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }),
                           (e) => e.status === 404 && e.code === 'model_not_found');
      await assert.rejects(openai.completions.create({ model: 'nope', prompt: 'hi' }),
                           (e) => e.status === 404 && e.code === 'model_not_found');
      await assert.rejects(anthropic.messages.create({ model: 'claude-x', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }),
                           (e) => e.status === 404 && e.error && e.error.error && e.error.error.type === 'not_found_error');
    });

    await check('deepseek-chat answers without thinking, deepseek-reasoner with it', async () => {
      const chat = await openai.chat.completions.create({ model: 'deepseek-chat', max_tokens: 6,
        messages: [{ role: 'user', content: 'Hello' }] });
      assert.ok(!chat.choices[0].message.reasoning_content, JSON.stringify(chat.choices[0].message));
      assert.equal(chat.usage.completion_tokens_details.reasoning_tokens, 0);
      const r = await openai.chat.completions.create({ model: 'deepseek-reasoner', max_tokens: 6,
        messages: [{ role: 'user', content: 'Hello' }] });
      // The random demo model almost never closes its reasoning within 6 tokens.
      assert.ok(r.usage.completion_tokens_details.reasoning_tokens > 0, JSON.stringify(r.usage));
      const resp = await openai.responses.create({ model: 'deepseek-reasoner', input: 'Hi', max_output_tokens: 6 });
      assert.ok(resp.usage.output_tokens_details.reasoning_tokens > 0, JSON.stringify(resp.usage));
      assert.ok(resp.usage.output_tokens_details.reasoning_tokens <= resp.usage.output_tokens);
    });

    await check('logprobs equal the log-softmax of the model\'s own logits (fathom forward)', async () => {
      const prompt = [0, 1000, 2000, 3000, 4000];
      const r = await post('/v1/completions', { model: 'fathom-demo', prompt, max_tokens: 6, temperature: 0,
        logprobs: 3, ignore_eos: true, return_token_ids: true });
      assert.equal(r.status, 200);
      const c = (await r.json()).choices[0];
      const gen = c.token_ids;
      assert.equal(gen.length, 6);
      const lp = c.logprobs;
      assert.equal(lp.token_logprobs.length, 6);
      assert.equal(lp.top_logprobs.length, 6);
      const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'fathom-lp-')), 'logits.f32');
      const ids = prompt.concat(gen.slice(0, -1));
      execFileSync(fathom, ['forward', '--model', demoModel, '--numerics', 'fast', '--ids', ids.join(','), '--prefill',
                            String(prompt.length), '--out', out]);
      const all = new Float32Array(fs.readFileSync(out).buffer.slice(0));
      const V = all.length / ids.length;
      for (let i = 0; i < gen.length; i++) {
        const row = all.subarray((prompt.length - 1 + i) * V, (prompt.length + i) * V);
        let arg = 0;
        for (let j = 1; j < V; j++) if (row[j] > row[arg]) arg = j;
        assert.equal(gen[i], arg, 'greedy token ' + i);
        const want = logSoftmaxAt(row, arg);
        assert.ok(Math.abs(lp.token_logprobs[i] - want) < 1e-3, `logprob ${i}: ${lp.token_logprobs[i]} vs ${want}`);
        const tops = Object.values(lp.top_logprobs[i]);
        assert.ok(tops.length >= 1 && tops.length <= 3);
        assert.ok(Math.abs(Math.max(...tops) - want) < 1e-3);
      }
      const chat = await openai.chat.completions.create({ model: 'deepseek-chat', max_tokens: 4, temperature: 0,
        logprobs: true, top_logprobs: 2, messages: [{ role: 'user', content: 'Hi' }] });
      const content = chat.choices[0].logprobs.content;
      assert.ok(content.length >= 1);
      for (const e of content) {
        assert.equal(typeof e.token, 'string');
        assert.ok(e.logprob <= 0);
        assert.equal(e.top_logprobs.length, 2);
        assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
        assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6);  // greedy: the top one
      }
      await assert.rejects(openai.chat.completions.create({ model: 'deepseek-chat', top_logprobs: 21, logprobs: true,
        messages: [{ role: 'user', content: 'Hi' }] }), (e) => e.status === 400);
    });

    await check('n=4 with a seed: 4 distinct choices, the same 4 on repeat and under load', async () => {
      const req = { model: 'fathom-demo', prompt: [0, 11, 22, 33], max_tokens: 8, temperature: 1, seed: 99,
                    n: 4, ignore_eos: true, return_token_ids: true };
      const get = async () => {
        const r = await post('/v1/completions', req);
        assert.equal(r.status, 200);
        const j = await r.json();
        assert.equal(j.choices.length, 4);
        return j.choices.sort((a, b) => a.index - b.index).map((c) => c.token_ids.join(','));
      };
      const first = await get();
      assert.equal(new Set(first).size, 4, first.join(' | '));
      assert.deepEqual(await get(), first);
      const load = Array.from({ length: 8 }, (_, i) => post('/v1/completions', { model: 'fathom-demo',
        prompt: [5, 6, 7 + i], max_tokens: 12, temperature: 0.8, ignore_eos: true }).then((r) => r.text()));
      const [again] = await Promise.all([get(), ...load]);
      assert.deepEqual(again, first);
      const chat = await openai.chat.completions.create({ model: 'deepseek-chat', n: 2, max_tokens: 4, seed: 3,
        messages: [{ role: 'user', content: 'Hi' }] });
      assert.deepEqual(chat.choices.map((c) => c.index).sort(), [0, 1]);
      let seen = new Set();
      for await (const ch of await openai.chat.completions.create({ model: 'deepseek-chat', n: 2, max_tokens: 4,
        seed: 3, stream: true, messages: [{ role: 'user', content: 'Hi' }] })) {
        for (const c of ch.choices) seen.add(c.index);
      }
      assert.deepEqual([...seen].sort(), [0, 1]);
    });

    // vLLM's stream_options.continuous_usage_stats: every chunk carries its choice's usage so far.
    // The truth is the ids the chunks deliver (return_token_ids) and the usage of the same
    // request without it.
    await check('continuous_usage_stats: each chunk counts its choice\'s tokens so far (Completions, Chat, n = 2)', async () => {
      const body = { model: 'fathom-demo', prompt: [3, 14, 15, 92], max_tokens: 9, temperature: 1, seed: 5,
                     n: 2, ignore_eos: true, return_token_ids: true, stream: true };
      const plain = (await sse(await post('/v1/completions', { ...body, stream_options: { include_usage: true } })))
        .map((e) => e.data).filter((d) => typeof d === 'object');
      const total = plain[plain.length - 1].usage;
      assert.equal(total.completion_tokens, 18);
      const events = (await sse(await post('/v1/completions', { ...body,
        stream_options: { include_usage: true, continuous_usage_stats: true } })))
        .map((e) => e.data).filter((d) => typeof d === 'object');
      const seen = [0, 0];
      for (const d of events.slice(0, -1)) {
        const c = d.choices[0];
        seen[c.index] += (c.token_ids || []).length;
        assert.deepEqual([d.usage.prompt_tokens, d.usage.completion_tokens, d.usage.total_tokens],
          [total.prompt_tokens, seen[c.index], total.prompt_tokens + seen[c.index]], JSON.stringify(d));
      }
      assert.deepEqual(seen, [9, 9]);
      assert.deepEqual(events[events.length - 1].usage, total);
      // Only with include_usage (as vLLM); a non-boolean is a 400 naming it.
      const off = (await sse(await post('/v1/completions', { ...body, stream_options: { continuous_usage_stats: true } })))
        .map((e) => e.data).filter((d) => typeof d === 'object');
      assert.ok(off.every((d) => !('usage' in d)), JSON.stringify(off[0]));
      const bad = await post('/v1/completions', { ...body, stream_options: { include_usage: true, continuous_usage_stats: 1 } });
      assert.equal(bad.status, 400);
      assert.equal((await bad.json()).error.param, 'stream_options.continuous_usage_stats');
      // Chat through the official client: the opening chunk counts none, each later one the
      // tokens its choice produced so far; the last chunk is the total.
      const counts = [[], []];
      let last = null;
      for await (const ch of await openai.chat.completions.create({ model: 'deepseek-chat', n: 2, max_tokens: 6,
        seed: 3, stream: true, messages: [{ role: 'user', content: 'Hi' }],
        stream_options: { include_usage: true, continuous_usage_stats: true } })) {
        if (!ch.choices.length) { last = ch.usage; continue; }
        counts[ch.choices[0].index].push(ch.usage.completion_tokens);
      }
      for (const c of counts) {
        assert.equal(c[0], 0, c.join(','));
        assert.equal(c[c.length - 1], 6, c.join(','));
        for (let i = 1; i < c.length; i++) assert.ok(c[i] >= c[i - 1], c.join(','));
      }
      assert.equal(last.completion_tokens, 12);
    });

    await check('an engine error reaches every protocol as an error, before and during a stream', async () => {
      // The first two tokens forced to plain text, so that a stream has sent them (a chunk)
      // before the error whatever the sampler would draw (random ids can decode to nothing
      // yet: an incomplete character), and the error is a mid-stream one.
      const hello = (await (await post('/tokenize', { prompt: 'Hello world', add_special_tokens: false })).json()).tokens;
      assert.equal(hello.length, 2);
      const hook = { fathom_inject_error_after: 2, forced_output_ids: hello };
      const early = { fathom_inject_error_after: 0 };
      const chatErrors = async () => Number((await (await fetch(base + '/metrics')).text())
        .match(/fathom_request_errors_total\{endpoint="chat_completions"\} (\d+)/)[1]);
      const before = await chatErrors();
      // Non-streaming: an HTTP 5xx in the protocol's shape, counted once.
      let r = await post('/v1/chat/completions', { model: 'deepseek-chat', max_tokens: 8, messages: [{ role: 'user', content: 'x' }], ...hook });
      assert.ok(r.status >= 500, 'chat ' + r.status);
      assert.ok((await r.json()).error.message);
      assert.equal(await chatErrors(), before + 1);
      r = await post('/v1/completions', { model: 'fathom-demo', prompt: 'x', max_tokens: 8, ...hook });
      assert.ok(r.status >= 500, 'completions ' + r.status);
      assert.ok((await r.json()).error.message);
      r = await post('/v1/responses', { model: 'deepseek-chat', input: 'x', max_output_tokens: 8, ...hook });
      assert.ok(r.status >= 500, 'responses ' + r.status);
      assert.ok((await r.json()).error.message);
      r = await post('/v1/messages', { model: 'deepseek-chat', max_tokens: 8, messages: [{ role: 'user', content: 'x' }], ...hook });
      assert.ok(r.status >= 500, 'messages ' + r.status);
      let j = await r.json();
      assert.equal(j.type, 'error');
      assert.ok(j.error.type && j.error.message);
      // Streaming, failing before the first token: still an HTTP error.
      r = await post('/v1/chat/completions', { model: 'deepseek-chat', max_tokens: 8, stream: true, messages: [{ role: 'user', content: 'x' }], ...early });
      assert.ok(r.status >= 500, 'chat stream early ' + r.status);
      // Streaming, failing mid-stream: the protocol's error event, never a normal finish.
      r = await post('/v1/chat/completions', { model: 'deepseek-chat', max_tokens: 8, stream: true, messages: [{ role: 'user', content: 'x' }], ...hook });
      assert.equal(r.status, 200);
      let evs = await sse(r);
      assert.ok(evs.some((e) => e.data && e.data.error && e.data.error.message), JSON.stringify(evs));
      assert.ok(!evs.some((e) => e.data && e.data.choices && e.data.choices.some((c) => c.finish_reason === 'stop')));
      r = await post('/v1/completions', { model: 'fathom-demo', prompt: 'x', max_tokens: 8, stream: true, ...hook });
      evs = await sse(r);
      assert.ok(evs.some((e) => e.data && e.data.error), JSON.stringify(evs));
      r = await post('/v1/messages', { model: 'deepseek-chat', max_tokens: 8, stream: true, messages: [{ role: 'user', content: 'x' }], ...hook });
      evs = await sse(r);
      assert.ok(evs.some((e) => e.event === 'error' && e.data.type === 'error'), JSON.stringify(evs));
      assert.ok(!evs.some((e) => e.event === 'message_stop'));
      r = await post('/v1/responses', { model: 'deepseek-chat', input: 'x', max_output_tokens: 8, stream: true, ...hook });
      evs = await sse(r);
      assert.ok(evs.some((e) => e.event === 'response.failed' || e.event === 'error'), JSON.stringify(evs.map((e) => e.event)));
      assert.ok(!evs.some((e) => e.event === 'response.completed'));
      // The server still serves.
      const ok = await openai.chat.completions.create({ model: 'deepseek-chat', max_tokens: 2, messages: [{ role: 'user', content: 'x' }] });
      assert.equal(ok.object, 'chat.completion');
    });

    await check('parameters too small for a float sample their limit on every protocol (no crash)', async () => {
      // Valid as JSON doubles, 0 or subnormal as the engine's floats: top_p -> 0 keeps only the
      // most likely token and T -> 0 is greedy, so both answer what temperature 0 answers; a
      // repetition penalty -> 0 still answers. The server stays up for every protocol.
      const messages = [{ role: 'user', content: 'Count to five' }];
      const greedy = (await openai.chat.completions.create({ model: 'deepseek-chat', messages, max_tokens: 8,
        temperature: 0 })).choices[0].message.content;
      for (const extra of [{ temperature: 1, top_p: 1e-300, seed: 3 }, { temperature: 1e-40, seed: 3 },
                           { temperature: 1e-40, min_p: 0.5, seed: 3 }]) {
        const r = await openai.chat.completions.create({ model: 'deepseek-chat', messages, max_tokens: 8, ...extra });
        assert.equal(r.choices[0].message.content, greedy, JSON.stringify(extra));
      }
      const small = { top_p: 1e-50, repetition_penalty: 1e-300 };
      for (const [p, body] of [
        ['/v1/chat/completions', { model: 'deepseek-chat', messages, max_tokens: 4, ...small, logprobs: true, top_logprobs: 3 }],
        ['/v1/completions', { model: 'fathom-demo', prompt: 'abc', max_tokens: 4, ...small }],
        ['/v1/messages', { model: 'deepseek-chat', messages, max_tokens: 4, top_p: 1e-50, temperature: 1e-45 }],
        ['/v1/responses', { model: 'deepseek-chat', input: 'abc', max_output_tokens: 4, top_p: 1e-46 }],
        ['/generate', { text: 'abc', sampling_params: { max_new_tokens: 4, ...small } }]]) {
        const r = await post(p, body);
        const text = await r.text();
        assert.equal(r.status, 200, p + ' ' + text);
        const j = JSON.parse(text);
        if (p === '/v1/chat/completions')
          for (const c of j.choices[0].logprobs.content) assert.ok(Number.isFinite(c.logprob), JSON.stringify(c));
      }
      assert.equal((await fetch(base + '/health')).status, 200);
    });

    await check('unsupported inputs are a 400 naming them, never dropped', async () => {
      const image = { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } };
      await assert.rejects(openai.chat.completions.create({ model: 'deepseek-chat', max_tokens: 2,
        messages: [{ role: 'user', content: [{ type: 'text', text: 'what is this' }, image] }] }),
        (e) => e.status === 400 && /image/.test(e.message));
      await assert.rejects(anthropic.messages.create({ model: 'deepseek-chat', max_tokens: 2,
        messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] }),
        (e) => e.status === 400 && /image/.test(JSON.stringify(e.error)));
      await assert.rejects(openai.completions.create({ model: 'fathom-demo', prompt: 'x', max_tokens: 2, echo: true,
                                                     logprobs: 2 }),
        (e) => e.status === 400 && /echo/.test(e.message));
      // An output to resume that already ended (EOS, a stop token id) has nothing to continue.
      const eos = (await (await post('/tokenize', { prompt: '<｜end▁of▁sentence｜>' })).json()).tokens[0];
      for (const body of [{ resume_output_ids: [100, eos, 200] }, { resume_output_ids: [100, 7], stop_token_ids: [7] }]) {
        const r = await post('/v1/completions', { model: 'fathom-demo', prompt: 'x', max_tokens: 8, ...body });
        assert.equal(r.status, 400);
        assert.equal((await r.json()).error.param, 'resume_output_ids');
      }
      const ok = await post('/v1/completions', { model: 'fathom-demo', prompt: 'x', max_tokens: 8, ignore_eos: true,
        resume_output_ids: [100, eos, 200] });
      assert.equal(ok.status, 200);
    });

    await check('a resumed output is the answer so far: its stop strings and characters carry on', async () => {
      const ids = async (s) => (await (await post('/tokenize', { prompt: s })).json()).tokens;
      // Teacher-forced, so that what follows the resumed ids is known (forced ids count from
      // the first output token, the resumed ones included).
      const resume = async (said, then, stop) => {
        const r = await post('/v1/completions', { model: 'fathom-demo', prompt: 'x', max_tokens: 40, stop,
          resume_output_ids: said, forced_output_ids: [...said, ...then] });
        assert.equal(r.status, 200);
        return (await r.json()).choices[0];
      };
      // A stop string inside the resumed text: the answer has ended.
      const r = await post('/v1/completions', { model: 'fathom-demo', prompt: 'x', max_tokens: 40, stop: ['END'],
        resume_output_ids: await ids('Hello END there') });
      assert.equal(r.status, 400);
      assert.equal((await r.json()).error.param, 'resume_output_ids');
      // One that starts in the resumed text ("EN", held back) and ends in what follows stops
      // the answer there; when it does not end, the held text comes out first.
      let c = await resume(await ids('Hello EN'), await ids('D of it'), ['END']);
      assert.deepEqual([c.text, c.finish_reason], ['', 'stop']);
      c = await resume(await ids('Hello EN'), await ids('ough said'), ['END']);
      assert.ok(c.text.startsWith('ENough said'), JSON.stringify(c.text));
      // A character whose bytes the cut splits (U+1D11E in three tokens) comes out whole.
      const clef = await ids('\u{1D11E} ok');
      assert.ok(clef.length >= 3, JSON.stringify(clef));
      c = await resume(clef.slice(0, 1), clef.slice(1), undefined);
      assert.ok(c.text.startsWith('\u{1D11E} ok'), JSON.stringify(c.text));
    });

    await check('the thinking budget closes reasoning with </think> when spent', async () => {
      // The random model rarely closes reasoning by itself: after 1024 reasoning tokens the
      // engine forces </think> (by id) and the rest is the answer. Greedy, so it is repeatable.
      const m = await anthropic.messages.create({ model: 'fathom-demo', max_tokens: 1060, temperature: 0,
        thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'Think' }] });
      const kinds = m.content.map((b) => b.type);
      assert.equal(kinds[0], 'thinking', kinds.join(','));
      assert.equal(m.usage.output_tokens, 1060);
      assert.ok(kinds.includes('text'), kinds.join(',') + ' ' + m.stop_reason);
      // Chat Completions takes the same budget: 1024 reasoning tokens and the forced </think>.
      const c = await openai.chat.completions.create({ model: 'fathom-demo', max_tokens: 1060, temperature: 0,
        thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'Think' }] });
      assert.equal(c.usage.completion_tokens_details.reasoning_tokens, 1025);
      assert.ok(c.choices[0].message.reasoning_content.length > 0 && c.choices[0].message.content.length > 0);
      await assert.rejects(anthropic.messages.create({ model: 'fathom-demo', max_tokens: 100,
        thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'x' }] }),
        (e) => e.status === 400);
    });
  } finally {
    proc.kill('SIGTERM');
    const code = await new Promise((res) => proc.on('exit', (c) => res(c)));
    if (code !== 0) { t.failures++; console.log('FAIL graceful shutdown: exit code ' + code); }
  }
  console.log(`serve params: ${t.failures} failures`);
  process.exit(t.failures ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
