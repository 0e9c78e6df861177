#!/usr/bin/env bash
# Constrained decoding's cost: the mask and check times on the Qwen vocabulary for the schemas in
# bench/schemas (build/grammar_bench), then decode with and without a JSON Schema on a bundle,
# alternated, greedy, the same prompt and length. A bundle from `qhx synth --bundle` has no
# tokenizer: the Qwen one is copied beside it.
# usage: bench/grammar.sh BUNDLE [ROUNDS [TOKENS]]
set -eu
cd "$(dirname "$0")/.."
bundle=$1 rounds=${2:-3} n=${3:-128}
tok=build/data/tokenizers/qwen3/tokenizer.json
[[ -s $tok ]] || { mkdir -p "$(dirname "$tok")" && gzip -dc tests/data/tokenizers/qwen3/tokenizer.json.gz >"$tok"; }
make -s build/qhx build/grammar_bench
build/grammar_bench "$tok" bench/schemas/*.json
[[ -e $bundle/tokenizer.json ]] || cp "$tok" "$bundle/"
printf '%s' '{"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer", "minimum": 1900, "maximum": 2100}, "tags": {"type": "array", "items": {"type": "string"}}, "done": {"type": "boolean"}}, "required": ["title", "year", "tags", "done"], "additionalProperties": false}' >"${TMPDIR:-/tmp}/qhx_book.json"
rate() { sed -nE 's/.*generated ([0-9]+) \(([a-z]+)\).*decode ([0-9.]+) tok\/s.*/\3 \1 \2/p'; }
for r in $(seq "$rounds"); do
    free=$(build/qhx generate "$bundle" "Describe a book as JSON:" -n "$n" --ignore-eos 2>&1 >/dev/null | rate)
    constrained=$(build/qhx generate "$bundle" "Describe a book as JSON:" -n "$n" --json-schema "${TMPDIR:-/tmp}/qhx_book.json" 2>&1 >/dev/null | rate)
    echo "{\"round\": $r, \"free_tok_s\": ${free%% *}, \"schema_tok_s\": ${constrained%% *}, \"schema_tokens\": \"${constrained#* }\"}"
done
