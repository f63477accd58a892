// `fathom router` request features end to end, on loopback: two demo replicas and a router in
// front of them (--upstream-kind fathom). The truth is the same request sent straight to a
// replica (a direct `fathom serve` run); through the router it must come back identical,
// streamed and not, with the official openai client:
//   - Chat logprobs + top_logprobs (greedy and seeded) and Completions logprobs: the replica
//     sends them by id (logprob_ids), the router renders the token strings and bytes.
//   - A JSON-schema response_format and a strict tool: the router ships the grammar's source
//     (grammar_spec), the replica compiles it.
//   - Stop token ids: SGLang's /generate (sampling_params.stop_token_ids) and vLLM's
//     stop_token_ids on /v1/completions.
//   - A reasoning budget (thinking.budget_tokens) with a JSON answer after the reasoning.
//   - Hostile values (top_logprobs out of range, malformed schema / regex / tool schema, bad
//     stop ids, bad Fathom fields on the replica's /v1/completions): the 400 a replica gives,
//     and nothing is sent to a replica.
//   - A replica SIGKILLed mid-stream under a constrained, logprob-carrying stream: the
//     continuation on the other replica gives the direct output, logprobs included.
//   - The context length: the replicas serve different ones (--max-model-len); the router
//     serves the smallest of the up replicas' (their /v1/models), capped by its own
//     --context-length, and refuses a longer prompt itself.
// Usage: node features_test.js FATHOM NODE_MODULES
'use strict';
const assert = require('assert');
const path = require('path');
const { startServer, startRouter, checker, metrics, metric, waitFor, randomPrompt } = require('../serve/start_server.js');

const [fathom, modules] = process.argv.slice(2);
const OpenAI = require(path.join(modules, 'openai')).default;

const t = checker();
const check = t.check;

async function post(port, p, body) {
  const r = await fetch(`http://127.0.0.1:${port}${p}`, { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, text: await r.text() };
}
function client(port) {
  return new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0 });
}

// What a Chat answer says, streamed or not, in one shape: content, reasoning, tool calls
// (name and arguments; ids name the response), logprobs, finish, token counts.
async function chat(port, body, stream) {
  const c = client(port);
  if (!stream) {
    const r = await c.chat.completions.create(body);
    const m = r.choices[0].message;
    return { content: m.content || '', reasoning: m.reasoning_content || '',
      tools: (m.tool_calls || []).map((x) => [x.function.name, x.function.arguments]),
      logprobs: r.choices[0].logprobs ? r.choices[0].logprobs.content : null,
      finish: r.choices[0].finish_reason, tokens: r.usage.completion_tokens,
      reasoning_tokens: r.usage.completion_tokens_details.reasoning_tokens };
  }
  const s = await c.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const out = { content: '', reasoning: '', tools: [], logprobs: null, finish: null, tokens: -1, reasoning_tokens: -1 };
  for await (const ch of s) {
    if (ch.usage) {
      out.tokens = ch.usage.completion_tokens;
      out.reasoning_tokens = ch.usage.completion_tokens_details.reasoning_tokens;
    }
    if (!ch.choices.length) continue;
    const c0 = ch.choices[0], d = c0.delta || {};
    out.content += d.content || '';
    out.reasoning += d.reasoning_content || '';
    for (const tc of d.tool_calls || []) {
      if (!out.tools[tc.index]) out.tools[tc.index] = ['', ''];
      if (tc.function && tc.function.name) out.tools[tc.index][0] += tc.function.name;
      if (tc.function && tc.function.arguments) out.tools[tc.index][1] += tc.function.arguments;
    }
    if (c0.logprobs && c0.logprobs.content) out.logprobs = (out.logprobs || []).concat(c0.logprobs.content);
    out.finish = c0.finish_reason || out.finish;
  }
  return out;
}

