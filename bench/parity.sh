#!/usr/bin/env bash
# Greedy parity of a W8 bundle's kernel sets against the fp32 reference (the checkpoint on the
# `ref` kernels): for each prompt, how many of N greedy tokens each set gets before it first
# differs. Prompts: the golden ones, then verse openings from the held-out kjv-dev text.
# usage: bench/parity.sh CHECKPOINT BUNDLE [N_HELD_OUT] [SETS...]   (run from the repository root)
set -euo pipefail
ck=$1 bundle=$2 nheld=${3:-24}; shift 3 || shift $#
sets=("$@"); [[ ${#sets[@]} -gt 0 ]] || sets=(auto scalar)
qhx=${QHX:-build/qhx} n=${PARITY_TOKENS:-64}
prompts=()
while IFS= read -r t; do prompts+=("$t"); done < <(grep -o '"text": "[^"]*"' "$ck/golden/golden.json" | cut -d'"' -f4)
ng=${#prompts[@]}
while IFS= read -r t; do prompts+=("$t"); done < <(grep -E '^  [0-9]+ ' tests/data/corpora/kjv-dev.txt |
    awk -v k="$nheld" 'NR % 37 == 1 && c < k { c++; sub(/^  [0-9]+ /, ""); n = split($0, w, " "); s = w[1]; for (i = 2; i <= (n < 6 ? n : 6); i++) s = s " " w[i]; print s }')
declare -A tot
printf '%-44s' prompt; for s in "${sets[@]}"; do printf ' %11s' "$s"; done; echo
for i in "${!prompts[@]}"; do
    p=${prompts[i]}
    read -ra R <<<"$("$qhx" generate "$ck" "$p" -n "$n" --ignore-eos --ids --kernels ref)"
    printf '%-44s' "$([[ $i -lt $ng ]] && echo "[golden] " || echo "")${p:0:34}"
    for s in "${sets[@]}"; do
        read -ra G <<<"$("$qhx" generate "$bundle" "$p" -n "$n" --ignore-eos --ids --kernels "$s")"
        k=0; while ((k < n)) && [[ ${R[k]} == "${G[k]:-}" ]]; do k=$((k + 1)); done
        printf ' %11s' "$k/$n"; tot[$s]=$(( ${tot[$s]:-0} + k ))
    done
    echo
done
printf '%-44s' "total ($(( ${#prompts[@]} * n )) tokens)"; for s in "${sets[@]}"; do printf ' %11s' "${tot[$s]}"; done; echo
