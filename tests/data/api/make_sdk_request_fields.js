// Writes sdk_request_fields.json: the top-level body fields of the official clients'
// request types (openai's ChatCompletionCreateParamsBase, CompletionCreateParamsBase,
// ResponseCreateParamsBase and InputTokenCountParams; @anthropic-ai/sdk's
// MessageCreateParamsBase and MessageCountTokensParams, body params only),
// read from the type declarations of the versions scripts/fetch-oracles.sh installs.
// Usage: node make_sdk_request_fields.js [NODE_MODULES] > sdk_request_fields.json
'use strict';
const fs = require('fs');
const path = require('path');
const os = require('os');
const root = process.argv[2] ||
  path.join(process.env.FATHOM_CACHE || path.join(os.homedir(), '.cache/fathom'), 'node/node_modules');

// The members of `export interface NAME {...}` in a .d.ts file, skipping those whose doc
// comment says they are sent as a header.
function members(file, name) {
  const text = fs.readFileSync(path.join(root, file), 'utf8');
  const start = text.indexOf(`export interface ${name} {`);
  if (start < 0) throw new Error(`${name} not in ${file}`);
  const end = text.indexOf('\n}', start);
  const body = text.slice(start, end);
  const out = [];
  let doc = '';
  for (const line of body.split('\n')) {
    if (/^\s*\/\*\*/.test(line)) doc = '';
    doc += line + '\n';
    const m = /^    ([a-z_]+)\??:/.exec(line);
    if (m) {
      if (!/Header param:/.test(doc)) out.push(m[1]);
      doc = '';
    }
  }
  return out;
}

const version = (p) => JSON.parse(fs.readFileSync(path.join(root, p, 'package.json'))).version;
const result = {
  source: {openai: version('openai'), '@anthropic-ai/sdk': version('@anthropic-ai/sdk')},
  chat: members('openai/resources/chat/completions/completions.d.ts',
                'ChatCompletionCreateParamsBase'),
  completions: members('openai/resources/completions.d.ts', 'CompletionCreateParamsBase'),
  responses: members('openai/resources/responses/responses.d.ts', 'ResponseCreateParamsBase'),
  messages: members('@anthropic-ai/sdk/resources/messages/messages.d.ts',
                    'MessageCreateParamsBase'),
  responses_input_tokens: members('openai/resources/responses/input-tokens.d.ts',
                                  'InputTokenCountParams'),
  messages_count_tokens: members('@anthropic-ai/sdk/resources/messages/messages.d.ts',
                                 'MessageCountTokensParams'),
};
process.stdout.write(JSON.stringify(result, null, 1) + '\n');
