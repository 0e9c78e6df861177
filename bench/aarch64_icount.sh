#!/usr/bin/env bash
# Instructions per decode token and per prefill token of each aarch64 kernel set, counted under
# qemu-aarch64 (speed cannot be measured under emulation; instruction counts can). Each figure is
# a difference of two runs of the W8 bundle of q35-kjv on one thread: decode = (5 generated - 1
# generated) / 4, prefill = (a 72-token prompt - a 40-token one) / 32 (both past the 16 tokens
# below which prefill runs the decode kernels).
#   [WEIGHTS=w4] bench/aarch64_icount.sh [SETS...]   (after make and make CROSS=aarch64; from the
#   repository root; WEIGHTS picks the bundle's matrices, w8 by default)
set -euo pipefail
sets=("$@"); [[ ${#sets[@]} -gt 0 ]] || sets=(scalar neon neon-i8mm)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
build/qhx forge models/q35-kjv -o "$work/b" --weights "${WEIGHTS:-w8}" --no-gate >/dev/null 2>&1
count() { # count SET IDS N -> instructions of qhx generate
    qemu-aarch64 -cpu max -d in_asm,exec,nochain -D "$work/log" build-aarch64/qhx generate "$work/b" --tokens "$2" -n "$3" \
        --ignore-eos --ids --kernels "$1" -t 1 >/dev/null 2>&1
    awk -f bench/qemu_icount.awk "$work/log" | cut -d' ' -f1
    rm -f "$work/log"
}
p8=$(seq -s, 11 17 4000 | cut -d, -f1-8); p40=$(seq -s, 11 17 4000 | cut -d, -f1-40); p72=$(seq -s, 11 17 4000 | cut -d, -f1-72)
printf '%-12s %16s %16s\n' set decode/token prefill/token
for s in "${sets[@]}"; do
    a=$(count "$s" "$p8" 1); b=$(count "$s" "$p8" 5); c=$(count "$s" "$p40" 1); d=$(count "$s" "$p72" 1)
    printf '%-12s %16d %16d\n' "$s" $(( (b - a) / 4 )) $(( (d - c) / 32 ))
done
