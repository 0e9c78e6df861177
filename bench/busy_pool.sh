#!/usr/bin/env bash
# Decode with a CPU-bound process on every core beside it (issue 40's "a pool that yields"): for
# each binary and model, `qhx bench` decode tok/s with -t 1 and with the default thread count,
# first on a quiet machine, then with one busy loop per online CPU. Runs alternate (binary, then
# threads) within each round, so a drifting host treats them alike; medians over the rounds.
#   bench/busy_pool.sh [-n ROUNDS] MODEL...        (QHX="A B": the qhx binaries to compare)
# The goal: under load, the default thread count never decodes slower than -t 1.
set -euo pipefail
rounds=3
while getopts n: o; do
    case $o in
    n) rounds=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
(($# > 0)) || { echo "usage: bench/busy_pool.sh [-n ROUNDS] MODEL..." >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "busy_pool.sh: -n $rounds: not a positive count" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
read -r -a bins <<<"${QHX:-$root/build/qhx}"
[[ -n ${QHX:-} ]] || make -C "$root" -s build/qhx
out=$(mktemp -d)
busy=()
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; busy=(); }
trap 'stop_busy; rm -rf "$out"' EXIT
ncpu=$(nproc)
for load in quiet busy; do
    [[ $load == busy ]] && for _ in $(seq "$ncpu"); do (while :; do :; done) & busy+=($!); done
    for ((r = 0; r < rounds; r++)); do
        for m in "$@"; do
            for b in "${bins[@]}"; do
                for t in 1 "$ncpu"; do
                    tok=$("$b" bench "$m" -t "$t" --prompts 8 --decode 64 --json 2>/dev/null |
                        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).decode.tok_s))')
                    echo "$load $(basename "$m") $b $t $tok" >>"$out/all"
                done
            done
        done
        echo "$load round $((r + 1))/$rounds" >&2
    done
    stop_busy
done
echo "$(lscpu | sed -n 's/^Model name: *//p'), $ncpu cores; $rounds rounds; decode tok/s, median (min-max)"
node - "$out/all" <<'EOF'
const rows = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => l.split(" "));
const groups = new Map();
for (const [load, model, bin, t, tok] of rows) {
  const k = `${model} ${bin} ${load}`;
  if (!groups.has(k)) groups.set(k, {});
  (groups.get(k)[t] ||= []).push(Number(tok));
}
const med = (a) => { const s = [...a].sort((x, y) => x - y), n = s.length; return n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const f = (a) => `${med(a).toFixed(1)} (${Math.min(...a).toFixed(1)}-${Math.max(...a).toFixed(1)})`;
for (const [k, g] of groups) {
  const [one, all] = Object.keys(g).sort((a, b) => a - b);
  console.log(`${k}: -t ${one} ${f(g[one])}, -t ${all} ${f(g[all])}; default/-t 1 = ${(med(g[all]) / med(g[one])).toFixed(2)}`);
}
EOF