// Completions (legacy): text, logprobs (tokens, token_logprobs, top_logprobs, text_offset
// concatenated over chunks), finish.
async function completion(port, body, stream) {
  const c = client(port);
  if (!stream) {
    const r = await c.completions.create(body);
    return { text: r.choices[0].text, logprobs: r.choices[0].logprobs, finish: r.choices[0].finish_reason };
  }
  const s = await c.completions.create({ ...body, stream: true });
  const out = { text: '', logprobs: { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] }, finish: null };
  for await (const ch of s) {
    const c0 = ch.choices[0];
    out.text += c0.text;
    if (c0.logprobs) for (const k of Object.keys(out.logprobs)) out.logprobs[k].push(...c0.logprobs[k]);
    out.finish = c0.finish_reason || out.finish;
  }
  return out;
}

// /generate's answer without what differs per run (the id, the latency).
function generateShape(text) {
  const strip = (o) => { delete o.meta_info.id; delete o.meta_info.e2e_latency; return o; };
  if (!text.startsWith('data:')) return strip(JSON.parse(text));
  return text.split('\n').filter((l) => l.startsWith('data: ')).map((l) =>
    (l === 'data: [DONE]' ? l : strip(JSON.parse(l.slice(6)))));
}

// Runs body against the router and the replica (streamed and not, all at once): each pair equal.
async function same(routerPort, directPort, run) {
  const [r0, d0, r1, d1] = await Promise.all([run(routerPort, false), run(directPort, false),
    run(routerPort, true), run(directPort, true)]);
  assert.deepEqual(r0, d0, 'not streamed');
  assert.deepEqual(r1, d1, 'streamed');
  return [d0, d1];
}

const user = (content) => [{ role: 'user', content }];

