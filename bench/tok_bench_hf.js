// Hugging Face tokenizers (Rust, npm `tokenizers`) on the same corpus as one text, one thread.
// Prints the same JSON fields as tok_bench.c. usage: node tok_bench_hf.js TOKENIZER CORPUS [REPEAT]
process.env.TOKENIZERS_PARALLELISM = 'false';
process.env.RAYON_NUM_THREADS = '1';
const { Tokenizer } = require('../tests/oracle/node_modules/tokenizers');
const fs = require('fs');
(async () => {
  const [file, corpus, rep] = process.argv.slice(2);
  let t0 = process.hrtime.bigint();
  const tok = await Tokenizer.fromFile(file);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const text = fs.readFileSync(corpus, 'utf8');
  const bytes = Buffer.byteLength(text);
  let best = Infinity, tokens = 0;
  for (let r = 0; r < Number(rep || 3); r++) {
    tokens = 0;
    t0 = process.hrtime.bigint();
    tokens = (await tok.encode(text)).getIds().length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(JSON.stringify({ impl: 'hf-tokenizers', corpus, bytes, tokens, mb_s: +(bytes / best / 1e6).toFixed(2), load_ms: +loadMs.toFixed(1) }));
})();
