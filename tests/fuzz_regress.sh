#!/usr/bin/env bash
# Replays every fuzzer's seed corpus (fuzz/corpus/NAME) and every input that once failed
# (fuzz/regress/NAME) through the harness built with the normal compiler (build/fuzz/fuzz_NAME):
# any crash or sanitizer report fails. QHX_VALGRIND=DIR runs each harness under memcheck.
set -u
build=${1:-build}
cd "$(dirname "$0")/.."
pass=0 fail=0
export QHX_FUZZ_TOKENIZER=${QHX_DATA:-$build/data}/tokenizers/qwen3/tokenizer.json
for bin in "$build"/fuzz/fuzz_*; do
    [[ -x $bin && $bin != *.* ]] || continue
    name=${bin##*/fuzz_}
    inputs=(fuzz/corpus/"$name"/* fuzz/regress/"$name"/*)
    inputs=("${inputs[@]/*\*/}")  # drop unmatched globs
    n=0; for f in "${inputs[@]}"; do [[ -n $f ]] && n=$((n + 1)); done
    if ${QHX_VALGRIND:+tests/vg_wrap.sh} "$bin" ${inputs[@]} >/dev/null 2>"$build/fuzz/$name.err"; then
        pass=$((pass + 1)); echo "  fuzz_$name: $n inputs replayed"
    else
        fail=$((fail + 1)); echo "FAIL: fuzz_$name: $(grep -m1 -E 'ERROR|runtime error|fuzz_' "$build/fuzz/$name.err")"
    fi
done
echo "fuzz-regress: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
