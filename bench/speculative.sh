#!/usr/bin/env bash
# Speculative decoding on q35-kjv (through q35-kjv-mtp: the same trunk, with its MTP head): decode
# tok/s without and with --draft ngram and --draft mtp (alternating runs, the same greedy tokens)
# and the acceptance, on (a) continuing a passage quoted in the prompt and (b) free generation from
# a short prompt; then each drafter's median against plain decoding's.
#   bench/speculative.sh [BUILD] [RUNS]
set -eu
build=${1:-build} runs=${2:-3}
cd "$(dirname "$0")/.."
qhx=$build/qhx
passage="And God said, Let there be light: and there was light. And God saw the light, that it was good: and God divided the light from the darkness. And God called the light Day, and the darkness he called Night. And the evening and the morning were the first day. And God said, Let there be a firmament in the midst of the waters, and let it divide the waters from the waters."
quoted="$passage

$passage

And God said, Let there be light:"
free="Blessed are the poor in spirit: for"
for what in quoted free; do
    [[ $what == quoted ]] && prompt=$quoted || prompt=$free
    for r in $(seq "$runs"); do
        for d in none ngram mtp; do
            "$qhx" generate models/q35-kjv-mtp "$prompt" -n 256 --ignore-eos --draft "$d" --json 2>/dev/null |
                node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);
                  console.log([process.argv[1], process.argv[2], j.decode_tok_s.toFixed(1), j.drafted, j.accepted, j.verify_passes,
                               require("crypto").createHash("sha1").update(JSON.stringify(j.ids)).digest("hex").slice(0,8)].join("\t"))})' "$what" "$d"
        done
    done
done | awk -F'\t' 'BEGIN {print "text\tdraft\tdecode tok/s\tdrafted\taccepted\tverify passes\tids"} {print; n[$1 FS $2]++; v[$1 FS $2, n[$1 FS $2]] = $3}
    function median(k,   m, i, j, t, a) { m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, i];
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
    END { for (w = 0; w < 2; w++) { t = w ? "free" : "quoted"; b = median(t FS "none");
          printf "%s: median decode tok/s: none %.1f, ngram %.1f (%.2fx), mtp %.1f (%.2fx)\n", t, b,
                 median(t FS "ngram"), median(t FS "ngram") / b, median(t FS "mtp"), median(t FS "mtp") / b } }'
