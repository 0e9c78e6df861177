// Writes seeded random texts that no golden file holds (random code points from every plane,
// emoji ZWJ sequences, decomposed Unicode, combining marks, mixed scripts and whitespace), each
// with Hugging Face tokenizers' ids, as JSON lines {"text", "ids"} on stdout.
// usage: node tokenizer_oracle.js TOKENIZER_JSON N SEED
const { Tokenizer } = require('tokenizers');
const fs = require('fs');

const rand = require('./rng').splitmix(process.argv[4] || 1);
const pick = (a) => a[Math.floor(rand() * a.length)];
const corpus = fs.readFileSync(__dirname + '/../data/corpora/multilingual.txt', 'utf8').split('\n').filter((l) => l.length);
const pieces = [
  () => String.fromCodePoint(Math.floor(rand() * 0x80)),
  () => { let c; do { c = Math.floor(rand() * 0x30000); } while (c >= 0xd800 && c < 0xe000); return String.fromCodePoint(c); },
  () => String.fromCodePoint(0x300 + Math.floor(rand() * 0x70)),           // combining marks
  () => pick(['👨‍👩‍👧‍👦', '🏳️‍🌈', '👍🏽', '🇫🇷', '❤️', '🧑‍💻', '1️⃣']),
  () => pick(corpus).slice(0, 1 + Math.floor(rand() * 40)),
  () => pick(corpus).slice(0, 30).normalize('NFD'),
  () => pick([' ', '  ', '\n', '\r\n', '\t', '\u00a0', '\u3000', '\u2028', ' \n ']),
  () => pick(["'s", "'LL", "'Re", 'don\'t', '123456', '3.14', '<|im_start|>', '<think>', '<|im_end', '</tool_call>']),
  () => pick(['Hello', 'world', 'naïve', 'Straße', 'İstanbul', 'ǅ', 'ﬁ', 'Ⅻ', '①', 'ｱｲｳ', '한국어', 'ไทย', 'हिन्दी']),
];
(async () => {
  const tok = await Tokenizer.fromFile(process.argv[2]);
  const n = Number(process.argv[3] || 200);
  for (let i = 0; i < n; i++) {
    let s = '';
    const k = 1 + Math.floor(rand() * 12);
    for (let j = 0; j < k; j++) s += pick(pieces)();
    const enc = await tok.encode(s);
    process.stdout.write(JSON.stringify({ text: s, ids: Array.from(enc.getIds()) }) + '\n');
  }
})();
