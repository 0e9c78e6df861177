// Hugging Face tokenizers' ids for every code point Unicode 15.1/16.0 added (the ranges in
// src/tokenizer/unicode_added.h) and every White_Space code point plus U+180E, each in contexts
// where its class decides the pre-tokenization (next to a contraction, letters, digits, spaces).
// JSON lines {"text", "ids"} on stdout.   usage: node codepoint_oracle.js TOKENIZER_JSON
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
(async () => {
  const tok = await Tokenizer.fromFile(process.argv[2]);
  const header = fs.readFileSync(__dirname + '/../../src/tokenizer/unicode_added.h', 'utf8');
  const cps = [0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0x85, 0xa0, 0x1680, 0x180e, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000];
  for (let c = 0x2000; c <= 0x200b; c++) cps.push(c);
  for (const m of header.matchAll(/\{0x([0-9A-F]+), 0x([0-9A-F]+), UTF8PROC/g))
    for (let c = parseInt(m[1], 16); c <= parseInt(m[2], 16); c++) cps.push(c);
  for (const c of cps) {
    const ch = String.fromCodePoint(c);
    const text = ch + "'s a" + ch + 'b ' + ch + '1 ' + ch + ch + '  ' + ch + 'x';
    const enc = await tok.encode(text);
    process.stdout.write(JSON.stringify({ text, ids: Array.from(enc.getIds()) }) + '\n');
  }
})();
