// Builds tests/data/tokenizer/synthetic_cases.json: small byte-level BPE tokenizers that
// exercise the tokenizer.json features DeepSeek's file does not use (added-token flags,
// every Split behaviour, invert, Digits, ByteLevel with regex and prefix space,
// normalizers, post-processors, ignore_merges, merges as arrays), and the ids Hugging Face
// `tokenizers` 0.23.2 gives for a set of texts on each. The expected ids are HF's, so the
// C++ test compares against HF, not against Fathom.
//
// usage: node make_synthetic.js NODE_MODULES DEEPSEEK_TOKENIZER_JSON OUT
const fs = require('fs');
const path = require('path');
const [modules, dsPath, outPath] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modules, 'tokenizers'));

// Base model: the 256 byte-level characters plus DeepSeek's first 3000 merges.
const ds = JSON.parse(fs.readFileSync(dsPath, 'utf8'));
const bytesToUnicode = () => {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  const m = {};
  bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
  return m;
};
const alphabet = bytesToUnicode();
const vocab = {};
let next = 0;
for (let b = 0; b < 256; b++) vocab[alphabet[b]] = next++;
const merges = [];
for (const m of ds.model.merges.slice(0, 3000)) {
  const [a, b] = m.split(' ');
  if (!(a in vocab) || !(b in vocab)) continue;
  if (!((a + b) in vocab)) vocab[a + b] = next++;
  merges.push([a, b]);
}
const base = {
  version: '1.0', truncation: null, padding: null, added_tokens: [],
  normalizer: null,
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
           end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
           vocab, merges },
};
const id = (s) => next + s;
const added = (i, content, o = {}) => Object.assign(
  { id: id(i), content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }, o);
const split = (pattern, behavior, invert = false) =>
  ({ type: 'Split', pattern, behavior, invert });
const bl = (prefix = false, regex = false) =>
  ({ type: 'ByteLevel', add_prefix_space: prefix, trim_offsets: true, use_regex: regex });

const variants = {
  gpt2_byte_level: {},
  prefix_space: { pre_tokenizer: bl(true, true) },
  added_flags: { added_tokens: [
    added(0, '<mask>', { lstrip: true }), added(1, '<eos>', { rstrip: true }),
    added(2, 'word', { single_word: true, special: false, normalized: false }),
    added(3, '<both>', { lstrip: true, rstrip: true }), added(4, '<s>'), added(5, '<s>x'),
    added(6, 'Hello', { special: false, normalized: true }) ] },
  lowercase_normalized_token: { normalizer: { type: 'Lowercase' },
    added_tokens: [added(0, 'HELLO', { special: false, normalized: true }), added(1, 'RAW', { special: true, normalized: false })] },
  nfc: { normalizer: { type: 'NFC' } },
  nfkc: { normalizer: { type: 'NFKC' } },
  nfd_sequence: { normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'Lowercase' }] } },
  replace_prepend_strip: { normalizer: { type: 'Sequence', normalizers: [
    { type: 'Strip', strip_left: true, strip_right: true },
    { type: 'Replace', pattern: { String: ' ' }, content: '_' },
    { type: 'Prepend', prepend: '>' }] } },
  digits_individual: { pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, bl(false, true)] } },
  digits_contiguous: { pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: false }, bl(false, false)] } },
  split_removed: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ Regex: '\\s+' }, 'Removed'), bl()] } },
  split_isolated_literal: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ String: 'ab' }, 'Isolated'), bl()] } },
  split_merged_previous: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ Regex: '[,.;]' }, 'MergedWithPrevious'), bl()] } },
  split_merged_next: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ Regex: '[,.;]' }, 'MergedWithNext'), bl()] } },
  split_contiguous: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ Regex: '[,.;]' }, 'Contiguous'), bl()] } },
  split_invert: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ Regex: '\\p{L}+' }, 'Isolated', true), bl()] } },
  split_invert_removed: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ Regex: '\\p{L}+' }, 'Removed', true), bl()] } },
  split_space_class: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ Regex: '\\s+(?!\\S)|\\s+|\\S+' }, 'Isolated'), bl()] } },
  ignore_merges: { model: Object.assign({}, base.model, { ignore_merges: true }),
    pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ Regex: '\\S+|\\s+' }, 'Isolated'), bl()] } },
  merges_as_strings: { model: Object.assign({}, base.model, { merges: merges.map(([a, b]) => a + ' ' + b) }) },
  template_processing: {
    added_tokens: [added(0, '<bos>'), added(1, '<eos>')],
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<bos>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '<eos>', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<bos>': { id: '<bos>', ids: [id(0)], tokens: ['<bos>'] }, '<eos>': { id: '<eos>', ids: [id(1)], tokens: ['<eos>'] } } } },
  roberta_processing: {
    added_tokens: [added(0, '<s>'), added(1, '</s>')],
    post_processor: { type: 'RobertaProcessing', sep: ['</s>', id(1)], cls: ['<s>', id(0)], trim_offsets: true, add_prefix_space: false } },
};
const texts = [
  '', 'Hello world', 'hello HELLO Hello', ' leading and trailing  ', 'a<mask>b <mask> c  <mask>',
  'x<eos>  y <eos>\n z', 'word sword words word_ word, (word)', 'a <both>  b<both>c',
  '<s><s>x<s>xx', 'Café café CAFÉ ﬁ ① ｶ ㎏', 'e\u0301 n\u0303 A\u030A', '1234567 12 3.14 ٣٤٥ ６７',
  'abcabab ab', 'a,b..c;;d ,. e', 'foo   bar\tbaz\n\nqux  ', 'RAW raw Raw', "it's we're I'd",
  '日本語のテキスト、中文。', '😀👍🏽 emoji ✓', 'mixed\u00a0nbsp\u3000ideographic space',
  'line1\r\nline2\rline3\u0085nel', 'abababababababababababababababab',
];
const cases = [];
(async () => {
  for (const [name, patch] of Object.entries(variants)) {
    const json = Object.assign({}, base, patch);
    const tmp = path.join(require('os').tmpdir(), `fathom_synth_${name}.json`);
    fs.writeFileSync(tmp, JSON.stringify(json));
    const tok = Tokenizer.fromFile(tmp);
    const rows = [];
    for (const text of texts) {
      const plain = await tok.encode(text, null, { addSpecialTokens: false });
      const withSpecial = await tok.encode(text, null, { addSpecialTokens: true });
      const ids = Array.from(plain.getIds());
      rows.push({ text, ids, ids_with_special: Array.from(withSpecial.getIds()),
                  decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) });
    }
    fs.unlinkSync(tmp);
    cases.push({ name, patch, rows });
  }
  const out = {
    origin: 'Generated by tests/data/tokenizer/make_synthetic.js with npm tokenizers 0.23.2 (Hugging Face, native); base model = byte alphabet + the first 3000 merges of DeepSeek-V3 tokenizer.json (sha256 621ac2e3...b517fb41).',
    base, cases };
  fs.writeFileSync(outPath, JSON.stringify(out));
  console.log(`${outPath}: ${cases.length} variants x ${texts.length} texts`);
})();
