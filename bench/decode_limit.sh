#!/usr/bin/env bash
# Decode against the machine's read limit, bundles alternated: issue 21's measure in one command.
# Each round runs `qhx bench --prompts 16 --decode 48` once on every bundle, in turn, so a host
# whose bandwidth drifts from minute to minute treats them alike; then one line a bundle: tok/s,
# the fraction of the read loop interleaved with its decode segments (median of the segments in
# brackets), the fraction of the best pass over fresh memory (`bandwidth_peak_frac`), each as
# min-max and median over the rounds, and how many rounds reached 0.85 of the best pass.
#   bench/decode_limit.sh [-n ROUNDS] [-t THREADS] BUNDLE...      (default 5 rounds, every core)
# The last line is each bundle's median tok/s over the first's (W4 against W8: the issue's 1.7x).
# QHX=PATH times that qhx binary instead of building build/qhx.
set -euo pipefail
rounds=5 threads=()
while getopts n:t: o; do
    case $o in
    n) rounds=$OPTARG ;;
    t) threads=(-t "$OPTARG") ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
(($# > 0)) || { echo "usage: bench/decode_limit.sh [-n ROUNDS] [-t THREADS] BUNDLE..." >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "decode_limit.sh: -n $rounds: not a positive count" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
qhx=${QHX:-$root/build/qhx}
[[ -n ${QHX:-} ]] || make -C "$root" -s build/qhx
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < rounds; r++)); do
    for i in $(seq $#); do
        b=${!i}
        "$qhx" bench "$b" "${threads[@]}" --prompts 16 --decode 48 --json >>"$out/$i.jsonl"
        echo "round $((r + 1))/$rounds: $(basename "$b")" >&2
    done
done
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $rounds rounds"
node - "$out" "$@" <<'EOF'
const fs = require("fs");
const [dir, ...bundles] = process.argv.slice(2);
const med = (a) => { const s = [...a].sort((x, y) => x - y), n = s.length; return n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const span = (a, d) => `${Math.min(...a).toFixed(d)}-${Math.max(...a).toFixed(d)} (${med(a).toFixed(d)})`;
const tok = [];
bundles.forEach((b, i) => {
    const runs = fs.readFileSync(`${dir}/${i + 1}.jsonl`, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    const get = (k) => runs.map((j) => (k in j ? j[k] : j.decode[k]));
    const t = get("tok_s"), peak = get("bandwidth_peak_frac");
    tok.push(med(t));
    console.log(`${b} (${runs[0].kernels}, ${runs[0].threads} threads): ${span(t, 2)} tok/s; interleaved ${span(get("bandwidth_frac"), 3)}, ` +
        `segments' median ${span(get("bandwidth_frac_median"), 3)}; best pass ${span(get("bandwidth_peak_gb_s"), 1)} GB/s, ` +
        `fraction ${span(peak, 3)}, >= 0.85 in ${peak.filter((x) => x >= 0.85).length}/${runs.length}`);
});
if (bundles.length > 1) console.log(`median tok/s over ${bundles[0]}'s: ` + bundles.slice(1).map((b, i) => `${b} ${(tok[i + 1] / tok[0]).toFixed(2)}x`).join(", "));
EOF
