// Soak: N concurrent streaming clients (default 32) for S seconds (default 120) against the
// real server, cycling through Chat Completions, Responses and Messages with the official
// npm clients. Every request must complete with a finish event and no error; the server must
// shut down cleanly on SIGTERM (under ASan a leak makes its exit code non-zero).
// Usage: node soak_test.js FATHOM NODE_MODULES [CLIENTS] [SECONDS]
// (30 seconds by default with FATHOM_TEST_LIGHT=1, the sanitizer build)
'use strict';
const path = require('path');
const { startServer } = require('./start_server.js');

const [fathom, nodeModules, clientsArg, secondsArg] = process.argv.slice(2);
const clients = Number(clientsArg || process.env.FATHOM_SOAK_CLIENTS || 32);
const seconds = Number(secondsArg || process.env.FATHOM_SOAK_SECONDS ||
                       (process.env.FATHOM_TEST_LIGHT === '1' ? 30 : 120));
const OpenAI = require(path.join(nodeModules, 'openai')).default;
const Anthropic = require(path.join(nodeModules, '@anthropic-ai/sdk')).default;


(async () => {
  const { proc, port } = await startServer(fathom, ['--default-max-tokens', '32']);
  const base = `http://127.0.0.1:${port}`;
  const openai = new OpenAI({ apiKey: 'x', baseURL: base + '/v1', maxRetries: 0, timeout: 600000 });
  const anthropic = new Anthropic({ apiKey: 'x', baseURL: base, maxRetries: 0, timeout: 600000 });
  const deadline = Date.now() + seconds * 1000;
  let done = 0, errors = 0, tokens = 0;
  const errorSamples = [];
  async function one(c, i) {
    const kind = (c + i) % 3;
    const max = 8 + ((c * 7 + i) % 17);
    if (kind === 0) {
      const s = await openai.chat.completions.create({ model: 'fathom-demo', max_tokens: max, stream: true,
        messages: [{ role: 'user', content: `client ${c} request ${i}` }] });
      let finished = false;
      for await (const ch of s) { if (ch.choices.length && ch.choices[0].finish_reason) finished = true; tokens++; }
      if (!finished) throw new Error('chat stream without finish_reason');
    } else if (kind === 1) {
      const s = await openai.responses.create({ model: 'fathom-demo', input: `client ${c} ${i}`, max_output_tokens: max, stream: true });
      let finished = false;
      for await (const ev of s) { if (ev.type === 'response.completed' || ev.type === 'response.incomplete') finished = true; tokens++; }
      if (!finished) throw new Error('responses stream without completion');
    } else {
      const s = anthropic.messages.stream({ model: 'fathom-demo', max_tokens: max,
        messages: [{ role: 'user', content: `client ${c} msg ${i}` }] });
      const m = await s.finalMessage();
      if (!m.stop_reason) throw new Error('message without stop_reason');
      tokens += m.usage.output_tokens;
    }
  }
  const t0 = Date.now();
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let i = 0; Date.now() < deadline; i++) {
      try { await one(c, i); done++; } catch (e) {
        errors++;
        let why = String(e) + ' (kind ' + ((c + i) % 3) + ')';
        for (let x = e && e.cause; x; x = x.cause) why += ' <- ' + String(x) + (x.code ? ' [' + x.code + ']' : '');
        if (errorSamples.length < 5) errorSamples.push(why);
      }
    }
  }));
  const elapsed = (Date.now() - t0) / 1000;
  if (errors) {
    const m = await (await fetch(base + '/metrics')).text();
    console.log(m.split('\n').filter((l) => l.startsWith('fathom_http_')).join('\n'));
  }
  proc.kill('SIGTERM');
  const code = await new Promise((res) => proc.on('exit', (c) => res(c)));
  console.log(JSON.stringify({ clients, seconds: elapsed, requests_completed: done, errors,
                               stream_events: tokens, requests_per_s: done / elapsed, server_exit: code }));
  for (const e of errorSamples) console.log('error: ' + e);
  process.exit(errors === 0 && code === 0 && done > 0 ? 0 : 1);
})().catch((e) => { console.error(e); process.exit(1); });
