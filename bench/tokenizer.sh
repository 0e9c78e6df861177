#!/usr/bin/env bash
# Tokenizer encode throughput vs Hugging Face's tokenizers, same machine, same run, one thread.
# usage: bench/tokenizer.sh [BUILD]   (after `make check` has installed tests/oracle/node_modules)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
make -s "$build/tok_bench"
tok=$build/data/tokenizers/qwen3/tokenizer.json
[[ -s $tok ]] || { mkdir -p "$(dirname "$tok")"; gzip -dc tests/data/tokenizers/qwen3/tokenizer.json.gz >"$tok"; }
for corpus in tests/data/corpora/kjv-dev.txt tests/data/corpora/multilingual.txt; do
    ours=$("$build/tok_bench" "$tok" "$corpus" 5)
    hf=$(node bench/tok_bench_hf.js "$tok" "$corpus" 5)
    echo "$ours"; echo "$hf"
    node -e 'const [a,b]=process.argv.slice(1).map(JSON.parse); console.log(`${a.corpus}: qhexrt ${a.mb_s} MB/s vs HF ${b.mb_s} MB/s = ${(a.mb_s/b.mb_s).toFixed(2)}x; tokens equal: ${a.tokens===b.tokens}; load ${a.load_ms} ms vs ${b.load_ms} ms; compact form ${a.compact_load_ms} ms`)' "$ours" "$hf"
done
