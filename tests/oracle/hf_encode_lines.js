// Reads {"text": ...} lines on stdin, writes HF's {"ids": [...]} lines. With PLAIN=1 the
// tokenizer's added tokens are removed first (HF's plain BPE path, like `fathom --plain`).
const fs = require('fs');
const os = require('os');
const path = require('path');
const [modules, tokPath, plain] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
(async () => {
  let file = tokPath;
  if (plain === '1') {
    const j = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
    j.added_tokens = [];
    file = path.join(os.tmpdir(), `fathom_plain_${process.pid}.json`);
    fs.writeFileSync(file, JSON.stringify(j));
  }
  const tok = Tokenizer.fromFile(file);
  if (file !== tokPath) fs.unlinkSync(file);
  const texts = fs.readFileSync(0, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l).text);
  const out = [];
  for (let i = 0; i < texts.length; i += 256) {
    const encs = await tok.encodeBatch(texts.slice(i, i + 256), { addSpecialTokens: false });
    for (const e of encs) out.push('{"ids":[' + Array.from(e.getIds()).join(',') + ']}');
  }
  process.stdout.write(out.join('\n') + '\n');
})();