(async () => {
  const procs = [];
  try {
    const [a, b] = await Promise.all([startServer(fathom, ['--max-model-len', '3000']),
      startServer(fathom, ['--max-model-len', '2000'])]);
    procs.push(a.proc, b.proc);
    const router = await startRouter(fathom, ['--replica', `http://127.0.0.1:${a.port}`,
      '--replica', `http://127.0.0.1:${b.port}`]);
    procs.push(router.proc);
    const R = router.port, A = a.port;
    await waitFor(async () => {
      const m = await metrics(R);
      return metric(m, `fathom_router_replica_up{replica="http://127.0.0.1:${a.port}"}`) === 1 &&
             metric(m, `fathom_router_replica_up{replica="http://127.0.0.1:${b.port}"}`) === 1;
    }, 'both replicas up');

    // The context length each serves, as its /v1/models and /tokenize report it.
    const contextOf = async (port) => {
      const m = await (await fetch(`http://127.0.0.1:${port}/v1/models`)).json();
      const lens = new Set(m.data.map((x) => x.max_model_len));
      assert.equal(lens.size, 1, JSON.stringify(m));
      const tk = await post(port, '/tokenize', { prompt: 'x' });
      assert.equal(JSON.parse(tk.text).max_model_len, [...lens][0]);
      return [...lens][0];
    };
    await check('the router serves the smallest context of its replicas, and refuses a longer prompt itself', async () => {
      assert.equal(await contextOf(A), 3000);
      assert.equal(await contextOf(b.port), 2000);
      assert.equal(await contextOf(R), 2000);
      const attempts = metric(await metrics(R), 'fathom_router_attempts_total');
      const prompt = randomPrompt(7, 2100);
      const r = await post(R, '/v1/completions', { prompt, max_tokens: 1 });
      assert.equal(r.status, 400, r.text);
      assert.match(JSON.parse(r.text).error.message, /2100 tokens; the model's context length is 2000/);
      assert.equal(metric(await metrics(R), 'fathom_router_attempts_total'), attempts, 'nothing sent');
      // The replica with the longer context takes it.
      const d = await post(A, '/v1/completions', { prompt, max_tokens: 1 });
      assert.equal(d.status, 200, d.text);
      // A prompt that leaves room: max_tokens is capped by the router's context, as a replica's.
      const fits = await post(R, '/v1/completions', { prompt: randomPrompt(7, 1990), max_tokens: 50,
        ignore_eos: true });
      assert.equal(fits.status, 200, fits.text);
      assert.equal(JSON.parse(fits.text).usage.completion_tokens, 10);
      // The router's own --context-length caps what the replicas report.
      const capped = await startRouter(fathom, ['--replica', `http://127.0.0.1:${A}`,
        '--replica', `http://127.0.0.1:${b.port}`, '--context-length', '1500']);
      procs.push(capped.proc);
      await waitFor(async () => metric(await metrics(capped.port),
        `fathom_router_replica_up{replica="http://127.0.0.1:${A}"}`) === 1, 'the capped router sees a replica');
      assert.equal(await contextOf(capped.port), 1500);
      capped.proc.kill('SIGTERM');
    });

    await check('Chat logprobs + top_logprobs through the router equal the replica (greedy and seeded)', async () => {
      for (const body of [
        { model: 'deepseek-chat', max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3, messages: user('Logprobs, greedy') },
        { model: 'deepseek-chat', max_tokens: 12, temperature: 1, seed: 7, logprobs: true, top_logprobs: 0, messages: user('Logprobs, seeded') },
        { model: 'deepseek-chat', max_tokens: 12, temperature: 0.8, seed: 8, logprobs: true, top_logprobs: 20, messages: user('Twenty alternatives') },
      ]) {
        const [d] = await same(R, A, (port, stream) => chat(port, body, stream));
        // Every token but a control token (EOS) has its entry.
        assert.ok(d.logprobs.length >= d.tokens - 1 && d.logprobs.length <= d.tokens, JSON.stringify(d));
        assert.equal(d.logprobs[0].top_logprobs.length, body.top_logprobs);
      }
    });

    await check('Completions logprobs through the router equal the replica', async () => {
      const body = { model: 'deepseek-chat', prompt: 'Once upon a time', max_tokens: 10, temperature: 0, logprobs: 2 };
      const [d] = await same(R, A, (port, stream) => completion(port, body, stream));
      assert.equal(d.logprobs.tokens.length, 10);
      assert.equal(Object.keys(d.logprobs.top_logprobs[0]).length, 2);
    });

    const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 8 },
      n: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['name', 'n'], additionalProperties: false };
    await check('a JSON-schema response_format through the router equals the replica', async () => {
      for (const seed of [1, 2]) {
        const body = { model: 'deepseek-chat', max_tokens: 120, seed, messages: user('JSON please'),
          response_format: { type: 'json_schema', json_schema: { name: 'p', strict: true, schema } } };
        const [d] = await same(R, A, (port, stream) => chat(port, body, stream));
        assert.equal(d.finish, 'stop', d.content);
        const v = JSON.parse(d.content);
        assert.deepEqual(Object.keys(v), ['name', 'n']);
      }
    });

    await check('a strict tool through the router equals the replica', async () => {
      const weather = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] },
        days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'days'], additionalProperties: false };
      const body = { model: 'deepseek-chat', max_tokens: 200, seed: 70, messages: user('Weather?'),
        tools: [{ type: 'function', function: { name: 'get_weather', strict: true, parameters: weather } }],
        tool_choice: 'required' };
      const [d] = await same(R, A, (port, stream) => chat(port, body, stream));
      assert.equal(d.tools.length >= 1, true, JSON.stringify(d));
      assert.equal(d.tools[0][0], 'get_weather');
      const args = JSON.parse(d.tools[0][1]);
      assert.ok(['Paris', 'Oslo', 'Lima'].includes(args.city), d.tools[0][1]);
    });

    await check('stop token ids through the router equal the replica (/generate, /v1/completions)', async () => {
      const input_ids = [11, 22, 33, 44, 55];
      const free = JSON.parse((await post(A, '/generate', { input_ids,
        sampling_params: { max_new_tokens: 12, temperature: 0 } })).text);
      const stopAt = free.output_ids[3];
      const sampling_params = { max_new_tokens: 12, temperature: 0, stop_token_ids: [stopAt, 7] };
      const [d] = await same(R, A, async (port, stream) =>
        generateShape((await post(port, '/generate', { input_ids, stream, sampling_params })).text));
      assert.deepEqual(d.meta_info.finish_reason, { type: 'stop', matched: stopAt });
      assert.deepEqual(d.output_ids, free.output_ids.slice(0, 4));
      // vLLM's field on /v1/completions (the router's own endpoint and the replica's).
      const body = { prompt: input_ids, max_tokens: 12, temperature: 0, stop_token_ids: [stopAt], return_token_ids: true };
      const [c] = await same(R, A, async (port, stream) => {
        const r = await post(port, '/v1/completions', { ...body, stream });
        assert.equal(r.status, 200, r.text);
        if (!stream) { const j = JSON.parse(r.text).choices[0]; return [j.text, j.token_ids, j.finish_reason]; }
        let text = '', ids = [], fin = null;
        for (const l of r.text.split('\n')) {
          if (!l.startsWith('data: {')) continue;
          const e = JSON.parse(l.slice(6));
          if (!e.choices.length) continue;
          text += e.choices[0].text; ids = ids.concat(e.choices[0].token_ids); fin = e.choices[0].finish_reason || fin;
        }
        return [text, ids, fin];
      });
      assert.deepEqual(c[1], free.output_ids.slice(0, 4));
      assert.equal(c[2], 'stop');
    });

    // Hostile values: the replica's own 400 (same status and error), and nothing is sent.
    await check('hostile values are the replica\'s 400, before anything is sent to a replica', async () => {
      const attempts = metric(await metrics(R), 'fathom_router_attempts_total');
      const bad = [
        ['/v1/chat/completions', { model: 'deepseek-chat', messages: user('x'), logprobs: true, top_logprobs: 21 }],
        ['/v1/chat/completions', { model: 'deepseek-chat', messages: user('x'), top_logprobs: 2 }],
        ['/v1/chat/completions', { model: 'deepseek-chat', messages: user('x'),
          response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'nope' } } } }],
        ['/v1/chat/completions', { model: 'deepseek-chat', messages: user('x'), structured_outputs: { regex: '(unclosed' } }],
        ['/v1/chat/completions', { model: 'deepseek-chat', messages: user('x'), tool_choice: 'required',
          tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object', properties: { a: { type: 'nope' } } } } }] }],
        ['/v1/chat/completions', { model: 'deepseek-chat', messages: user('x'), max_tokens: 100,
          thinking: { type: 'enabled', budget_tokens: 1024 } }],
        ['/v1/completions', { prompt: 'x', logprobs: 21 }],
        ['/v1/completions', { prompt: 'x', stop_token_ids: [-1] }],
        ['/v1/completions', { prompt: 'x', logprob_ids: 2 }],
        ['/v1/completions', { prompt: 'x', logprob_ids: 2, return_token_ids: true, logprobs: 1 }],
        ['/v1/completions', { prompt: 'x', reasoning_budget: 5 }],
        ['/v1/completions', { prompt: 'x', think_end_id: 5 }],
        ['/v1/completions', { prompt: 'x', think_end_id: 5, grammar_after_think: true }],
        ['/v1/completions', { prompt: 'x', grammar_spec: { kind: 'lark', text: 'x' } }],
        ['/v1/completions', { prompt: 'x', grammar_spec: { kind: 'regex', text: '(unclosed' } }],
        ['/v1/completions', { prompt: 'x', grammar_spec: { kind: 'regex', text: 'a' }, structured_outputs: { regex: 'b' } }],
        ['/generate', { input_ids: [1, 2], sampling_params: { stop_token_ids: [-1] } }],
        ['/generate', { input_ids: [1, 2], sampling_params: { stop_token_ids: 'x' } }],
      ];
      for (const [p, body] of bad) {
        const [r, d] = await Promise.all([post(R, p, body), post(A, p, body)]);
        assert.equal(d.status, 400, `${p} ${JSON.stringify(body)} -> ${d.text}`);
        assert.equal(r.status, 400, `${p} ${JSON.stringify(body)} -> ${r.text}`);
        assert.deepEqual(JSON.parse(r.text), JSON.parse(d.text), `${p} ${JSON.stringify(body)}`);
      }
      // A client's resume_output_ids (the router's own failover field) is refused, not dropped.
      const resumed = await post(R, '/v1/completions', { prompt: 'x', max_tokens: 8, resume_output_ids: [100, 200] });
      assert.equal(resumed.status, 400, resumed.text);
      assert.equal(JSON.parse(resumed.text).error.param, 'resume_output_ids');
      assert.equal(metric(await metrics(R), 'fathom_router_attempts_total'), attempts);
      // A think_end_id outside the vocabulary: the replica's engine refuses it.
      const r = await post(A, '/v1/completions', { prompt: 'x', think_end_id: 10000000, reasoning_budget: 1 });
      assert.equal(r.status, 400, r.text);
    });

    await check('a reasoning budget with a JSON answer after it: the router equals the replica', async () => {
      // The random model never closes its reasoning; the budget forces </think> after 1024
      // tokens, and the constraint starts there.
      const body = { model: 'deepseek-reasoner', max_tokens: 1040, seed: 5, messages: user('Think, then a digit'),
        thinking: { type: 'enabled', budget_tokens: 1024 },
        response_format: { type: 'json_schema', json_schema: { name: 'd', schema: { type: 'integer', minimum: 0, maximum: 9 } } } };
      const [d, r0, r1] = await Promise.all([chat(A, body, false), chat(R, body, false), chat(R, body, true)]);
      assert.deepEqual(r0, d, 'not streamed');
      assert.deepEqual(r1, d, 'streamed');
      assert.equal(d.reasoning_tokens, 1025);
      assert.equal(d.finish, 'stop', d.content);
      assert.ok(/^[0-9]$/.test(d.content), d.content);
    });

    await check('a replica SIGKILLed mid-stream: the continuation keeps the grammar and the logprobs', async () => {
      // An unbounded integer: a long constrained answer, logprobs on every token.
      const body = { model: 'deepseek-chat', max_tokens: 300, seed: 11, logprobs: true, top_logprobs: 2,
        messages: user('A long number'),
        response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object',
          properties: { n: { type: 'integer' } }, required: ['n'] } } } };
      const want = await chat(A, body, false);
      assert.equal(want.tokens, 300);
      const before = metric(await metrics(R), 'fathom_router_continuations_total');
      const s = await client(R).chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
      const got = { content: '', logprobs: [], finish: null, tokens: -1 };
      let chunks = 0, killed = null;
      for await (const ch of s) {
        if (ch.usage) got.tokens = ch.usage.completion_tokens;
        if (!ch.choices.length) continue;
        got.content += ch.choices[0].delta.content || '';
        if (ch.choices[0].logprobs) got.logprobs.push(...ch.choices[0].logprobs.content);
        got.finish = ch.choices[0].finish_reason || got.finish;
        if (++chunks === 3) {
          const m = await metrics(R);
          killed = [a, b].find((x) => metric(m, `fathom_router_replica_in_flight{replica="http://127.0.0.1:${x.port}"}`) === 1);
          assert.ok(killed, 'the replica serving the stream');
          killed.proc.kill('SIGKILL');
        }
      }
      assert.ok(killed);
      assert.equal(got.content, want.content);
      assert.deepEqual(got.logprobs, want.logprobs);
      assert.equal(got.finish, want.finish);
      assert.equal(got.tokens, want.tokens);
      const after = metric(await metrics(R), 'fathom_router_continuations_total');
      assert.equal(after - before, 1, 'one continuation');
    });

    // The killed replica is down: the router serves the survivor's context.
    await check('with a replica down, the router serves the context of those up', async () => {
      const survivor = [a, b].find((x) => x.proc.exitCode === null && x.proc.signalCode === null);
      const want = survivor === a ? 3000 : 2000;
      await waitFor(async () => (await contextOf(R)) === want, 'the survivor\'s context');
    });
  } catch (e) {
    t.failures++;
    console.log('FAIL setup: ' + (e && e.stack || e));
  } finally {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
  }
  console.log(`${t.failures === 0 ? 'router feature tests passed' : 'router feature tests FAILED'}`);
  process.exit(t.failures === 0 ? 0 : 1);
})();
