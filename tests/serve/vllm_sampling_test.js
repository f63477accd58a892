// End-to-end: OpenAI's logit_bias and vLLM's allowed_token_ids, min_tokens, bad_words,
// truncate_prompt_tokens and include_stop_str_in_output (SGLang's
// logit_bias and min_new_tokens on /generate), on a running demo server and through a router in
// front of it. The truth is each field's definition applied here to what the server returns
// without it:
//   - logit_bias +100 makes every token that id (the official openai client, Completions and
//     Chat); -100 on the greedy first token replaces it;
//   - allowed_token_ids: every token is one of them; with the greedy ids allowed, nothing
//     changes;
//   - min_tokens: a stop string ends the output only where it ends past the text of the first
//     min_tokens tokens (vLLM's rule, computed here for every min_tokens over forced output,
//     on /v1/completions streamed and not, and on Chat); a stop token id is not generated
//     before them;
//   - bad_words: vLLM's tokenized forms (the word, and the word after a space when that is
//     another token sequence of the same length, computed here with /tokenize) never complete
//     in the output, which equals the plain output up to the first place one would;
//   - hostile values are a 400 naming the field; controls that leave nothing to sample are an
//     error (a 400, or an error event in a stream), and the server goes on;
//   - truncate_prompt_tokens k: the answer to the prompt's last k ids (Completions, by ids, and
//     Chat, against its /tokenize rendering); include_stop_str_in_output: the text up to and
//     with the stop string;
//   - skip_special_tokens false on /v1/completions: special tokens written as spelled; OpenAI's
//     echo: the prompt's text first (as given, or its ids decoded with special tokens);
//   - through `fathom router` every control gives the replica's own answer.
// Usage: node vllm_sampling_test.js FATHOM NODE_MODULES
'use strict';
const assert = require('assert');
const path = require('path');
const { startServer, startRouter, checker } = require('./start_server.js');

const [fathom, modules] = process.argv.slice(2);
const OpenAI = require(path.join(modules, 'openai')).default;
const t = checker();
const check = t.check;

const EOS = 1;  // <｜end▁of▁sentence｜>

// A completion's generated ids, text and finish reason, streamed or not; throws on an error.
async function complete(url, body, stream = false) {
  const r = await fetch(url + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, stream, return_token_ids: true }) });
  const text = await r.text();
  assert.equal(r.status, 200, JSON.stringify(body) + ' -> ' + text);
  if (!stream) {
    const c = JSON.parse(text).choices[0];
    return { ids: c.token_ids, text: c.text, finish: c.finish_reason };
  }
  const out = { ids: [], text: '', finish: null };
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const ev = JSON.parse(line.slice(6));
    assert.ok(!ev.error, line);
    for (const c of ev.choices || []) {
      out.ids.push(...(c.token_ids || []));
      out.text += c.text || '';
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}

