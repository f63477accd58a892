// A Mooncake-like multi-turn trace, deterministic for its seed (bench/router_trace.js replays it
// through `fathom router`). The published Mooncake traces (FAST'25, arXiv 2407.00079; the
// kvcache-ai/Mooncake repository) are JSONL, a request a line: `timestamp` (arrival, ms from the
// trace's start), `input_length`, `output_length` and `hash_ids` (one id per 512-token block of
// the prompt, chained: equal leading ids = a shared prefix); replayers (NVIDIA aiperf) add
// `session_id` and `delay` (think time before a turn) for multi-turn conversations. This
// generator makes such conversations with their token ids:
//   - sessions start at Poisson times (`rate` sessions per second);
//   - a session has 1 + Geometric turns (mean `turns`, at most `maxTurns`);
//   - turn 1 is [system prompt] + a user message; turn k > 1 is the previous turn's prompt + the
//     previous answer's ids (as generated, known only at replay) + a new user message, sent a
//     think time (exponential, mean `thinkMs`) after that answer came back;
//   - user message and answer lengths are log-normal around their means (clipped), per turn;
//   - `systemPrompts` shared system prompts of `systemTokens` tokens: a session takes one of
//     them (uniformly) with probability `systemShare`, otherwise none;
//   - a session ends early when its prompt would pass `maxPromptTokens`.
// Token ids are pseudo-random below 128,000 (the demo model's vocabulary is 129,280), from a
// PRNG seeded by (seed, session, turn), so two sessions share nothing but a system prompt.
//
// CLI: node bench/mooncake_trace.js [--key value ...]   prints the planned trace as Mooncake
// JSONL (timestamp = start + think times only, i.e. as if answers took no time; answers as
// placeholder blocks, since the real ones are the model's), then on stderr a summary with the
// hit rate an unbounded single prefix cache of 128-token prompt blocks would reach (the upper
// bound of any routing).
'use strict';

const DEFAULTS = {
  seed: 1,
  sessions: 96,
  // Sessions per second (Poisson). The default saturates 4 demo replicas on a 2-core machine
  // (arrivals end after ~12 s, the queue then drains), so requests/s measures capacity.
  rate: 8,
  turns: 4,  // mean turns per session
  maxTurns: 10,
  firstTokens: 512,  // mean user tokens in turn 1
  addTokens: 128,  // mean user tokens in a later turn
  outputTokens: 32,  // mean answer tokens (max_tokens; ignore_eos)
  sigma: 0.5,  // log-normal spread of the lengths
  thinkMs: 1000,  // mean think time between an answer and the next turn
  systemPrompts: 4,
  systemTokens: 256,
  systemShare: 0.75,
  maxPromptTokens: 8192,
};

// mulberry32: a small seeded PRNG, uniform in [0, 1).
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const mix = (...xs) => xs.reduce((h, x) => (Math.imul(h ^ (x >>> 0), 0x9E3779B1) + 0x7F4A7C15) >>> 0, 0x811C9DC5);

function tokens(seed, n) {
  const r = prng(seed), out = new Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(r() * 128000);
  return out;
}

const exponential = (r, mean) => -mean * Math.log(1 - r());
// Log-normal with the given mean, clipped to [lo, hi], rounded.
function lognormal(r, mean, sigma, lo, hi) {
  const z = Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
  const x = mean * Math.exp(sigma * z - sigma * sigma / 2);
  return Math.max(lo, Math.min(hi, Math.round(x)));
}

