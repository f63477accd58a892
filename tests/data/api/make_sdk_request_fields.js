// Writes sdk_request_fields.json: the top-level body fields of the official clients'
// request types (openai's ChatCompletionCreateParamsBase, CompletionCreateParamsBase,
// ResponseCreateParamsBase and InputTokenCountParams; @anthropic-ai/sdk's
// MessageCreateParamsBase and MessageCountTokensParams, body params only),
// read from the type declarations of the versions scripts/fetch-oracles.sh installs; and under
// "nested", the members of the parameter objects inside them that the adapters check
// ("protocol path": [members], several interfaces of a union merged).
// Usage: node make_sdk_request_fields.js [NODE_MODULES] > sdk_request_fields.json
'use strict';
const fs = require('fs');
const path = require('path');
const os = require('os');
const root = process.argv[2] ||
  path.join(process.env.FATHOM_CACHE || path.join(os.homedir(), '.cache/fathom'), 'node/node_modules');

// The members of `export interface NAME {...}` in a .d.ts file, skipping those whose doc
// comment says they are sent as a header. NAME "NS.INNER" is the interface INNER declared in
// `export declare namespace NS`.
function members(file, name) {
  const text = fs.readFileSync(path.join(root, file), 'utf8');
  const [ns, inner] = name.includes('.') ? name.split('.') : [null, name];
  const from = ns ? text.indexOf(`export declare namespace ${ns} {`) : 0;
  if (from < 0) throw new Error(`namespace ${ns} not in ${file}`);
  const indent = ns ? '    ' : '';
  const start = text.indexOf(`\n${indent}${ns ? '' : 'export '}interface ${inner} {`, from);
  if (start < 0) throw new Error(`${name} not in ${file}`);
  const end = text.indexOf(`\n${indent}}`, start + 1);
  const body = text.slice(start, end);
  const out = [];
  let doc = '';
  const member = new RegExp(`^${indent}    ([a-z_]+)\\??:`);
  for (const line of body.split('\n')) {
    if (/^\s*\/\*\*/.test(line)) doc = '';
    doc += line + '\n';
    const m = member.exec(line);
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
const chatTypes = 'openai/resources/chat/completions/completions.d.ts';
const messageTypes = '@anthropic-ai/sdk/resources/messages/messages.d.ts';
const union = (...lists) => [...new Set(lists.flat())];
result.nested = {
  'chat stream_options': members(chatTypes, 'ChatCompletionStreamOptions'),
  'completions stream_options': members(chatTypes, 'ChatCompletionStreamOptions'),
  'chat thinking': ['type', 'budget_tokens'],  // DeepSeek's and Anthropic's, not openai's
  'chat tools[0]': members(chatTypes, 'ChatCompletionFunctionTool'),
  'chat tool_choice': members(chatTypes, 'ChatCompletionNamedToolChoice'),
  'chat tool_choice.function': members(chatTypes, 'ChatCompletionNamedToolChoice.Function'),
  'chat response_format': union(members('openai/resources/shared.d.ts', 'ResponseFormatJSONSchema'),
                                members('openai/resources/shared.d.ts', 'ResponseFormatJSONObject')),
  'chat response_format.json_schema': members('openai/resources/shared.d.ts',
                                              'ResponseFormatJSONSchema.JSONSchema'),
  'messages thinking': union(members(messageTypes, 'ThinkingConfigEnabled'),
                             members(messageTypes, 'ThinkingConfigAdaptive'),
                             members(messageTypes, 'ThinkingConfigDisabled')),
  'messages tool_choice': union(members(messageTypes, 'ToolChoiceAuto'),
                                members(messageTypes, 'ToolChoiceAny'),
                                members(messageTypes, 'ToolChoiceTool'),
                                members(messageTypes, 'ToolChoiceNone')),
  'messages metadata': members(messageTypes, 'Metadata'),
  'messages tools.0': members(messageTypes, 'Tool'),
  'responses text': members('openai/resources/responses/responses.d.ts', 'ResponseTextConfig'),
  'responses reasoning': members('openai/resources/shared.d.ts', 'Reasoning'),
};
process.stdout.write(JSON.stringify(result, null, 1) + '\n');