(async () => {
  const { proc, port } = await startServer(fathom, ['--allow-forced-output']);
  const url = `http://127.0.0.1:${port}`;
  let router = null;
  const post = (u, p, body) => fetch(u + p, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                              body: JSON.stringify(body) });
  const tokenize = async (text) => (await (await post(url, '/tokenize',
    { prompt: text, add_special_tokens: false })).json()).tokens;
  const detokenize = async (ids) => (await (await post(url, '/detokenize', { tokens: ids })).json()).prompt;
  const openai = new OpenAI({ apiKey: 'none', baseURL: url + '/v1', maxRetries: 0 });
  // No model: each server's first served name (a router serves its own).
  const base = { prompt: 'The quick brown fox', max_tokens: 12, temperature: 0, ignore_eos: true };
  try {
    const plain = await complete(url, base);
    assert.equal(plain.ids.length, 12);
    const fox = (await tokenize(' fox'))[0];

    await check('logit_bias: +100 makes every token that id, -100 replaces the greedy first token (official client)', async () => {
      const c = await openai.completions.create({ ...base, logit_bias: { [fox]: 100 }, return_token_ids: true });
      assert.deepEqual(c.choices[0].token_ids, Array(12).fill(fox));
      const chat = await openai.chat.completions.create({
        model: 'deepseek-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, temperature: 0,
        logit_bias: { [fox]: 100 } });
      assert.equal(chat.choices[0].message.content, await detokenize(Array(5).fill(fox)));
      const away = await complete(url, { ...base, logit_bias: { [plain.ids[0]]: -100 } });
      assert.notEqual(away.ids[0], plain.ids[0]);
      // A bias of 0, or on ids that are not near the top, changes nothing.
      assert.deepEqual((await complete(url, { ...base, logit_bias: { [plain.ids[0]]: 0, 5: -50 } })).ids, plain.ids);
    });

    await check('allowed_token_ids: every token is one of them; the greedy ids allowed change nothing', async () => {
      const allowed = [fox, plain.ids[4], 2000];
      for (const stream of [false, true]) {
        const r = await complete(url, { ...base, allowed_token_ids: allowed }, stream);
        assert.equal(r.ids.length, 12);
        for (const id of r.ids) assert.ok(allowed.includes(id), `${id} not allowed`);
      }
      const same = await complete(url, { ...base, allowed_token_ids: [...plain.ids, 7, 8] });
      assert.deepEqual(same.ids, plain.ids);
    });

    // Forced output whose text holds the stop string twice: for every min_tokens the answer
    // is the text cut at the first "END" that ends past the text of the first min_tokens ids.
    const said = 'Hello END there, END again and END more';
    const forced = await tokenize(said);
    assert.equal(await detokenize(forced), said);
    const expected = async (m) => {
      const unchecked = (await detokenize(forced.slice(0, m))).length;
      for (let i = said.indexOf('END'); i >= 0; i = said.indexOf('END', i + 1))
        if (i + 3 > unchecked) return said.slice(0, i);
      return said;
    };
    await check(`min_tokens: a stop string ends the output only past the first min_tokens tokens' text (0..${forced.length}, Completions streamed and not, Chat)`, async () => {
      const cuts = new Set();
      for (let m = 0; m <= forced.length; ++m) {
        const want = await expected(m);
        cuts.add(want.length);
        for (const stream of [false, true]) {
          const r = await complete(url, { ...base, max_tokens: forced.length, forced_output_ids: forced,
                                          stop: ['END'], min_tokens: m }, stream);
          assert.equal(r.text, want, `min_tokens ${m} stream ${stream}`);
          assert.equal(r.finish, want === said ? 'length' : 'stop');
        }
        const chat = await (await post(url, '/v1/chat/completions', {
          model: 'deepseek-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: forced.length,
          forced_output_ids: forced, stop: ['END'], min_tokens: m, ignore_eos: true })).json();
        assert.equal(chat.choices[0].message.content, want, `chat min_tokens ${m}: ${JSON.stringify(chat)}`);
      }
      assert.ok(cuts.size >= 3, 'the cases cut at three places at least');
    });

    await check('min_tokens: no stop token id (nor EOS) before min_tokens tokens; /generate min_new_tokens alike', async () => {
      const stop = plain.ids[1];
      const early = await complete(url, { ...base, ignore_eos: false, stop_token_ids: [stop] });
      assert.deepEqual(early.ids, plain.ids.slice(0, 2));
      const held = await complete(url, { ...base, ignore_eos: false, stop_token_ids: [stop], min_tokens: 6 });
      assert.ok(held.ids.length >= 6, JSON.stringify(held.ids));
      assert.ok(!held.ids.slice(0, 5).includes(stop) && !held.ids.slice(0, 5).includes(EOS), JSON.stringify(held.ids));
      const gen = await (await post(url, '/generate', { text: base.prompt, sampling_params: {
        max_new_tokens: 12, temperature: 0, stop_token_ids: [stop], min_new_tokens: 6, logit_bias: { 5: -1 } } })).json();
      assert.deepEqual(gen.output_ids, held.ids, JSON.stringify(gen));
      const biased = await (await post(url, '/generate', { text: base.prompt, sampling_params: {
        max_new_tokens: 4, temperature: 0, logit_bias: { [fox]: 100 } } })).json();
      assert.deepEqual(biased.output_ids, Array(4).fill(fox), JSON.stringify(biased));
    });

    await check('bad_words: none of vLLM\'s tokenized forms completes; the output is the plain one up to where one would', async () => {
      let tried = 0;
      for (let k = 1; k < 12; ++k) {
        const word = await detokenize([plain.ids[k]]);
        const stripped = word.replace(/^\s+/, '');
        if (!stripped || /\uFFFD/.test(word)) continue;
        const forms = [await tokenize(stripped)];
        const spaced = await tokenize(' ' + stripped);
        if (spaced.length && spaced[0] !== forms[0][0] && spaced.length === forms[0].length) forms.push(spaced);
        const endsWith = (ids, j, f) => j + 1 >= f.length && f.every((x, q) => ids[j + 1 - f.length + q] === x);
        // A word whose forms are not the plain output's tokens (its text split otherwise) bans
        // nothing there.
        const first = plain.ids.findIndex((_, j) => forms.some((f) => endsWith(plain.ids, j, f)));
        if (first < 0) continue;
        for (const stream of [false, true]) {
          const r = await complete(url, { ...base, bad_words: [word] }, stream);
          assert.deepEqual(r.ids.slice(0, first), plain.ids.slice(0, first));
          assert.notEqual(r.ids[first], plain.ids[first]);
          for (let j = 0; j < r.ids.length; ++j)
            assert.ok(!forms.some((f) => endsWith(r.ids, j, f)), `a bad word completes at ${j}: ${JSON.stringify(r.ids)}`);
        }
        // The id-level form (what a router sends) gives the same answer.
        const byIds = await complete(url, { ...base, bad_words_ids: forms });
        assert.deepEqual(byIds.ids, (await complete(url, { ...base, bad_words: [word] })).ids);
        ++tried;
      }
      assert.ok(tried >= 2, 'too few words to try');
    });

    await check('hostile values: a 400 naming the field; controls that leave nothing are an error; the server goes on', async () => {
      const cases = [
        [{ logit_bias: { 129280: 1 } }, 'logit_bias'],
        [{ logit_bias: { 1: 1e9 } }, 'logit_bias'],
        [{ logit_bias: { '1.5': 1 } }, 'logit_bias'],
        [{ logit_bias: { 1: null } }, 'logit_bias'],
        [{ logit_bias: 'x' }, 'logit_bias'],
        [{ allowed_token_ids: [129280] }, 'allowed_token_ids'],
        [{ allowed_token_ids: [] }, 'allowed_token_ids'],
        [{ bad_words_ids: [[5, 129280]] }, 'bad_words'],
        [{ bad_words: ['   '] }, 'bad_words'],
        [{ bad_words: Array(129).fill('x') }, 'bad_words'],
        [{ bad_words: ['x'.repeat(70000)] }, 'bad_words'],
        [{ bad_words_ids: [Array(1000).fill(5), Array(25).fill(6)] }, 'bad_words'],
        [{ min_tokens: 13 }, 'min_tokens'],
        [{ min_tokens: '3' }, 'min_tokens'],
      ];
      for (const [extra, param] of cases) {
        const r = await post(url, '/v1/completions', { ...base, ...extra });
        const j = await r.json();
        assert.equal(r.status, 400, JSON.stringify(extra) + ' -> ' + JSON.stringify(j));
        assert.equal(j.error.param, param, JSON.stringify(extra) + ' -> ' + JSON.stringify(j));
      }
      const gen = await post(url, '/generate', { text: 'x', sampling_params: { allowed_token_ids: [5] } });
      assert.equal(gen.status, 400);
      const nothing = { ...base, ignore_eos: false, allowed_token_ids: [EOS], min_tokens: 2 };
      const r = await post(url, '/v1/completions', nothing);
      const j = await r.json();
      assert.equal(r.status, 400, JSON.stringify(j));
      assert.ok(j.error.message.includes('leave no token to sample'), j.error.message);
      const s = await (await post(url, '/v1/completions', { ...nothing, stream: true })).text();
      assert.ok(s.includes('leave no token to sample') && s.includes('"error"'), s);
      assert.deepEqual((await complete(url, base)).ids, plain.ids);
      // A grammar outranks min_tokens: the JSON answer ends where the schema does.
      const schema = { type: 'object', properties: { a: { enum: [1] } }, required: ['a'], additionalProperties: false };
      const json = await (await post(url, '/v1/chat/completions', { model: 'deepseek-chat', messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 100, min_tokens: 60, response_format: { type: 'json_schema', json_schema: { name: 'a', schema } } })).json();
      assert.equal(json.choices[0].finish_reason, 'stop', JSON.stringify(json));
      assert.deepEqual(JSON.parse(json.choices[0].message.content), { a: 1 });
    });

    await check('truncate_prompt_tokens: the answer to the prompt\'s last k ids (Completions, Chat); -1 and a k above the prompt change nothing', async () => {
      const long = { ...base, prompt: 'One two three four five six seven eight nine ten eleven twelve' };
      const ids = await tokenize(long.prompt);
      assert.ok(ids.length > 8);
      for (const k of [1, 5, 8]) {
        const cut = await complete(url, { ...long, truncate_prompt_tokens: k });
        const want = await complete(url, { ...long, prompt: ids.slice(-k) });
        assert.deepEqual(cut.ids, want.ids, `k ${k}`);
        const r = await (await post(url, '/v1/completions', { ...long, truncate_prompt_tokens: k, return_token_ids: true })).json();
        assert.equal(r.usage.prompt_tokens, k);
        assert.deepEqual(r.choices[0].prompt_token_ids, ids.slice(-k));
      }
      const whole = await complete(url, long);
      assert.deepEqual((await complete(url, { ...long, truncate_prompt_tokens: -1 })).ids, whole.ids);
      assert.deepEqual((await complete(url, { ...long, truncate_prompt_tokens: 1000 })).ids, whole.ids);
      // Chat: the rendered prompt's last k ids (vLLM cuts the rendering, template included).
      const messages = [{ role: 'user', content: 'Tell me about the quick brown fox and the lazy dog.' }];
      const rendered = (await (await post(url, '/tokenize', { model: 'deepseek-chat', messages })).json()).tokens;
      const k = rendered.length - 4;
      const chat = await (await post(url, '/v1/chat/completions', { model: 'deepseek-chat', messages, max_tokens: 8,
        temperature: 0, ignore_eos: true, truncate_prompt_tokens: k })).json();
      assert.equal(chat.usage.prompt_tokens, k, JSON.stringify(chat));
      const same = await complete(url, { ...base, prompt: rendered.slice(-k), max_tokens: 8 });
      assert.equal(chat.choices[0].message.content, same.text);
      for (const bad of [0, -2, 1.5, 'x', 2 ** 21]) {
        const e = await post(url, '/v1/completions', { ...long, truncate_prompt_tokens: bad });
        assert.equal(e.status, 400, String(bad));
        assert.equal((await e.json()).error.param, 'truncate_prompt_tokens', String(bad));
      }
    });

    await check('include_stop_str_in_output: the text up to and with the stop string (Completions streamed and not, Chat)', async () => {
      for (const m of [0, 4]) {
        const cut = await expected(m);
        const want = cut === said ? said : said.slice(0, cut.length + 3);
        for (const stream of [false, true]) {
          const r = await complete(url, { ...base, max_tokens: forced.length, forced_output_ids: forced, stop: ['END'],
                                          min_tokens: m, include_stop_str_in_output: true }, stream);
          assert.equal(r.text, want, `min_tokens ${m} stream ${stream}`);
        }
        const chat = await (await post(url, '/v1/chat/completions', {
          model: 'deepseek-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: forced.length,
          forced_output_ids: forced, stop: ['END'], min_tokens: m, ignore_eos: true,
          include_stop_str_in_output: true })).json();
        assert.equal(chat.choices[0].message.content, want, JSON.stringify(chat));
      }
    });

    await check('skip_special_tokens: false writes special tokens as spelled (not the EOS that ends the output)', async () => {
      // BOS is special (skipped by default); <think> is an added token that is not (never skipped).
      const text = '<think>abc<｜begin▁of▁sentence｜>Done';
      const ids = await tokenize(text);
      assert.ok(ids.length >= 4 && ids.length < text.length, JSON.stringify(ids));
      const body = { ...base, ignore_eos: false, max_tokens: ids.length + 1, forced_output_ids: [...ids, EOS] };
      for (const stream of [false, true]) {
        const raw = await complete(url, { ...body, skip_special_tokens: false, spaces_between_special_tokens: true }, stream);
        assert.equal(raw.text, text);
        assert.equal(raw.finish, 'stop');
        assert.equal((await complete(url, body, stream)).text, '<think>abcDone');
      }
      const e = await post(url, '/v1/chat/completions', { model: 'deepseek-chat', messages: [{ role: 'user', content: 'hi' }],
                                                         skip_special_tokens: false });
      assert.equal(e.status, 400);
      assert.equal((await e.json()).error.param, 'skip_special_tokens');
    });

    await check('echo: each choice\'s text starts with the prompt\'s (as given, or its ids\' text); with logprobs a 400', async () => {
      for (const stream of [false, true]) {
        const r = await complete(url, { ...base, echo: true }, stream);
        assert.deepEqual(r.ids, plain.ids);
        assert.equal(r.text, base.prompt + plain.text);
      }
      const two = await (await post(url, '/v1/completions', { ...base, temperature: 1, seed: 3, n: 2, echo: true })).json();
      const alone = await (await post(url, '/v1/completions', { ...base, temperature: 1, seed: 3, n: 2 })).json();
      for (const c of two.choices)
        assert.equal(c.text, base.prompt + alone.choices.find((a) => a.index === c.index).text);
      const ids = [0, ...(await tokenize(' and the lazy dog'))];  // BOS, written as spelled
      const byIds = await complete(url, { ...base, prompt: ids, echo: true });
      const plainIds = await complete(url, { ...base, prompt: ids });
      assert.ok((await detokenize(ids)).startsWith('<｜begin▁of▁sentence｜>'));
      assert.equal(byIds.text, (await detokenize(ids)) + plainIds.text);
      const cut = await complete(url, { ...base, echo: true, truncate_prompt_tokens: 2 });
      const kept = (await tokenize(base.prompt)).slice(-2);
      assert.equal(cut.text, (await detokenize(kept)) + (await complete(url, { ...base, prompt: kept })).text);
      for (const extra of [{ logprobs: 1 }, { echo: 'yes' }]) {
        const e = await post(url, '/v1/completions', { ...base, echo: true, ...extra });
        assert.equal(e.status, 400);
        assert.equal((await e.json()).error.param, 'echo');
      }
    });

    router = await startRouter(fathom, ['--replica', url]);
    const via = `http://127.0.0.1:${router.port}`;
    await check('through fathom router: every control gives the replica\'s own answer', async () => {
      const word = await detokenize([plain.ids[3]]);
      const bodies = [
        { logit_bias: { [plain.ids[0]]: -100, [fox]: 3.5 } },
        { allowed_token_ids: [fox, plain.ids[4], 2000] },
        { ignore_eos: false, stop_token_ids: [plain.ids[1]], min_tokens: 6 },
        { bad_words: [word, 'brown'] },
        { temperature: 1, seed: 7, logit_bias: { [fox]: 4 }, bad_words: [word], min_tokens: 12 },
        { truncate_prompt_tokens: 2 },
        { stop: [word.trim() || 'e'], include_stop_str_in_output: true },
        { skip_special_tokens: false },
        { echo: true },
      ];
      for (const extra of bodies)
        for (const stream of [false, true]) {
          const direct = await complete(url, { ...base, ...extra }, stream);
          const routed = await complete(via, { ...base, ...extra }, stream);
          assert.deepEqual(routed.ids, direct.ids, JSON.stringify(extra));
          assert.equal(routed.text, direct.text, JSON.stringify(extra));
        }
      const bad = await post(via, '/v1/completions', { ...base, allowed_token_ids: [129280] });
      assert.equal(bad.status, 400);
      assert.equal((await bad.json()).error.param, 'allowed_token_ids');
      // Controls that run out after the first token: the replica's error (mid-stream there)
      // reaches the client as its own, and the replica stays up for the next request.
      const out = { ...base, allowed_token_ids: [5, 6], bad_words_ids: [[5], [6, 6]] };
      for (const stream of [false, true]) {
        const d = await post(url, '/v1/completions', { ...out, stream });
        const r = await post(via, '/v1/completions', { ...out, stream });
        assert.equal(r.status, d.status, String(stream));
        const [dt, rt] = [await d.text(), await r.text()];
        assert.ok(rt.includes('leave no token to sample'), rt);
        if (!stream) assert.equal(JSON.parse(rt).error.type, 'invalid_request_error', rt);
        const next = await post(via, '/v1/completions', base);
        assert.equal(next.status, 200, await next.text());
        assert.ok(dt.includes('leave no token to sample'), dt);
      }
      // A logit_bias over the whole vocabulary goes through as fast as it is read.
      const all = {};
      for (let i = 0; i < 129280; ++i) all[i] = i === fox ? 100 : -0.5;
      const t0 = Date.now();
      const wide = await complete(via, { ...base, max_tokens: 2, logit_bias: all });
      assert.deepEqual(wide.ids, [fox, fox]);
      console.log(`  a 129,280-entry logit_bias through the router: ${Date.now() - t0} ms`);
    });
  } finally {
    if (router) router.proc.kill('SIGTERM');
    proc.kill('SIGTERM');
    const code = await new Promise((res) => proc.on('exit', (c) => res(c)));
    if (code !== 0) { t.failures++; console.log('FAIL graceful shutdown: exit code ' + code); }
  }
  console.log(`serve vllm_sampling: ${t.failures} failures`);
  process.exit(t.failures ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
