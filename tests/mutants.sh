#!/usr/bin/env bash
# Tests of the tests: puts back, one at a time, bugs the full kernel-set x model-form matrix once
# caught, and checks that the quick tier (make test-quick) still fails on each. Each mutant is
# built in a copy of the tree (objects copied from BUILD, so only the mutated file recompiles).
# usage: tests/mutants.sh [BUILD]   (make test-mutants)
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
root=$(pwd)

# mutant NAME FILE OLD NEW: FILE with the literal line part OLD replaced by NEW must fail the quick tier
mutant() {
    local name=$1 file=$2 old=$3 new=$4 dir="$tmp/$1"
    mkdir -p "$dir"
    cp -r Makefile include src tests tools examples fuzz bench "$dir/"
    ln -s "$root/models" "$dir/models"
    cp -r "$build" "$dir/build"
    grep -qF -- "$old" "$dir/$file" || { bad "$name: '$old' is no longer in $file"; return; }
    OLD=$old NEW=$new perl -0pi -e 's/\Q$ENV{OLD}\E/$ENV{NEW}/' "$dir/$file"
    if ! make -C "$dir" BUILD=build build/qhx $(cd "$build" && ls test_* | sed 's|^|build/|') >"$tmp/$name.make" 2>&1; then
        bad "$name: does not build: $(tail -3 "$tmp/$name.make")"; return
    fi
    local out
    out=$(cd "$dir" && tests/run.sh build quick 2>&1)
    local caught
    caught=$(grep -E '^[a-z_-]+: [0-9]+ passed, [1-9][0-9]* failed$' <<<"$out" | paste -sd';')
    if [[ -n $caught ]]; then ok; echo "  $name: caught by $caught"; else bad "$name: the quick tier passed it"; fi
}

# the conv FIFO left out of a snapshot's restore
mutant conv-fifo src/model/snapshot.c 'else memcpy(ls->conv, at, sizeof(float) * conv), memcpy(' 'else memcpy('
# a stepwise call computing its tokens as one batch instead of each as a decode step would
mutant stepwise src/model/hostop.c 'step.per_token = stepwise;' 'step.per_token = 0;'
# GGUF's value heads left in the converter's tiled order
mutant value-heads src/model/gguf_model.c 'const int reorder = c->lin_v_heads != c->lin_k_heads;' 'const int reorder = 0;'
# a batched step's attention rows all at the first session's position
mutant batch-positions src/model/qwen35_forward.c 'const int pos0 = st->pos, t0' 'const int pos0 = runs[0].st->pos, t0'
# a growing KV cache leaving each head's rows where they were (the cache is head-major)
mutant kv-growth src/model/state.c 'for (int j = 0; j < heads && *cache; j++)' 'for (int j = 0; j < 1 && *cache; j++)'
# a batched W8 decode pass scaling every token's block by the first token's activation scale
mutant decode-tokens src/kernels/int_vnni.c 'const __m512 sc = _mm512_set1_ps(s[t][p]);' 'const __m512 sc = _mm512_set1_ps(s[0][p]);'
# a string state's mask without the pieces that leave the string (a '"', '\\' or control inside)
mutant string-tails src/grammar/matcher.c 'walk(m, tr->tail, 0, 0, n, m->u, &top, NULL);' '(void)0;'

finish mutants
