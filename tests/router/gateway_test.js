// `fathom router --upstream-kind vllm|sglang` end to end, on loopback: two `fathom serve`
// replicas (the demo model) answer in vLLM's /v1/completions shape (return_token_ids) and in
// SGLang's /generate shape, and a gateway router of each kind sits in front of them.
//   - The wire shapes the replica returns, checked against what vLLM's and SGLang's sources
//     say (field names and types), not against the router's reader.
//   - Bad input to /generate: a 400 in SGLang's error shape naming the field.
//   - Through each gateway, Chat (streamed and not, greedy and seeded), Messages and Responses
//     answer exactly what a replica answers directly.
//   - What a kind cannot carry is a 400 naming it (retention; n > 1 on sglang).
//   - A replica SIGKILLed before the request's first token: the request goes to the other one.
// Usage: node gateway_test.js FATHOM NODE_MODULES
'use strict';
const { spawn } = require('child_process');
const assert = require('assert');
const path = require('path');
const { startServer, checker, randomPrompt, metrics, metric, waitFor } = require('../serve/start_server.js');

const [fathom, modules] = process.argv.slice(2);
const OpenAI = require(path.join(modules, 'openai')).default;
const Anthropic = require(path.join(modules, '@anthropic-ai/sdk')).default;

const t = checker();
const check = t.check;

// A router that probes its replicas once at start and then hardly ever (an hour): a replica
// killed later is still "up" for it, so the next request sent there finds it dead.
function startGateway(kind, replicaPorts) {
  return new Promise((resolve, reject) => {
    const args = ['router', '--port', '0', '--policy', 'round_robin', '--probe-interval', '3600',
      '--upstream-kind', kind];
    for (const p of replicaPorts) args.push('--replica', `http://127.0.0.1:${p}`);
    const proc = spawn(fathom, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d.toString();
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve({ proc, port: Number(m[1]) });
    });
    proc.on('exit', (code) => reject(new Error('router exited ' + code + ': ' + out)));
    setTimeout(() => reject(new Error('router did not start: ' + out)), 60000);
  });
}

async function post(port, p, body, raw = false) {
  const r = await fetch(`http://127.0.0.1:${port}${p}`, { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: raw ? body : JSON.stringify(body) });
  return { status: r.status, text: await r.text() };
}
// The JSON payloads of an SSE body's `data:` lines, and whether it ended with [DONE].
function events(text) {
  const out = [];
  let done = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    if (line === 'data: [DONE]') { done = true; continue; }
    assert.ok(!done, 'an event after [DONE]');
    out.push(JSON.parse(line.slice(6)));
  }
  return { out, done };
}
const isIds = (a) => Array.isArray(a) && a.every((x) => Number.isInteger(x) && x >= 0);

function chatRequest(i) {
  const r = { model: 'deepseek-chat', max_tokens: 24,
    messages: [{ role: 'user', content: `Gateway ${i}: ` + `the number ${i * 41}. `.repeat(3) }] };
  if (i % 2 === 0) r.temperature = 0; else { r.temperature = 1; r.seed = 500 + i; }
  return r;
}
async function chat(client, i, stream) {
  if (!stream) {
    const r = await client.chat.completions.create(chatRequest(i));
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason,
             tokens: r.usage.completion_tokens };
  }
  const s = await client.chat.completions.create({ ...chatRequest(i), stream: true,
    stream_options: { include_usage: true } });
  let text = '', finish = null, tokens = -1;
  for await (const c of s) {
    if (c.choices.length) {
      text += c.choices[0].delta.content || '';
      finish = c.choices[0].finish_reason || finish;
    }
    if (c.usage) tokens = c.usage.completion_tokens;
  }
  return { text, finish, tokens };
}

