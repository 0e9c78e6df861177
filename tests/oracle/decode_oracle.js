// Writes seeded random id sequences with Hugging Face tokenizers' decoding of each, as JSON lines
// {"ids", "text"}: ids drawn from the byte pieces (so sequences split, truncate and misplace UTF-8
// lead and continuation bytes), from the whole vocabulary and from the added tokens.
// usage: node decode_oracle.js TOKENIZER_JSON N SEED
const { Tokenizer } = require('tokenizers');

const rand = require('./rng').splitmix(process.argv[4] || 1);
(async () => {
  const tok = await Tokenizer.fromFile(process.argv[2]);
  const vocab = tok.getVocab(true);
  const n_ids = Object.values(vocab).reduce((a, b) => Math.max(a, b), 0) + 1;
  const n = Number(process.argv[3] || 200);
  for (let i = 0; i < n; i++) {
    const ids = [];
    const k = 1 + Math.floor(rand() * 10);
    for (let j = 0; j < k; j++) {
      const r = rand();
      ids.push(r < 0.6 ? Math.floor(rand() * 256) : r < 0.95 ? Math.floor(rand() * n_ids) : n_ids - 1 - Math.floor(rand() * 8));
    }
    const known = ids.filter((id) => tok.idToToken(id) !== null && tok.idToToken(id) !== undefined);
    const text = await tok.decode(known, false);
    process.stdout.write(JSON.stringify({ ids: known, text }) + '\n');
  }
})();
