// End-to-end: structured outputs on the random demo model. Every constrained output must end
// with finish "stop" inside max_tokens 512 and validate independently: JSON with python3's
// jsonschema (validate_structured.py; formats checked), regexes with Python's re.fullmatch,
// choices by membership. 50 bounded JSON Schemas through Chat (streamed and not), then
// Responses, vLLM's structured_outputs / guided_* and llama-server's fields on Completions,
// regex, choice and GBNF grammars (parsed back with npm `gbnf`); deepseek-reasoner requests keep their reasoning free and
// the JSON after it; unsupported keywords and malformed specs are a 400 naming the field.
// Usage: node structured_test.js FATHOM NODE_MODULES
'use strict';
const path = require('path');
const { execFileSync } = require('child_process');
const { startServer, checker } = require('./start_server.js');
const assert = require('assert');

const [fathom, modules] = process.argv.slice(2);

const t = checker();
const check = t.check;

// Outputs to validate in Python: [{id, kind, schema|pattern|choices, text}].
function validate(cases) {
  const out = execFileSync('/usr/bin/python3', [path.join(__dirname, 'validate_structured.py')],
    { input: JSON.stringify(cases) }).toString();
  const bad = JSON.parse(out);
  assert.deepEqual(bad, [], JSON.stringify(bad, null, 1));
}

const int = (minimum, maximum) => ({ type: 'integer', minimum, maximum });
const str = (maxLength) => ({ type: 'string', maxLength });
const obj = (properties, required = Object.keys(properties)) =>
  ({ type: 'object', properties, required, additionalProperties: false });
const schemas = [
  obj({ name: str(12), age: int(0, 120) }),
  { type: 'string', enum: ['red', 'green', 'blue'] },
  int(-50, 50),
  { type: 'array', items: int(0, 9), maxItems: 5 },
  obj({ user: obj({ id: int(1, 1000), nick: str(8) }), active: { type: 'boolean' } }),
  { anyOf: [str(5), int(0, 10)] },
  { $defs: { point: obj({ x: int(0, 100), y: int(0, 100) }) }, type: 'object',
    properties: { a: { $ref: '#/$defs/point' }, b: { $ref: '#/$defs/point' } }, required: ['a', 'b'],
    additionalProperties: false },
  { type: 'array', items: { enum: ['a', 'b', 'c'] }, minItems: 1, maxItems: 4 },
  { type: 'boolean' },
  { type: 'null' },
  { const: 'fixed' },
  obj({ title: str(10), count: int(0, 3), flag: { type: 'boolean' } }, []),  // all optional
  { type: 'array', maxItems: 3, items: obj({ k: { enum: ['x', 'y'] }, v: int(0, 5) }) },
  { type: 'string', pattern: '^[A-Z]{2}[0-9]{3}$' },
  { type: 'string', format: 'date' },
  { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'array',
    prefixItems: [str(3), int(0, 9)], items: false, minItems: 2 },
  { oneOf: [int(0, 9), { type: 'string', enum: ['x'] }] },
  { allOf: [{ type: 'integer' }, { minimum: 0, maximum: 5 }] },
  { type: ['integer', 'null'], minimum: 1, maximum: 3 },
  { type: 'array', maxItems: 2, items: { type: 'array', maxItems: 2, items: int(0, 3) } },
  { enum: [1, 'two', null, true] },
  { type: 'string', minLength: 2, maxLength: 6 },
  obj({ id: { type: 'string', format: 'uuid' }, level: { enum: ['low', 'high'] } }),
  { definitions: { tag: { type: 'string', enum: ['t1', 't2'] } }, type: 'object',
    properties: { tags: { type: 'array', items: { $ref: '#/definitions/tag' }, maxItems: 3 },
      score: { anyOf: [int(0, 10), { type: 'null' }] } }, required: ['tags', 'score'],
    additionalProperties: false },
  // 26 more (50 in all): bounds, formats, patterns, unions, nesting, $defs, consts, Unicode.
  obj({ a: int(0, 9), b: int(10, 99), c: int(-9, -1) }),
  { type: 'array', items: { type: 'string', enum: ['north', 'south', 'east', 'west'] }, minItems: 2, maxItems: 2 },
  { $schema: 'https://json-schema.org/draft/2020-12/schema', ...obj({ point: { type: 'array',
    prefixItems: [int(0, 9), int(0, 9)], items: false, minItems: 2 } }) },
  obj({ kind: { const: 'circle' }, r: int(1, 9) }),
  { anyOf: [obj({ cat: { const: 'a' }, n: int(0, 3) }), obj({ cat: { const: 'b' }, s: str(4) })] },
  { type: 'string', pattern: '^[a-z]{3,5}-[0-9]{2}$' },
  { type: 'string', pattern: '^(yes|no|maybe)$' },
  { type: 'integer', minimum: 100, maximum: 200 },
  { type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 10 },
  obj({ tags: { type: 'array', items: str(5), maxItems: 3 }, priority: { enum: [1, 2, 3] } }),
  { type: 'array', items: { type: 'boolean' }, maxItems: 6 },
  { type: 'array', items: { type: 'null' }, maxItems: 2 },
  obj({ host: { type: 'string', format: 'ipv4' }, port: int(1, 65535) }),
  obj({ meta: obj({ created: { type: 'string', format: 'date' }, rev: int(0, 99) }), body: str(10) }),
  { oneOf: [{ type: 'boolean' }, { type: 'null' }] },
  { allOf: [{ type: 'string' }, { maxLength: 4 }] },
  { type: ['boolean', 'integer'], minimum: 0, maximum: 5 },
  obj({ matrix: { type: 'array', maxItems: 2, items: { type: 'array', maxItems: 2, items: { enum: [0, 1] } } } }),
  { enum: ['α', 'β', 'γ', '日本'] },
  obj({ name: { type: 'string', minLength: 1, maxLength: 8 }, ok: { type: 'boolean' } }, ['name']),
  obj({ a: obj({ b: obj({ c: int(0, 1) }) }) }),
  { type: 'array', items: obj({ op: { enum: ['add', 'del'] }, path: { type: 'string', pattern: '^/[a-z]{1,6}$' } }),
    minItems: 1, maxItems: 3 },
  { $defs: { color: { enum: ['red', 'green'] } }, type: 'array', items: { $ref: '#/$defs/color' }, maxItems: 4 },
  obj({ status: { enum: ['ok', 'error'] }, code: { anyOf: [int(200, 599), { type: 'null' }] } }),
  { const: 42 },
  { const: { a: 1, b: [true, null] } },
];
// The sanitizer build (FATHOM_TEST_LIGHT=1) runs the first 24.
const light = process.env.FATHOM_TEST_LIGHT === '1';
const activeSchemas = light ? schemas.slice(0, 24) : schemas;