(async () => {
  const procs = [];
  try {
    const [a, b] = await Promise.all([startServer(fathom, []), startServer(fathom, [])]);
    procs.push(a.proc, b.proc);
    const prompt = randomPrompt(7, 20);

    await check('vLLM shape: /v1/completions with return_token_ids (serving_completion.py)', async () => {
      const body = { prompt, max_tokens: 6, temperature: 0, ignore_eos: true, return_token_ids: true };
      const whole = await post(a.port, '/v1/completions', body);
      assert.equal(whole.status, 200, whole.text);
      const w = JSON.parse(whole.text);
      assert.equal(w.object, 'text_completion');
      const c = w.choices[0];
      assert.equal(typeof c.text, 'string');
      assert.deepEqual(c.prompt_token_ids, prompt);  // CompletionResponseChoice.prompt_token_ids
      assert.ok(isIds(c.token_ids) && c.token_ids.length === 6, JSON.stringify(c));
      assert.equal(c.finish_reason, 'length');
      assert.equal(w.usage.completion_tokens, 6);
      // Streamed: prompt_token_ids on each choice's first chunk (null after), token_ids (the
      // chunk's new ids) on every chunk, a usage chunk with no choices, then [DONE].
      const s = await post(a.port, '/v1/completions', { ...body, stream: true,
        stream_options: { include_usage: true } });
      const { out, done } = events(s.text);
      assert.ok(done);
      const chunks = out.filter((e) => e.choices.length);
      assert.deepEqual(chunks[0].choices[0].prompt_token_ids, prompt);
      const ids = [];
      for (const [k, e] of chunks.entries()) {
        const ch = e.choices[0];
        assert.equal(ch.index, 0);
        if (k > 0) assert.equal(ch.prompt_token_ids, null);
        assert.ok(isIds(ch.token_ids), JSON.stringify(ch));
        ids.push(...ch.token_ids);
      }
      assert.deepEqual(ids, c.token_ids);
      assert.equal(chunks[chunks.length - 1].choices[0].finish_reason, 'length');
      const usage = out[out.length - 1];
      assert.deepEqual(usage.choices, []);
      assert.equal(usage.usage.completion_tokens, 6);
      assert.equal(usage.usage.prompt_tokens, prompt.length);
    });

    await check('SGLang shape: /generate (io_struct GenerateReqInput, TokenizerManager output)', async () => {
      const want = JSON.parse((await post(a.port, '/v1/completions', { prompt, max_tokens: 6,
        temperature: 0, ignore_eos: true, return_token_ids: true })).text).choices[0];
      const req = { input_ids: prompt, rid: 'gw-1',
        sampling_params: { max_new_tokens: 6, temperature: 0, ignore_eos: true } };
      const whole = await post(a.port, '/generate', req);
      assert.equal(whole.status, 200, whole.text);
      const w = JSON.parse(whole.text);
      assert.equal(typeof w.text, 'string');
      assert.deepEqual(w.output_ids, want.token_ids);  // the same engine path
      assert.equal(w.text, want.text);
      const m = w.meta_info;
      assert.equal(m.id, 'gw-1');
      assert.deepEqual(m.finish_reason, { type: 'length', length: 6 });  // FINISH_LENGTH.to_json
      assert.equal(m.prompt_tokens, prompt.length);
      assert.equal(m.completion_tokens, 6);
      assert.ok(Number.isInteger(m.cached_tokens));
      // Streamed (SGLang's default, non-incremental): each object holds the output so far.
      const s = await post(a.port, '/generate', { ...req, stream: true });
      const { out, done } = events(s.text);
      assert.ok(done && out.length >= 2, s.text);
      let prev = [];
      for (const [k, e] of out.entries()) {
        assert.ok(isIds(e.output_ids));
        assert.deepEqual(e.output_ids.slice(0, prev.length), prev, 'output_ids are cumulative');
        assert.equal(e.meta_info.completion_tokens, e.output_ids.length);
        assert.equal(typeof e.text, 'string');
        if (k < out.length - 1) assert.equal(e.meta_info.finish_reason, null);
        prev = e.output_ids;
      }
      assert.deepEqual(prev, want.token_ids);
      assert.deepEqual(out[out.length - 1].meta_info.finish_reason, { type: 'length', length: 6 });
      // A stop token: FINISH_MATCHED_TOKEN {type: stop, matched: id}; the id ends output_ids.
      const stopAt = want.token_ids[2];
      const st = JSON.parse((await post(a.port, '/generate', { input_ids: prompt,
        sampling_params: { max_new_tokens: 6, temperature: 0, stop_token_ids: [stopAt] } })).text);
      assert.deepEqual(st.meta_info.finish_reason, { type: 'stop', matched: stopAt });
      assert.equal(st.output_ids[st.output_ids.length - 1], stopAt);
      // Text in: the same ids as /v1/completions with that string prompt.
      const tx = JSON.parse((await post(a.port, '/generate', { text: 'Hello there',
        sampling_params: { max_new_tokens: 4, temperature: 0 } })).text);
      const tc = JSON.parse((await post(a.port, '/v1/completions', { prompt: 'Hello there',
        max_tokens: 4, temperature: 0, return_token_ids: true })).text).choices[0];
      assert.deepEqual(tx.output_ids.slice(0, tc.token_ids.length), tc.token_ids);
    });

    await check('bad input to /generate: a 400 in SGLang\'s error shape naming the field', async () => {
      const cases = [
        ['{"input_ids": [1, 2', /not valid JSON/],
        ['[1, 2, 3]', /JSON object/],
        [{ sampling_params: {} }, /text.*input_ids/],
        [{ text: 'x', input_ids: [1] }, /text.*input_ids/],
        [{ input_ids: 'abc' }, /'input_ids'/],
        [{ input_ids: [1, -2] }, /'input_ids'/],
        [{ input_ids: [[1, 2], [3]] }, /batches/],
        [{ text: ['a', 'b'] }, /batches/],
        [{ input_ids: [1], sampling_params: { temperature: 'hot' } }, /'sampling_params.temperature'/],
        [{ input_ids: [1], sampling_params: { top_p: 0 } }, /'sampling_params.top_p'/],
        [{ input_ids: [1], sampling_params: { max_new_tokens: 1.5 } }, /'sampling_params.max_new_tokens'/],
        [{ input_ids: [1], sampling_params: { banana: 1 } }, /'sampling_params.banana'/],
        [{ input_ids: [1], sampling_params: { n: 2 } }, /'sampling_params.n'/],
        [{ input_ids: [1], sampling_params: { logit_bias: { x: 2 } } }, /'sampling_params.logit_bias'/],
        [{ input_ids: [1], sampling_params: { min_new_tokens: -1 } }, /'sampling_params.min_new_tokens'/],
        [{ input_ids: [1], sampling_params: { allowed_token_ids: [1] } }, /'sampling_params.allowed_token_ids'/],
        [{ input_ids: [1], sampling_params: [] }, /'sampling_params'/],
        [{ input_ids: [1], stream: 'yes' }, /'stream'/],
        [{ input_ids: [1], return_logprob: true }, /'return_logprob'/],
        [{ input_ids: [1], image_data: 'x.png' }, /'image_data'/],
        [{ input_ids: [1], sampling_params: { json_schema: '{"type": "nope"}' } }, /json_schema/],
      ];
      for (const [body, why] of cases) {
        const r = await post(a.port, '/generate', typeof body === 'string' ? body : body, typeof body === 'string');
        assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
        const j = JSON.parse(r.text);
        assert.deepEqual(Object.keys(j), ['error']);
        assert.equal(typeof j.error.message, 'string');
        assert.match(j.error.message, why, JSON.stringify(body));
      }
    });

    const direct = new OpenAI({ baseURL: `http://127.0.0.1:${a.port}/v1`, apiKey: 'none', maxRetries: 0 });
    const want = [];
    for (let i = 0; i < 4; i++) want.push(await chat(direct, i, false));
    const msg = { model: 'deepseek-chat', max_tokens: 16, temperature: 0,
      messages: [{ role: 'user', content: 'Anthropic through a gateway' }] };
    const wantMsg = await new Anthropic({ baseURL: `http://127.0.0.1:${a.port}`, apiKey: 'none',
      maxRetries: 0 }).messages.create(msg);
    const rq = { model: 'deepseek-chat', input: 'Responses through a gateway', max_output_tokens: 16, temperature: 0 };
    const wantResp = await direct.responses.create(rq);

    // A stop id the prompt reaches at its third token.
    const wantStop = JSON.parse((await post(a.port, '/generate', { input_ids: prompt,
      sampling_params: { max_new_tokens: 3, temperature: 0 } })).text).output_ids[2];
    const gateways = {};
    for (const kind of ['vllm', 'sglang']) {
      gateways[kind] = await startGateway(kind, [a.port, b.port]);
      procs.push(gateways[kind].proc);
    }
    for (const kind of ['vllm', 'sglang']) {
      const g = gateways[kind];
      const base = `http://127.0.0.1:${g.port}`;
      await waitFor(async () => {
        const m = await metrics(g.port);
        return metric(m, `fathom_router_replica_up{replica="http://127.0.0.1:${a.port}"}`) === 1 &&
               metric(m, `fathom_router_replica_up{replica="http://127.0.0.1:${b.port}"}`) === 1;
      }, kind + ': both replicas up');
      const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0 });

      await check(`${kind} gateway: Chat equals the replica (streamed and not, greedy and seeded)`, async () => {
        for (const i of [0, 1, 2, 3]) {
          for (const stream of [false, true]) {
            const got = await chat(client, i, stream);
            assert.deepEqual(got, want[i], `request ${i}, stream ${stream}`);
          }
        }
        const m = await metrics(g.port);
        assert.ok(metric(m, `fathom_router_replica_routed_total{replica="http://127.0.0.1:${a.port}"}`) >= 1);
        assert.ok(metric(m, `fathom_router_replica_routed_total{replica="http://127.0.0.1:${b.port}"}`) >= 1);
        assert.equal(metric(m, 'fathom_router_failed_requests_total'), 0);
      });

      await check(`${kind} gateway: Messages and Responses equal the replica`, async () => {
        const m = await new Anthropic({ baseURL: base, apiKey: 'none', maxRetries: 0 }).messages.create(msg);
        assert.deepEqual(m.content, wantMsg.content);
        assert.equal(m.usage.output_tokens, wantMsg.usage.output_tokens);
        assert.equal(m.stop_reason, wantMsg.stop_reason);
        const r = await client.responses.create(rq);
        assert.equal(r.output_text, wantResp.output_text);
        assert.equal(r.usage.output_tokens, wantResp.usage.output_tokens);
      });

      await check(`${kind} gateway: what it cannot carry is a 400 naming it`, async () => {
        const r = await post(g.port, '/v1/chat/completions', { ...chatRequest(0), retention: 'chat' });
        assert.equal(r.status, 400, r.text);
        assert.equal(JSON.parse(r.text).error.param, 'retention');
        const n = await post(g.port, '/v1/chat/completions', { ...chatRequest(0), n: 2 });
        if (kind === 'sglang') {
          assert.equal(n.status, 400, n.text);
          assert.equal(JSON.parse(n.text).error.param, 'n');
        } else {
          assert.equal(n.status, 200, n.text);
          const j = JSON.parse(n.text);
          assert.equal(j.choices.length, 2);
          assert.equal(j.choices[0].message.content, want[0].text);
        }
        // Strict tools have no equivalent on either; SGLang has no reasoning budget.
        const tools = await post(g.port, '/v1/chat/completions', { ...chatRequest(0), tool_choice: 'required',
          tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object' } } }] });
        assert.equal(tools.status, 400, tools.text);
        assert.equal(JSON.parse(tools.text).error.param, 'tools');
        if (kind === 'sglang') {
          const budget = await post(g.port, '/v1/chat/completions', { ...chatRequest(0), max_tokens: 2000,
            thinking: { type: 'enabled', budget_tokens: 1024 } });
          assert.equal(budget.status, 400, budget.text);
          assert.equal(JSON.parse(budget.text).error.param, 'thinking.budget_tokens');
        }
      });

      // The replicas answer vLLM's structured_outputs / stop_token_ids and SGLang's
      // json_schema / stop_token_ids as those servers do: through the gateway, a JSON schema and
      // a stop id give the replica's own answer.
      await check(`${kind} gateway: a JSON schema and stop token ids equal the replica`, async () => {
        const body = { model: 'deepseek-chat', max_tokens: 100, seed: 3, messages: [{ role: 'user', content: 'JSON' }],
          response_format: { type: 'json_schema', json_schema: { name: 'j', strict: true, schema: {
            type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['n'] } } } };
        const [d, r] = await Promise.all([post(a.port, '/v1/chat/completions', body), post(g.port, '/v1/chat/completions', body)]);
        assert.equal(r.status, 200, r.text);
        const [dj, rj] = [JSON.parse(d.text), JSON.parse(r.text)];
        assert.deepEqual(rj.choices[0].message, dj.choices[0].message);
        assert.ok(Number.isInteger(JSON.parse(rj.choices[0].message.content).n));
        const gen = { input_ids: prompt, sampling_params: { max_new_tokens: 8, temperature: 0, stop_token_ids: [wantStop] } };
        const [dg, rg] = await Promise.all([post(a.port, '/generate', gen), post(g.port, '/generate', gen)]);
        const strip = (t) => { const o = JSON.parse(t); delete o.meta_info.id; delete o.meta_info.e2e_latency; return o; };
        assert.deepEqual(strip(rg.text), strip(dg.text));
        assert.deepEqual(strip(rg.text).meta_info.finish_reason, { type: 'stop', matched: wantStop });
      });
    }

    // B dies; both gateways still think it is up (no probe for an hour): the next requests
    // round-robined to B fail to connect before any token and go to A.
    b.proc.kill('SIGKILL');
    await new Promise((r) => (b.proc.exitCode !== null ? r() : b.proc.once('exit', r)));
    for (const kind of ['vllm', 'sglang']) {
      const g = gateways[kind];
      await check(`${kind} gateway: a replica SIGKILLed before the first token, the request goes to the other`, async () => {
        const client = new OpenAI({ baseURL: `http://127.0.0.1:${g.port}/v1`, apiKey: 'none', maxRetries: 0 });
        const before = await metrics(g.port);
        for (const i of [0, 1]) {
          for (const stream of [true, false])
            assert.deepEqual(await chat(client, i, stream), want[i], `request ${i}, stream ${stream}`);
        }
        const after = await metrics(g.port);
        const retries = metric(after, 'fathom_router_retries_total') - metric(before, 'fathom_router_retries_total');
        assert.ok(retries >= 1, `retries: ${retries}`);
        assert.equal(metric(after, 'fathom_router_continuations_total'), 0);
        assert.equal(metric(after, `fathom_router_replica_up{replica="http://127.0.0.1:${b.port}"}`), 0);
        assert.equal(metric(after, 'fathom_router_failed_requests_total'), 0);
      });
    }
  } catch (e) {
    t.failures++;
    console.log('FAIL setup: ' + (e && e.stack || e));
  } finally {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
  }
  console.log(`${t.failures === 0 ? 'gateway tests passed' : 'gateway tests FAILED'}`);
  process.exit(t.failures === 0 ? 0 : 1);
})();