// The trace: { options, sessions: [{ id, startMs, system (index or -1), systemIds, turns:
// [{ thinkMs (0 for turn 1), userIds, outputTokens }] }] }, sessions in start order.
function makeTrace(opts) {
  const o = { ...DEFAULTS, ...opts };
  const r = prng(mix(o.seed, 0xA11));
  const systems = Array.from({ length: o.systemPrompts }, (_, k) => tokens(mix(o.seed, 0x5E5, k), o.systemTokens));
  const sessions = [];
  let t = 0;
  for (let s = 0; s < o.sessions; s++) {
    if (s > 0) t += exponential(r, 1000 / o.rate);
    // A session's own stream: its shape does not depend on the options of the others' parts.
    const rs = prng(mix(o.seed, s, 0x5E55));
    const share = rs(), which = rs();
    const system = o.systemPrompts > 0 && share < o.systemShare ? Math.floor(which * o.systemPrompts) : -1;
    let n = 1;
    while (n < o.maxTurns && rs() >= 1 / o.turns) n++;  // 1 + Geometric(1/turns), mean ~turns
    const turns = [];
    let length = system >= 0 ? o.systemTokens : 0;
    for (let k = 0; k < n; k++) {
      const user = k === 0 ? lognormal(rs, o.firstTokens, o.sigma, 16, 4 * o.firstTokens)
        : lognormal(rs, o.addTokens, o.sigma, 8, 4 * o.addTokens);
      const output = lognormal(rs, o.outputTokens, o.sigma, 4, 4 * o.outputTokens);
      const think = k === 0 ? 0 : exponential(rs, o.thinkMs);
      if (k > 0 && length + user > o.maxPromptTokens) break;
      turns.push({ thinkMs: Math.round(think), userIds: tokens(mix(o.seed, s, k), user), outputTokens: output });
      length += user + output;
    }
    sessions.push({ id: s, startMs: Math.round(t), system, systemIds: system >= 0 ? systems[system] : [], turns });
  }
  return { options: o, sessions };
}

// The planned requests in Mooncake's JSONL shape (answers replaced by placeholder tokens, one
// distinct run per session and turn), in arrival order, and the hit rate of an unbounded prefix
// cache of `cacheBlock`-token prompt blocks over them in that order, and how many distinct
// such blocks the prompts have.
function mooncakeRows(trace, hashBlock = 512, cacheBlock = 128) {
  const rows = [];
  for (const s of trace.sessions) {
    let ids = s.systemIds.slice(), at = s.startMs;
    s.turns.forEach((turn, k) => {
      if (k > 0) {
        ids = ids.concat(tokens(mix(trace.options.seed, s.id, k, 0xA45), s.turns[k - 1].outputTokens));
        at += turn.thinkMs;
      }
      ids = ids.concat(turn.userIds);
      rows.push({ timestamp: at, session_id: 'session-' + s.id, delay: turn.thinkMs, ids,
        output_length: turn.outputTokens });
    });
  }
  rows.sort((a, b) => a.timestamp - b.timestamp);
  // Chained block keys (two 32-bit chains, so 64 bits): a key names its block's ids and every
  // block before it.
  const keysOf = (ids, B) => {
    const keys = [];
    let a = 1, b = 2;
    for (let i = 0; i + B <= ids.length; i += B) {
      const block = ids.slice(i, i + B);
      a = mix(a, ...block);
      b = mix(b ^ 0x5bd1e995, ...block);
      keys.push(a + ':' + b);
    }
    return keys;
  };
  const hashIds = new Map(), cached = new Set();
  let prompt = 0, hit = 0;
  const out = rows.map((row) => {
    const ids512 = keysOf(row.ids, hashBlock).map((k) => {
      if (!hashIds.has(k)) hashIds.set(k, hashIds.size);
      return hashIds.get(k);
    });
    // A partial last block gets its own id too (Mooncake: ceil(input_length / 512) ids).
    if (row.ids.length % hashBlock) ids512.push(hashIds.size), hashIds.set('tail:' + hashIds.size, hashIds.size);
    const keys = keysOf(row.ids, cacheBlock);
    let m = 0;
    while (m < keys.length && cached.has(keys[m])) m++;
    for (const k of keys) cached.add(k);
    prompt += row.ids.length;
    hit += m * cacheBlock;
    return { timestamp: row.timestamp, input_length: row.ids.length, output_length: row.output_length,
      hash_ids: ids512, session_id: row.session_id, delay: row.delay };
  });
  return { rows: out, idealHitRate: prompt ? hit / prompt : 0, promptTokens: prompt, distinctBlocks: cached.size };
}

// --key value pairs (camelCase or kebab-case) over DEFAULTS; numbers only.
function parseOptions(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-(\w)/g, (_, c) => c.toUpperCase());
    if (!(key in DEFAULTS)) throw new Error('unknown trace option ' + argv[i] + ' (one of ' + Object.keys(DEFAULTS).join(', ') + ')');
    const v = Number(argv[i + 1]);
    if (!Number.isFinite(v)) throw new Error(argv[i] + ' needs a number');
    o[key] = v;
  }
  return o;
}

