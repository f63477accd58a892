// Writes one probe text per Unicode scalar value and HF's ids for each (see hf_codepoints.sh).
// The probe puts the character after letters, spaces, digits, punctuation and newlines, so a
// wrong letter/mark/number/punctuation/symbol/space class changes the ids.
const fs = require('fs');
const path = require('path');
const [modules, tokPath, inPath, outPath] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
(async () => {
  const tok = Tokenizer.fromFile(tokPath);
  const texts = [];
  for (let cp = 0; cp <= 0x10FFFF; cp++) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const c = String.fromCodePoint(cp);
    texts.push('a' + c + 'a ' + c + '1' + c + '.' + c + ' ' + c + '\n' + c + c);
  }
  fs.writeFileSync(inPath, texts.map((t) => JSON.stringify({ text: t })).join('\n') + '\n');
  const out = fs.openSync(outPath, 'w');
  for (let i = 0; i < texts.length; i += 4096) {
    const encs = await tok.encodeBatch(texts.slice(i, i + 4096), { addSpecialTokens: false });
    fs.writeSync(out, encs.map((e) => '{"ids":[' + Array.from(e.getIds()).join(',') + ']}').join('\n') + '\n');
  }
  fs.closeSync(out);
})();