async function post(port, p, body) {
  const r = await fetch(`http://127.0.0.1:${port}${p}`, { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, text };
}

// post() from another loopback address (a second client as the server sees it), with more
// headers if given.
function postFrom(localAddress, port, p, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = require('http').request({ host: '127.0.0.1', port, path: p, method: 'POST', localAddress,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data), ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    req.end(data);
  });
}

// A Chat Completions request, streamed or not: { content, reasoning, finish, usage }.
async function chat(port, body) {
  const r = await post(port, '/v1/chat/completions', body);
  assert.equal(r.status, 200, r.text);
  if (!body.stream) {
    const j = JSON.parse(r.text);
    const c = j.choices[0];
    return { content: c.message.content, reasoning: c.message.reasoning_content || '',
      finish: c.finish_reason, usage: j.usage, choices: j.choices, logprobs: c.logprobs };
  }
  let content = '', reasoning = '', finish = null, usage = null;
  for (const block of r.text.split('\n\n')) {
    const line = block.trim();
    if (!line.startsWith('data:')) continue;
    const data = line.slice(5).trim();
    if (data === '[DONE]') continue;
    const j = JSON.parse(data);
    assert.ok(!j.error, data);
    if (j.usage) usage = j.usage;
    for (const c of j.choices || []) {
      content += c.delta.content || '';
      reasoning += c.delta.reasoning_content || '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { content, reasoning, finish, usage };
}

const user = [{ role: 'user', content: 'Answer in JSON.' }];

(async () => {
  const { proc, port } = await startServer(fathom, ['--allow-forced-output']);
  try {
    await check(`${activeSchemas.length} JSON Schemas through Chat response_format (streamed and not) validate and stop`, async () => {
      const cases = [];
      for (let i = 0; i < activeSchemas.length; ++i) {
        const r = await chat(port, { model: 'deepseek-chat', max_tokens: 512, seed: 1000 + i,
          stream: i % 2 === 1, stream_options: i % 2 === 1 ? { include_usage: true } : undefined,
          messages: user,
          response_format: { type: 'json_schema', json_schema: { name: 's' + i, strict: true, schema: activeSchemas[i] } } });
        assert.equal(r.finish, 'stop', `schema ${i}: ${r.finish} ${r.content}`);
        assert.ok(r.usage.completion_tokens <= 512);
        cases.push({ id: i, kind: 'json', schema: activeSchemas[i], text: r.content });
      }
      console.log('     e.g. ' + cases.slice(0, 6).map((c) => c.text).join('  '));
      validate(cases);
    });

    await check('the same schemas again with other seeds, through every other field that takes a schema', async () => {
      const cases = [];
      for (let i = 0; i < activeSchemas.length; ++i) {
        const s = activeSchemas[i];
        let text, finish;
        if (i % 4 === 0) {  // Responses text.format
          const r = await post(port, '/v1/responses', { model: 'deepseek-chat', max_output_tokens: 512,
            input: 'JSON please', text: { format: { type: 'json_schema', name: 'x', schema: s, strict: true } } });
          assert.equal(r.status, 200, r.text);
          const j = JSON.parse(r.text);
          assert.equal(j.status, 'completed', r.text);
          text = j.output.find((o) => o.type === 'message').content[0].text;
          finish = 'stop';
        } else if (i % 2 === 1 && s.type === 'object') {  // Anthropic output_config.format
          const r = await post(port, '/v1/messages', { model: 'deepseek-chat', max_tokens: 512,
            messages: user, output_config: { format: { type: 'json_schema', schema: s } } });
          assert.equal(r.status, 200, r.text);
          const j = JSON.parse(r.text);
          text = j.content.find((b) => b.type === 'text').text;
          finish = j.stop_reason === 'end_turn' ? 'stop' : j.stop_reason;
        } else {
          const field = [null, { structured_outputs: { json: s } }, { guided_json: s },
            { json_schema: s }][i % 4];
          const viaChat = i % 8 === 1;  // structured_outputs on Chat too
          const r = viaChat
            ? await chat(port, { model: 'deepseek-chat', max_tokens: 512, seed: 7 * i, messages: user, ...field })
            : await post(port, '/v1/completions', { model: 'deepseek-chat', max_tokens: 512, seed: 7 * i,
              prompt: 'JSON:', ...field });
          if (viaChat) {
            text = r.content; finish = r.finish;
          } else {
            assert.equal(r.status, 200, r.text);
            const c = JSON.parse(r.text).choices[0];
            text = c.text; finish = c.finish_reason;
          }
        }
        assert.equal(finish, 'stop', `schema ${i}: ${text}`);
        cases.push({ id: i, kind: 'json', schema: s, text });
      }
      validate(cases);
    });

    await check('regex, choice and GBNF grammars through vLLM, llama-server and Chat fields', async () => {
      const regexes = ['[a-c]{3,5}', '\\d{3}-\\d{4}', '(cat|dog)s?', '[A-Z][a-z]{0,8}', '(ab|cd)+x{0,2}'];
      const cases = [];
      let id = 0;
      for (const [k, pattern] of regexes.entries()) {
        const body = k % 2 === 0
          ? { prompt: 'x', guided_regex: pattern } : { prompt: 'x', structured_outputs: { regex: pattern } };
        const r = await post(port, '/v1/completions', { model: 'deepseek-chat', max_tokens: 512, seed: k, ...body });
        assert.equal(r.status, 200, r.text);
        const c = JSON.parse(r.text).choices[0];
        assert.equal(c.finish_reason, 'stop', r.text);
        cases.push({ id: id++, kind: 'regex', pattern, text: c.text });
        const s = await chat(port, { model: 'deepseek-chat', max_tokens: 512, seed: k, stream: true,
          messages: user, guided_regex: pattern });
        assert.equal(s.finish, 'stop');
        cases.push({ id: id++, kind: 'regex', pattern, text: s.content });
      }
      const choices = ['yes', 'no', 'maybe later'];
      for (let k = 0; k < 4; ++k) {
        const body = k % 2 === 0 ? { guided_choice: choices } : { structured_outputs: { choice: choices } };
        const r = await chat(port, { model: 'deepseek-chat', max_tokens: 512, seed: k, stream: k > 1, messages: user, ...body });
        assert.equal(r.finish, 'stop');
        cases.push({ id: id++, kind: 'choice', choices, text: r.content });
      }
      // GBNF outputs are parsed with the same grammar by an independent GBNF parser (npm
      // `gbnf`; it has no {m,n}, so the grammars spell bounds with '?'): a finished output must be
      // a complete sentence, a cut one (the unbounded recursive grammar) a prefix of one.
      const { default: GBNF } = await import(path.join(modules, 'gbnf/dist/index.js'));
      const gbnfs = [
        ['pair', 'root ::= "(" num "," ws num ")"\nnum ::= [0-9] [0-9]? [0-9]?\nws ::= " "?', true],
        ['list', 'root ::= "[" item ("," item)? ("," item)? "]"\nitem ::= "\\"" [a-z] [a-z]? [a-z]? "\\""', true],
        ['kv', 'root ::= pair (";" pair)?\npair ::= key "=" (num | "true" | "false")\nkey ::= [a-z] [a-z0-9_]?\n' +
          'num ::= "-"? [1-9] [0-9]? [0-9]?', true],
        ['arith', 'root ::= expr\nexpr ::= term (("+" | "*") term)*\nterm ::= [0-9] | "(" expr ")"', false],
      ];
      for (const [k, [name, gbnf, bounded]] of gbnfs.entries()) {
        for (const [f, field] of ['grammar', 'guided_grammar', 'structured_outputs'].entries()) {
          const body = field === 'structured_outputs' ? { structured_outputs: { grammar: gbnf } } : { [field]: gbnf };
          const r = await post(port, '/v1/completions', { model: 'deepseek-chat', max_tokens: 512, seed: 3 * k + f, prompt: 'p', ...body });
          assert.equal(r.status, 200, r.text);
          const c = JSON.parse(r.text).choices[0];
          if (bounded) assert.equal(c.finish_reason, 'stop', `${name}: ${r.text}`);
          let state;
          try {
            state = GBNF(gbnf).add(c.text);
          } catch (e) {
            assert.fail(`${name} via ${field}: the reference parser rejects ${JSON.stringify(c.text)}: ${e.message}`);
          }
          const complete = [...state].some((rule) => rule.type === 'end');
          if (c.finish_reason === 'stop') assert.ok(complete, `${name} via ${field}: ${JSON.stringify(c.text)} is not a whole sentence`);
        }
      }
      // The reference parser is a real check: it rejects what the grammars do not derive.
      assert.throws(() => GBNF(gbnfs[0][1]).add('(1234,5)'));
      assert.ok(![...GBNF(gbnfs[1][1]).add('["ab","c"')].some((rule) => rule.type === 'end'));
      validate(cases);
    });

    await check('n choices each follow the schema; logprobs are finite (the masked distribution)', async () => {
      const s = schemas[0];
      const r = await chat(port, { model: 'deepseek-chat', max_tokens: 512, n: 3, logprobs: true, top_logprobs: 3,
        messages: user, response_format: { type: 'json_schema', json_schema: { name: 'n', schema: s } } });
      assert.equal(r.choices.length, 3);
      const cases = r.choices.map((c, i) => {
        assert.equal(c.finish_reason, 'stop');
        for (const t of c.logprobs.content) {
          assert.ok(Number.isFinite(t.logprob), JSON.stringify(t));
          for (const a of t.top_logprobs) assert.ok(Number.isFinite(a.logprob), JSON.stringify(t));
        }
        return { id: i, kind: 'json', schema: s, text: c.message.content };
      });
      validate(cases);
    });

    await check('deepseek-reasoner: the reasoning stays free, the JSON comes after it', async () => {
      const tok = JSON.parse((await post(port, '/tokenize', { prompt: 'Let me think { not json </think>' })).text).tokens;
      assert.equal(tok[tok.length - 1], JSON.parse((await post(port, '/tokenize', { prompt: '</think>' })).text).tokens[0]);
      const cases = [];
      for (let i = 0; i < 4; ++i) {
        const s = schemas[[0, 4, 6, 12][i]];
        // Forced reasoning that is not JSON, then </think>: the constraint starts after it.
        const r = await chat(port, { model: 'deepseek-reasoner', max_tokens: 512, seed: i, stream: i % 2 === 1,
          messages: user, forced_output_ids: tok,
          response_format: { type: 'json_schema', json_schema: { name: 'r', schema: s } } });
        assert.equal(r.finish, 'stop', r.content);
        assert.ok(r.reasoning.includes('not json'), r.reasoning);
        cases.push({ id: i, kind: 'json', schema: s, text: r.content });
      }
      // Sampled reasoning (the random model never closes it; the budget does), then the JSON.
      const r = await chat(port, { model: 'deepseek-reasoner', max_tokens: 1600, seed: 5,
        thinking: { type: 'enabled', budget_tokens: 1024 }, messages: user,
        structured_outputs: { json: schemas[1] } });
      assert.equal(r.finish, 'stop', r.content);
      assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 1025);
      assert.ok(r.reasoning.length > 0);
      cases.push({ id: 9, kind: 'json', schema: schemas[1], text: r.content });
      validate(cases);
    });

    await check('strict tools: every protocol\'s calls follow the tool\'s schema (required, named, any)', async () => {
      const weather = obj({ city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] }, days: int(1, 7),
        note: str(6), units: { enum: ['c', 'f'] }, alerts: { type: 'boolean' } }, ['city', 'days', 'units']);
      const clock = obj({ zone: { type: 'string', enum: ['UTC', 'CET'] }, at: { type: 'array', items: int(0, 23), maxItems: 3 } });
      const fn = (name, parameters) => ({ type: 'function', function: { name, strict: true, parameters } });
      const cases = [];
      let id = 0;
      const calls = [];
      for (let i = 0; i < 6; ++i) {
        // tool_choice required (streamed and not), then a named tool: the block is forced.
        const named = i >= 4;
        const r = await post(port, '/v1/chat/completions', { model: 'deepseek-chat', max_tokens: 400, seed: 70 + i,
          stream: i % 2 === 1, messages: [{ role: 'user', content: 'Weather or time?' }],
          tools: [fn('get_weather', weather), fn('get_time', clock)],
          tool_choice: named ? { type: 'function', function: { name: 'get_time' } } : 'required' });
        assert.equal(r.status, 200, r.text);
        let list = [], finish = null;
        if (i % 2 === 0) {
          const c = JSON.parse(r.text).choices[0];
          list = (c.message.tool_calls || []).map((t) => t.function);
          finish = c.finish_reason;
        } else {
          const byIndex = {};
          for (const block of r.text.split('\n\n')) {
            const line = block.trim();
            if (!line.startsWith('data:') || line === 'data: [DONE]') continue;
            const j = JSON.parse(line.slice(5));
            assert.ok(!j.error, line);
            for (const c of j.choices || []) {
              for (const t of (c.delta.tool_calls || [])) {
                const e = byIndex[t.index] || (byIndex[t.index] = { name: '', arguments: '' });
                e.name += t.function?.name || '';
                e.arguments += t.function?.arguments || '';
              }
              if (c.finish_reason) finish = c.finish_reason;
            }
          }
          list = Object.values(byIndex);
        }
        assert.equal(finish, 'tool_calls', r.text.slice(-400));
        assert.ok(list.length >= 1, r.text.slice(-400));
        for (const f of list) {
          if (named) assert.equal(f.name, 'get_time');
          assert.ok(f.name === 'get_weather' || f.name === 'get_time', f.name);
          cases.push({ id: id++, kind: 'json', schema: f.name === 'get_weather' ? weather : clock, text: f.arguments });
          calls.push(f.name);
        }
      }
      // Anthropic: tool_choice any; tool_use inputs follow input_schema.
      for (let i = 0; i < 2; ++i) {
        const r = await post(port, '/v1/messages', { model: 'deepseek-chat', max_tokens: 400,
          messages: [{ role: 'user', content: 'Weather?' }], tool_choice: { type: 'any' },
          tools: [{ name: 'get_weather', strict: true, input_schema: weather }] });
        assert.equal(r.status, 200, r.text);
        const j = JSON.parse(r.text);
        assert.equal(j.stop_reason, 'tool_use', r.text);
        for (const b of j.content.filter((b) => b.type === 'tool_use'))
          cases.push({ id: id++, kind: 'json', schema: weather, text: JSON.stringify(b.input) });
      }
      // Responses: function_call items.
      const r = await post(port, '/v1/responses', { model: 'deepseek-chat', max_output_tokens: 400, input: 'Time?',
        tool_choice: 'required', tools: [{ type: 'function', name: 'get_time', strict: true, parameters: clock }] });
      assert.equal(r.status, 200, r.text);
      for (const item of JSON.parse(r.text).output.filter((o) => o.type === 'function_call'))
        cases.push({ id: id++, kind: 'json', schema: clock, text: item.arguments });
      assert.ok(cases.length >= 9, JSON.stringify(cases));
      validate(cases);
      console.log(`     ${cases.length} calls validated (${calls.filter((c) => c === 'get_weather').length} get_weather)`);
    });

    await check('json_object: a JSON object when the model stops', async () => {
      const r = await chat(port, { model: 'deepseek-chat', max_tokens: 512, seed: 3,
        messages: user, response_format: { type: 'json_object' } });
      assert.ok(r.content.startsWith('{'), r.content);
      if (r.finish === 'stop') assert.equal(typeof JSON.parse(r.content), 'object');
      else assert.equal(r.finish, 'length');
    });

    await check('unsupported keywords and malformed specs are a 400 naming the field', async () => {
      const cases = [
        [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', patternProperties: { a: {} } } } } },
          'response_format.json_schema.schema', /patternProperties/],
        [{ guided_json: { type: 'object', propertyNames: { maxLength: 3 } } }, 'guided_json', /propertyNames/],
        [{ guided_regex: '[a-' }, 'guided_regex', /./],
        [{ structured_outputs: { grammar: 'root ::= undefined_rule' } }, 'structured_outputs.grammar', /./],
        [{ guided_choice: [] }, 'guided_choice', /./],
        [{ guided_regex: 'a', guided_choice: ['a'] }, 'guided_choice', /one structured output/],
        [{ tools: [{ type: 'function', function: { name: 'f', strict: 'yes', parameters: { type: 'object' } } }] },
          'tools[0].function.strict', /boolean/],
        [{ tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object', patternProperties: {} } } }] },
          'tools', /patternProperties/],
        [{ tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object' } } }],
          response_format: { type: 'json_object' } }, 'tools', /response_format/],
      ];
      for (const [extra, param, re] of cases) {
        const r = await post(port, '/v1/chat/completions', { model: 'deepseek-chat', max_tokens: 8, messages: user, ...extra });
        assert.equal(r.status, 400, r.text);
        const e = JSON.parse(r.text).error;
        assert.equal(e.param, param, r.text);
        assert.ok(re.test(e.message), r.text);
      }
      const r = await post(port, '/v1/completions', { model: 'deepseek-chat', prompt: 'x', grammar: 'root ::= (' });
      assert.equal(r.status, 400, r.text);
      assert.equal(JSON.parse(r.text).error.param, 'grammar');
    });
  } finally {
    proc.kill('SIGTERM');
  }
  // --grammar-jump-forward: forced text (keys, literals) is emitted without sampling; every
  // output still validates and stops, and the server reports the jumped tokens.
  const jf = await startServer(fathom, ['--grammar-jump-forward']);
  try {
    await check('--grammar-jump-forward: schemas validate and stop, forced text is jumped', async () => {
      const cases = [];
      for (let i = 0; i < 8; ++i) {
        const r = await chat(jf.port, { model: 'deepseek-chat', max_tokens: 512, seed: 2000 + i, stream: i % 2 === 1,
          messages: user, response_format: { type: 'json_schema', json_schema: { name: 'j' + i, schema: activeSchemas[i] } } });
        assert.equal(r.finish, 'stop', `schema ${i}: ${r.finish} ${r.content}`);
        cases.push({ id: i, kind: 'json', schema: activeSchemas[i], text: r.content });
      }
      validate(cases);
      const m = await (await fetch(`http://127.0.0.1:${jf.port}/metrics`)).text();
      const jumped = Number(m.match(/^fathom_grammar_jump_forward_tokens_total (\S+)$/m)[1]);
      const masks = Number(m.match(/^fathom_grammar_masks_total (\S+)$/m)[1]);
      const ahead = Number(m.match(/^fathom_grammar_masks_ahead_total (\S+)$/m)[1]);
      console.log(`     ${jumped} tokens jumped, ${masks} masked`);
      assert.ok(jumped > 8, `jump-forward tokens ${jumped}`);
      assert.equal(ahead, masks, 'every mask computed beside the forward');
    });
  } finally {
    jf.proc.kill('SIGTERM');
  }

  // A grammar that takes seconds to compile (nested bounded repetitions: about 5 s of subset
  // construction here, then a 400 for being too large) on a server with one request worker
  // and one compile thread: the compile holds up no other request; a client that leaves stops
  // it; one that fails after a heartbeat committed the stream is the protocol's error event;
  // one still under way at the drain deadline ends with a 503 in the protocol's shape.
  const one = await startServer(fathom, ['--http-threads', '1', '--shutdown-timeout', '0.5',
    '--sse-keepalive', '0.2', '--forwarded-allow-ips', '127.0.0.1']);
  const exited = new Promise((res) => one.proc.on('exit', (c) => res(c)));
  const wideBody = { model: 'deepseek-chat', messages: user, max_tokens: 8,
    structured_outputs: { regex: '((a{1,100}){1,100}){1,100}' } };
  const sample = async (name) => {
    const m = await (await fetch(`http://127.0.0.1:${one.port}/metrics`)).text();
    const v = m.match(new RegExp(`^${name} (\\S+)$`, 'm'));
    assert.ok(v, `no ${name} in /metrics`);
    return Number(v[1]);
  };
  // The metric once it reaches `value`, or its value after `ms`.
  const until = async (name, value, ms) => {
    const t0 = Date.now();
    let v;
    while ((v = await sample(name)) < value && Date.now() - t0 < ms)
      await new Promise((res) => setTimeout(res, 10));
    return v;
  };
  try {
    await check('a long compile holds up no plain or cached-grammar request; a client that leaves stops it', async () => {
      const small = { model: 'deepseek-chat', messages: user, max_tokens: 8,
        structured_outputs: { choice: ['yes', 'no'] } };
      const warm = await post(one.port, '/v1/chat/completions', small);
      assert.equal(warm.status, 200, warm.text);
      const ctl = new AbortController();
      let settled = false;
      const pending = fetch(`http://127.0.0.1:${one.port}/v1/chat/completions`, { method: 'POST',
        signal: ctl.signal, headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(wideBody) }).catch(() => null).finally(() => { settled = true; });
      assert.equal(await until('fathom_grammar_compiles_total', 2, 60000), 2, 'no compile began');
      // The one request worker is free: a plain request, and a constrained one whose grammar
      // the cache holds, are answered while the compile runs.
      const r = await post(one.port, '/v1/completions', { prompt: 'hi', max_tokens: 2 });
      assert.equal(r.status, 200, r.text);
      const c = await post(one.port, '/v1/chat/completions', small);
      assert.equal(c.status, 200, c.text);
      assert.ok(['yes', 'no'].includes(JSON.parse(c.text).choices[0].message.content), c.text);
      assert.ok(!settled, 'the long compile ended first');
      assert.equal(await sample('fathom_grammar_compiles_total'), 2);
      ctl.abort();
      await pending;
      assert.equal(await until('fathom_grammar_compiles_cancelled_total', 1, 5000), 1,
        'the compile went on for 5 s after its client left');
      assert.equal(await sample('fathom_grammar_cache_grammars'), 1);
    });
    await check('a compile that fails after a heartbeat: the protocol\'s error event in the stream', async () => {
      const r = await post(one.port, '/v1/chat/completions', { ...wideBody, stream: true });
      assert.equal(r.status, 200, r.text);
      assert.ok(r.text.startsWith(': keep-alive'), r.text);
      const events = r.text.split('\n\n').filter((b) => b.startsWith('data: '));
      assert.equal(events.length, 2, r.text);
      const e = JSON.parse(events[0].slice(6)).error;
      assert.equal(e.type, 'invalid_request_error', r.text);
      assert.ok(/^'structured_outputs.regex': not supported: grammar too large/.test(e.message), r.text);
      assert.equal(events[1], 'data: [DONE]');
      // The failure is remembered: the same grammar again is a 400 at once, with no compile.
      const again = await post(one.port, '/v1/chat/completions', wideBody);
      assert.equal(again.status, 400, again.text);
      assert.ok(/grammar too large/.test(again.text), again.text);
      assert.equal(await sample('fathom_grammar_compiles_total'), 3);
    });
    await check('clients take turns at the compile thread: a client\'s queued slow grammars do not hold up another\'s', async () => {
      // Client A (127.0.0.1): two slow grammars, the first compiling, the second queued.
      const ctl = [new AbortController(), new AbortController()];
      const settled = [false, false];
      const slow = ctl.map((c, i) => fetch(`http://127.0.0.1:${one.port}/v1/chat/completions`, { method: 'POST',
        signal: c.signal, headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ ...wideBody, structured_outputs: { regex: '((a{1,100}){1,100}){1,100}' + 'cd'[i] } }) })
        .catch(() => null).finally(() => { settled[i] = true; }));
      assert.equal(await until('fathom_grammar_compiles_total', 4, 60000), 4, 'no compile began');
      assert.equal(await until('fathom_grammar_compiles_waiting', 1, 5000), 1);
      // Client B (127.0.0.2) and client C (10.9.9.9, through a proxy at 127.0.0.1 that the
      // server trusts with --forwarded-allow-ips, so a client other than A) each ask for a new
      // small grammar after them; then A's running compile stops (its client leaves). First in,
      // first out would start A's second grammar next.
      const small = (choice) => ({ model: 'deepseek-chat', messages: user, max_tokens: 8,
        structured_outputs: { choice } });
      const b = postFrom('127.0.0.2', one.port, '/v1/chat/completions', small(['maybe', 'never']));
      const c = postFrom('127.0.0.1', one.port, '/v1/chat/completions', small(['often', 'seldom']),
        { 'X-Forwarded-For': '10.9.9.9' });
      assert.equal(await until('fathom_grammar_compiles_waiting', 3, 5000), 3);
      ctl[0].abort();
      for (const [r, choice] of [[await b, ['maybe', 'never']], [await c, ['often', 'seldom']]]) {
        assert.equal(r.status, 200, r.text);
        assert.ok(choice.includes(JSON.parse(r.text).choices[0].message.content), r.text);
      }
      // A's second compile (about 5 s, then a 400) had not run first.
      assert.ok(!settled[1], 'A\'s second grammar was compiled before B\'s and C\'s');
      ctl[1].abort();
      await Promise.all(slow);
      assert.equal(await until('fathom_grammar_compiles_cancelled_total', 3, 5000), 3);
      assert.equal(await sample('fathom_grammar_compiles_waiting'), 0);
    });
    await check('requests for one new grammar share its compile: one compile, one answer for all', async () => {
      const compiles = await sample('fathom_grammar_compiles_total');
      const shared = await sample('fathom_grammar_compiles_shared_total');
      const body = { ...wideBody, structured_outputs: { regex: '((a{1,100}){1,100}){1,100}e' } };
      const first = postFrom('127.0.0.1', one.port, '/v1/chat/completions', body);
      assert.equal(await until('fathom_grammar_compiles_total', compiles + 1, 60000), compiles + 1,
        'no compile began');
      // Two more clients ask for it while it compiles (about 5 s, then a 400 for its size).
      const others = ['127.0.0.2', '127.0.0.3'].map((a) => postFrom(a, one.port, '/v1/chat/completions', body));
      assert.equal(await until('fathom_grammar_compiles_shared_total', shared + 2, 5000), shared + 2);
      const rs = await Promise.all([first, ...others]);
      for (const r of rs) {
        assert.equal(r.status, 400, r.text);
        assert.ok(/grammar too large/.test(r.text), r.text);
        assert.equal(r.text, rs[0].text);
      }
      assert.equal(await sample('fathom_grammar_compiles_total'), compiles + 1, 'the grammar compiled more than once');
    });
    await check('SIGTERM during a grammar compile: a 503 at the drain deadline, exit 0', async () => {
      const before = await sample('fathom_grammar_compiles_total');
      const pending = post(one.port, '/v1/chat/completions',
        { ...wideBody, structured_outputs: { regex: '((a{1,100}){1,100}){1,100}b' } });
      assert.equal(await until('fathom_grammar_compiles_total', before + 1, 60000), before + 1, 'no compile began');
      one.proc.kill('SIGTERM');
      const r = await pending;
      assert.equal(r.status, 503, r.text);
      const e = JSON.parse(r.text).error;
      assert.equal(e.type, 'server_error', r.text);
      assert.equal(e.code, 'cancelled', r.text);
      assert.ok(/shutting down/.test(e.message), r.text);
      assert.equal(await exited, 0);
    });
  } finally {
    one.proc.kill('SIGKILL');
  }
  console.log(`serve structured: ${t.failures} failures`);
  process.exit(t.failures ? 1 : 0);
})().catch((e) => {
  console.log('FAIL ' + (e && e.stack || e));
  process.exit(1);
});