// A summary of the trace's shape (for the benchmark's output).
function describe(trace) {
  const turns = trace.sessions.map((s) => s.turns.length);
  const requests = turns.reduce((a, b) => a + b, 0);
  const { idealHitRate, promptTokens, distinctBlocks } = mooncakeRows(trace);
  const last = trace.sessions.length ? trace.sessions[trace.sessions.length - 1].startMs : 0;
  return { sessions: trace.sessions.length, requests, turns_min: Math.min(...turns), turns_max: Math.max(...turns),
    planned_prompt_tokens: promptTokens, last_session_start_s: +(last / 1000).toFixed(1),
    sessions_with_system_prompt: trace.sessions.filter((s) => s.system >= 0).length,
    ideal_hit_rate_one_unbounded_cache: +idealHitRate.toFixed(4),
    distinct_prompt_blocks: distinctBlocks };  // 128-token blocks: the working set of a prefix cache
}

// ---- replaying a Mooncake JSONL file (the published traces or this generator's output) ----
// Rows in timestamp order (the first `max` if max > 0); each needs timestamp, input_length,
// output_length and hash_ids.
function readJsonl(file, max = 0) {
  const rows = require('fs').readFileSync(file, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
  for (const r of rows)
    if (!Number.isFinite(r.timestamp) || !Number.isFinite(r.input_length) || !Array.isArray(r.hash_ids))
      throw new Error(file + ': a row without timestamp, input_length or hash_ids: ' + JSON.stringify(r).slice(0, 200));
  rows.sort((x, y) => x.timestamp - y.timestamp);
  return max > 0 ? rows.slice(0, max) : rows;
}

// Replay lengths: a trace's hash ids stand for 512-token blocks; replayed with `hashBlock`
// tokens per id, every length is scaled by hashBlock / 512 (512: as recorded).
const scaled = (n, hashBlock) => Math.max(1, Math.round(n * hashBlock / 512));

// A row's prompt: hash id h stands for `hashBlock` pseudo-random ids fixed by h (equal leading
// ids give equal leading tokens: the trace's shared prefixes), cut to the scaled input_length
// (a short last block; missing ids padded from the row's own seed).
function promptFromHashIds(row, hashBlock) {
  const n = scaled(row.input_length, hashBlock);
  let ids = [];
  for (const h of row.hash_ids) {
    if (ids.length >= n) break;
    ids = ids.concat(tokens(mix(0xB10C, h), hashBlock));
  }
  if (ids.length < n) ids = ids.concat(tokens(mix(0x9AD, row.timestamp, n), n - ids.length));
  return ids.slice(0, n);
}

// The file's shape (scaled lengths) and the hit rate of an unbounded single cache at whole
// hash-id blocks.
function describeRows(rows, hashBlock) {
  const seen = new Set();
  let prompt = 0, hit = 0, output = 0;
  for (const r of rows) {
    const n = scaled(r.input_length, hashBlock);
    const full = Math.min(r.hash_ids.length, Math.floor(n / hashBlock));
    let m = 0, key = '';
    const keys = r.hash_ids.slice(0, full).map((h) => (key += h + ','));
    while (m < keys.length && seen.has(keys[m])) m++;
    for (const k of keys) seen.add(k);
    prompt += n;
    output += scaled(r.output_length || 1, hashBlock);
    hit += m * hashBlock;
  }
  const span = rows.length ? rows[rows.length - 1].timestamp - rows[0].timestamp : 0;
  return { requests: rows.length, prompt_tokens: prompt, output_tokens: output, span_s: +(span / 1000).toFixed(1),
    ideal_hit_rate_one_unbounded_cache: prompt ? +(hit / prompt).toFixed(4) : 0 };
}

module.exports = { DEFAULTS, makeTrace, mooncakeRows, parseOptions, describe, readJsonl, promptFromHashIds, describeRows, scaled };

if (require.main === module) {
  const trace = makeTrace(parseOptions(process.argv.slice(2)));
  const { rows } = mooncakeRows(trace);
  for (const row of rows) process.stdout.write(JSON.stringify(row) + '\n');
  process.stderr.write(JSON.stringify(describe(trace)) + '\n');
}
