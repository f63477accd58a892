// End-to-end: the real `fathom serve` (embedded demo model, fetched DeepSeek tokenizer) driven
// by the official npm clients `openai` (6.x) and `@anthropic-ai/sdk` (1.x), plus raw fetch for
// the error shapes, authentication, /v1/completions, /metrics and client disconnects.
// Usage: node clients_test.js FATHOM NODE_MODULES
'use strict';
const fs = require('fs');
const path = require('path');
const { startServer, checker } = require('./start_server.js');
const assert = require('assert');

const [fathom, nodeModules] = process.argv.slice(2);
const OpenAI = require(path.join(nodeModules, 'openai')).default;
const Anthropic = require(path.join(nodeModules, '@anthropic-ai/sdk')).default;
const KEY = 'test-key-123';


const t = checker();
const check = t.check;

const longText = Array.from({ length: 60 }, (_, i) => `Paragraph ${i}: the quick brown fox jumps over the lazy dog.`).join('\n');

(async () => {
  const { proc, port } = await startServer(fathom, ['--api-key', KEY, '--default-max-tokens', '64',
                                                     '--allow-forced-output']);
  const base = `http://127.0.0.1:${port}`;
  const openai = new OpenAI({ apiKey: KEY, baseURL: base + '/v1', maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: KEY, baseURL: base, maxRetries: 0 });
  try {
    await check('chat completion (non-stream)', async () => {
      const r = await openai.chat.completions.create({
        model: 'fathom-demo', messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 12 });
      assert.equal(r.object, 'chat.completion');
      assert.equal(r.choices.length, 1);
      assert.equal(r.choices[0].message.role, 'assistant');
      assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
      assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12);
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    });
    await check('chat completion (stream, usage)', async () => {
      const s = await openai.chat.completions.create({
        model: 'fathom-demo', messages: [{ role: 'user', content: 'Stream please' }], max_tokens: 10,
        stream: true, stream_options: { include_usage: true } });
      let chunks = 0, finish = null, usage = null, text = '';
      for await (const c of s) {
        chunks++;
        if (c.choices.length && c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
        if (c.choices.length) text += (c.choices[0].delta.content || '') + (c.choices[0].delta.reasoning_content || '');
        if (c.usage) usage = c.usage;
      }
      assert.ok(chunks >= 2, 'chunks ' + chunks);
      assert.ok(finish === 'length' || finish === 'stop');
      assert.ok(usage && usage.completion_tokens > 0);
    });
    await check('responses (non-stream and stream)', async () => {
      const r = await openai.responses.create({ model: 'fathom-demo', input: 'Hi there', max_output_tokens: 8 });
      assert.equal(r.object, 'response');
      assert.ok(['completed', 'incomplete'].includes(r.status));
      assert.ok(r.usage.input_tokens > 0);
      const s = await openai.responses.create({ model: 'fathom-demo', input: 'Hi', max_output_tokens: 6, stream: true });
      const types = new Set();
      for await (const ev of s) types.add(ev.type);
      assert.ok(types.has('response.created'), [...types].join(','));
      assert.ok(types.has('response.completed') || types.has('response.incomplete'), [...types].join(','));
    });
    await check('messages stream with a thinking block', async () => {
      // deepseek-reasoner thinks by default (a thinking budget needs max_tokens above it).
      const s = anthropic.messages.stream({
        model: 'deepseek-reasoner', max_tokens: 12,
        messages: [{ role: 'user', content: 'Think about it' }] });
      const kinds = [];
      s.on('streamEvent', (e) => { if (e.type === 'content_block_start') kinds.push(e.content_block.type); });
      const msg = await s.finalMessage();
      assert.equal(msg.type, 'message');
      assert.ok(kinds.includes('thinking'), kinds.join(','));
      assert.ok(['max_tokens', 'end_turn'].includes(msg.stop_reason));
      assert.ok(msg.usage.output_tokens > 0);
    });
    await check('messages (non-stream)', async () => {
      const m = await anthropic.messages.create({ model: 'fathom-demo', max_tokens: 6,
        messages: [{ role: 'user', content: 'Hello' }] });
      assert.equal(m.role, 'assistant');
      assert.ok(Array.isArray(m.content));
    });
    await check('tool-call round trip is accepted in both protocols', async () => {
      const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
      const r = await openai.chat.completions.create({ model: 'fathom-demo', max_tokens: 6, tools,
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
          { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c":21}' }] });
      assert.equal(r.object, 'chat.completion');
      const m = await anthropic.messages.create({ model: 'fathom-demo', max_tokens: 6,
        tools: [{ name: 'get_weather', description: 'Weather', input_schema: tools[0].function.parameters }],
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '21 C' }] }] });
      assert.equal(m.type, 'message');
    });
    await check('a forced tool call comes back as a tool call (stream and not), and round-trips', async () => {
      const markup = 'Let me check.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n' +
        '<｜DSML｜ parameter name="city" string="true">Paris</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n' +
        '</｜DSML｜ calls><｜end▁of▁sentence｜>';
      const tk = await (await fetch(base + '/tokenize', { method: 'POST', headers: { Authorization: 'Bearer ' + KEY },
        body: JSON.stringify({ prompt: markup }) })).json();
      const ids = tk.tokens;
      const dt = await (await fetch(base + '/detokenize', { method: 'POST', headers: { Authorization: 'Bearer ' + KEY },
        body: JSON.stringify({ tokens: ids }) })).json();
      assert.equal(dt.prompt, markup);
      const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
      const messages = [{ role: 'user', content: 'Weather in Paris?' }];
      const r = await openai.chat.completions.create({ model: 'fathom-demo', messages, tools,
        max_tokens: ids.length + 4, forced_output_ids: ids });
      const msg = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      assert.equal(msg.reasoning_content, 'Let me check.');
      assert.equal(msg.tool_calls.length, 1);
      assert.equal(msg.tool_calls[0].function.name, 'get_weather');
      assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { city: 'Paris' });
      const s = await openai.chat.completions.create({ model: 'fathom-demo', messages, tools, stream: true,
        max_tokens: ids.length + 4, forced_output_ids: ids });
      let name = '', args = '', finish = null;
      for await (const c of s) {
        if (!c.choices.length) continue;
        for (const tc of c.choices[0].delta.tool_calls || []) {
          if (tc.function && tc.function.name) name += tc.function.name;
          if (tc.function && tc.function.arguments) args += tc.function.arguments;
        }
        if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
      }
      assert.equal(name, 'get_weather');
      assert.deepEqual(JSON.parse(args), { city: 'Paris' });
      assert.equal(finish, 'tool_calls');
      const back = await openai.chat.completions.create({ model: 'fathom-demo', tools, max_tokens: 4,
        messages: [...messages, msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '21 C' }] });
      assert.equal(back.object, 'chat.completion');
      const m = await anthropic.messages.create({ model: 'deepseek-reasoner', max_tokens: ids.length + 4,
        tools: [{ name: 'get_weather', description: 'Weather', input_schema: tools[0].function.parameters }],
        messages, forced_output_ids: ids });
      assert.equal(m.stop_reason, 'tool_use');
      const use = m.content.find((b) => b.type === 'tool_use');
      assert.ok(use, JSON.stringify(m.content));
      assert.equal(use.name, 'get_weather');
      assert.deepEqual(use.input, { city: 'Paris' });
    });
    await check('a repeated long prefix reports cached_tokens', async () => {
      const messages = [{ role: 'system', content: longText }, { role: 'user', content: 'Summarise.' }];
      const a = await openai.chat.completions.create({ model: 'fathom-demo', messages, max_tokens: 2 });
      const b = await openai.chat.completions.create({ model: 'fathom-demo', messages, max_tokens: 2 });
      assert.ok(a.usage.prompt_tokens > 256, 'prompt ' + a.usage.prompt_tokens);
      const cached = b.usage.prompt_tokens_details.cached_tokens;
      assert.ok(cached >= 128 && cached < b.usage.prompt_tokens, 'cached ' + cached);
      const m = await anthropic.messages.create({ model: 'fathom-demo', max_tokens: 2, system: longText,
        messages: [{ role: 'user', content: 'Summarise.' }] });
      assert.ok(m.usage.cache_read_input_tokens >= 128, 'anthropic cache_read ' + m.usage.cache_read_input_tokens);
    });
    await check('a seeded request is the same alone and among 8 concurrent ones', async () => {
      const req = { model: 'fathom-demo', messages: [{ role: 'user', content: 'Seeded' }], max_tokens: 12,
                    temperature: 1.0, seed: 4242 };
      const alone = (await openai.chat.completions.create(req)).choices[0].message;
      const others = Array.from({ length: 8 }, (_, i) => openai.chat.completions.create({
        model: 'fathom-demo', messages: [{ role: 'user', content: 'Other ' + i }], max_tokens: 10 + i, temperature: 0.9 }));
      const [again] = await Promise.all([openai.chat.completions.create(req), ...others]);
      assert.deepEqual(again.choices[0].message, alone);
    });
    await check('token counts (both SDKs, vLLM /tokenize) are the prompt a generation would have; models.retrieve', async () => {
      // Golden: DeepSeek's encoder's prompt for a system + user conversation, thinking off
      // (tests/data/encoding/v41, case v41-dev-0060); its tokens are what both counts must say.
      const golden = fs.readFileSync(path.join(__dirname, '../data/encoding/v41/cases_dev.jsonl'), 'utf8')
        .split('\n').filter(Boolean).map(JSON.parse).find((c) => c.id === 'v41-dev-0060');
      const [system, user] = golden.messages.map((m) => m.content);
      const tk = await (await fetch(base + '/tokenize', { method: 'POST', headers: { Authorization: 'Bearer ' + KEY },
        body: JSON.stringify({ prompt: golden.prompt }) })).json();
      const a = await anthropic.messages.countTokens({ model: 'deepseek-chat', system,
        messages: [{ role: 'user', content: user }] });
      assert.deepEqual(a, { input_tokens: tk.count });
      const o = await openai.responses.inputTokens.count({ model: 'deepseek-chat', instructions: system, input: user });
      assert.deepEqual(o, { object: 'response.input_tokens', input_tokens: tk.count });
      // vLLM's /tokenize of the conversation: the golden prompt's ids, which the Chat
      // generation's usage counts too.
      const tokenize = async (body) => (await fetch(base + '/tokenize', { method: 'POST',
        headers: { Authorization: 'Bearer ' + KEY }, body: JSON.stringify(body) })).json();
      const chatMessages = [{ role: 'system', content: system }, { role: 'user', content: user }];
      const tc = await tokenize({ model: 'deepseek-chat', messages: chatMessages });
      assert.deepEqual(tc.tokens, tk.tokens);
      assert.equal(tc.count, tk.count);
      assert.ok(tc.max_model_len > tc.count && tc.token_strs === null, JSON.stringify(tc));
      const cu = (await openai.chat.completions.create({ model: 'deepseek-chat', messages: chatMessages, max_tokens: 1 })).usage;
      assert.equal(cu.prompt_tokens, tc.count);
      // token_strs in the byte-level alphabet (a space is 'Ġ'), one per id.
      const ts = await tokenize({ prompt: 'Hello tokenizer world', return_token_strs: true });
      assert.equal(ts.token_strs.length, ts.count);
      assert.equal(ts.token_strs.join('').replace(/\u0120/g, ' '), 'Hello tokenizer world');
      const bad = await fetch(base + '/tokenize', { method: 'POST', headers: { Authorization: 'Bearer ' + KEY },
        body: JSON.stringify({ messages: chatMessages, max_tokens: 3 }) });
      assert.equal(bad.status, 400);
      assert.equal((await bad.json()).error.param, 'max_tokens');
      // A conversation with tools, thinking and a tool round trip: the count is what the
      // generation's usage reports (Anthropic: input plus cache reads and writes).
      const tools = [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object',
        properties: { city: { type: 'string' } }, required: ['city'] } }];
      const messages = [{ role: 'user', content: 'Weather in Paris? ' + longText },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '21 C' }] }];
      const shape = { model: 'fathom-demo', system: [{ type: 'text', text: 'Be brief.' }], tools, messages,
        thinking: { type: 'enabled', budget_tokens: 2048 } };
      const counted = (await anthropic.messages.countTokens(shape)).input_tokens;
      for (let i = 0; i < 2; i++) {  // cold, then from the prefix cache
        const u = (await anthropic.messages.create({ ...shape, max_tokens: 4096 + 2, stream: false })).usage;
        assert.equal(counted, u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, JSON.stringify(u));
      }
      const input = [{ role: 'user', content: 'Weather in Paris? ' + longText },
        { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'call_1', output: '21 C' }];
      const oshape = { model: 'fathom-demo', instructions: 'Be brief.', input, reasoning: { effort: 'high' },
        tools: [{ type: 'function', name: 'get_weather', parameters: tools[0].input_schema }] };
      const ocount = (await openai.responses.inputTokens.count(oshape)).input_tokens;
      const r = await openai.responses.create({ ...oshape, max_output_tokens: 2 });
      assert.equal(ocount, r.usage.input_tokens);
      assert.notEqual(ocount, counted);
      // Generation fields are not parameters of a count: a 400 naming them, in each shape.
      await assert.rejects(anthropic.messages.countTokens({ ...shape, max_tokens: 5 }),
        (e) => e.status === 400 && e.error.error.type === 'invalid_request_error' && /max_tokens/.test(e.error.error.message));
      await assert.rejects(openai.responses.inputTokens.count({ ...oshape, max_output_tokens: 5 }),
        (e) => e.status === 400 && e.error.param === 'max_output_tokens');
      await assert.rejects(anthropic.messages.countTokens({ model: 'nope', messages: [{ role: 'user', content: 'a' }] }),
        (e) => e.status === 404 && e.error.error.type === 'not_found_error');
      const unauthorized = new Anthropic({ apiKey: 'wrong', baseURL: base, maxRetries: 0 });
      await assert.rejects(unauthorized.messages.countTokens({ model: 'fathom-demo', messages: [{ role: 'user', content: 'a' }] }),
        (e) => e.status === 401 && e.error.error.type === 'authentication_error');
      // The Authorization scheme is case-insensitive (RFC 9110); the key is not.
      for (const [auth, status] of [['bearer ' + KEY, 200], ['BEARER ' + KEY, 200], ['Bearer ' + KEY.toUpperCase(), 401]])
        assert.equal((await fetch(base + '/v1/models', { headers: { Authorization: auth } })).status, status, auth);
      const m = await openai.models.retrieve('deepseek-reasoner');
      assert.equal(m.id, 'deepseek-reasoner');
      assert.equal(m.object, 'model');
      assert.ok(m.max_model_len > 0, JSON.stringify(m));  // vLLM's field: the context length
      assert.equal(tc.max_model_len, m.max_model_len);
      await assert.rejects(openai.models.retrieve('no-such-model'), (e) => e.status === 404);
    });
    await check('errors come in each protocol\'s shape', async () => {
      await assert.rejects(openai.chat.completions.create({ model: 'fathom-demo', messages: [] }),
                           (e) => e.status === 400 && e.error && typeof e.error.message === 'string');
      await assert.rejects(anthropic.messages.create({ model: 'fathom-demo', max_tokens: 5, messages: [{ role: 'bogus', content: 'a' }] }),
                           (e) => e.status === 400 && e.error && e.error.type === 'error');
      let r = await fetch(base + '/v1/chat/completions', { method: 'POST', body: '{not json',
        headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': 'application/json' } });
      assert.equal(r.status, 400);
      assert.ok((await r.json()).error.message);
      r = await fetch(base + '/v1/chat/completions', { method: 'POST', body: '{}', headers: { 'Content-Type': 'application/json' } });
      assert.equal(r.status, 401);
      r = await fetch(base + '/v1/messages', { method: 'POST', body: '{}', headers: { 'x-api-key': 'wrong' } });
      assert.equal(r.status, 401);
      assert.equal((await r.json()).type, 'error');
    });
    await check('completions with token ids, /v1/models, /health, /metrics', async () => {
      let r = await fetch(base + '/v1/completions', { method: 'POST',
        headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: [0, 1000, 2000, 3000], max_tokens: 5, ignore_eos: true }) });
      assert.equal(r.status, 200);
      const c = await r.json();
      assert.equal(c.object, 'text_completion');
      assert.equal(c.usage.completion_tokens, 5);
      const models = await openai.models.list();
      assert.deepEqual(models.data.map((m) => m.id), ['fathom-demo', 'deepseek-chat', 'deepseek-reasoner']);
      r = await fetch(base + '/health');
      assert.equal((await r.json()).status, 'ok');
      const metrics = await (await fetch(base + '/metrics')).text();
      assert.ok(/fathom_requests_total\{endpoint="chat_completions"\} \d+/.test(metrics));
      assert.ok(/fathom_prefix_cache_hit_tokens_total \d+/.test(metrics));
    });
    await check('completions stop strings end the text before them (stream and not)', async () => {
      const text = 'Roses are red. STOP here. Violets are blue.';
      const tk = await (await fetch(base + '/tokenize', { method: 'POST', headers: { Authorization: 'Bearer ' + KEY },
        body: JSON.stringify({ prompt: text }) })).json();
      const req = { model: 'fathom-demo', prompt: 'Poem:', max_tokens: tk.tokens.length + 4, stop: ['STOP', 'zzz'],
                    forced_output_ids: tk.tokens };
      const c = await openai.completions.create(req);
      assert.equal(c.choices[0].text, 'Roses are red. ');
      assert.equal(c.choices[0].finish_reason, 'stop');
      let streamed = '';
      let finish = null;
      for await (const ch of await openai.completions.create({ ...req, stream: true })) {
        streamed += ch.choices[0].text;
        if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
      }
      assert.equal(streamed, 'Roses are red. ');
      assert.equal(finish, 'stop');
      await assert.rejects(openai.completions.create({ ...req, stop: 5 }), (e) => e.status === 400);
      await assert.rejects(openai.completions.create({ ...req, min_p: 2 }), (e) => e.status === 400);
      const m = await openai.chat.completions.create({ model: 'fathom-demo', max_tokens: 3, min_p: 0.1,
        repetition_penalty: 1.2, messages: [{ role: 'user', content: 'Hi' }] });
      assert.ok(m.usage.completion_tokens >= 1);
      const metrics = await (await fetch(base + '/metrics')).text();
      assert.ok(/fathom_kv_pages_total \d+/.test(metrics) && /fathom_swa_replay_tokens_total \d+/.test(metrics));
    });
    await check('a client disconnect cancels the generation', async () => {
      const ctl = new AbortController();
      const r = await fetch(base + '/v1/completions', { method: 'POST', signal: ctl.signal,
        headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: [0, 5, 6], max_tokens: 100000, ignore_eos: true, stream: true }) });
      const reader = r.body.getReader();
      await reader.read();
      ctl.abort();
      let running = -1;
      for (let i = 0; i < 100; i++) {
        await new Promise((res) => setTimeout(res, 100));
        const m = await (await fetch(base + '/metrics')).text();
        running = Number(m.match(/fathom_running_sequences (\d+)/)[1]);
        if (running === 0) break;
      }
      assert.equal(running, 0);
    });
  } finally {
    proc.kill('SIGTERM');
    const code = await new Promise((res) => proc.on('exit', (c) => res(c)));
    if (code !== 0) { t.failures++; console.log('FAIL graceful shutdown: exit code ' + code); }
  }
  console.log(`serve clients: ${t.failures} failures`);
  process.exit(t.failures ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
