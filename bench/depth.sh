#!/usr/bin/env bash
# Long contexts against ik_llama.cpp, in one run: prefill of 512 tokens and decode at each depth on
# the 4B shape, qhexrt's W8 and W4 bundles (`qhx bench --depth`) alternating with ik_llama.cpp's
# Q8_0 and Q4_0 GGUFs of the same shape (its llama-sweep-bench, which grows one context and times
# 512-token windows and a few decode steps at every --sweep-stride-th window). Both are warm at depth
# 0: qhexrt's depths follow its own prefill and decode runs, and ik_llama.cpp evaluates a 512-token
# batch first (-wb; without it its first window often ran below its 4k one). Decode over depth 0's
# is qhexrt's alternated with depth 0 in the same seconds; ik_llama.cpp's, its first window's (minutes
# earlier). With -r ROUNDS the pairs run that many times in turn (qhexrt, ik_llama.cpp, qhexrt, ...)
# and a last table gives each ratio's median over the rounds: on a shared VM one run's ratio moves
# by a fifth with the minute it ran in.
#   IK=/path/to/ik_llama.cpp/build/bin [PAIRS="w8:q8_0 w4:q4_0"] bench/depth.sh [-t THREADS] [-d DEPTHS] [-n DECODE] [-r ROUNDS] DIR
# DIR keeps the bundles and GGUFs between runs (about 14 GB) and each run's raw output; DEPTHS (default 0,4096,16384,32768)
# must be multiples of 512 whose steps divide evenly (the sweep's stride). Build ik_llama.cpp as
# bench/README.md says (cmake -DGGML_NATIVE=ON, targets llama-sweep-bench). Both read their
# weights into memory (ik: --no-mmap), so the page cache cannot evict them mid-run; both keep the
# KV cache in f16 (their default and ours) unless QHX_KV / IK_KV say otherwise.
set -euo pipefail
threads=2 depths=0,4096,16384,32768 decode=32 rounds=1
while getopts t:d:n:r: o; do
    case $o in t) threads=$OPTARG ;; d) depths=$OPTARG ;; n) decode=$OPTARG ;; r) rounds=$OPTARG ;; *) exit 2 ;; esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "-r $rounds: rounds must be a whole number from 1" >&2; exit 2; }
shift $((OPTIND - 1))
dir=${1:?usage: IK=DIR bench/depth.sh [-t THREADS] [-d DEPTHS] [-n DECODE] [-r ROUNDS] DIR}
ik=${IK:?IK: the directory holding ik_llama.cpp llama-sweep-bench}
root=$(cd "$(dirname "$0")/.." && pwd)
make -C "$root" -s build/qhx build/gguf_synth
mkdir -p "$dir"
dir=$(cd "$dir" && pwd) ik=$(cd "$ik" && pwd) # ik_llama.cpp runs inside DIR
IFS=, read -ra ds <<<"$depths"
ctx=$((${ds[-1]} + 512))
stride=$((${ds[1]:-512} / 512))
for d in "${ds[@]}"; do
    (( d % 512 == 0 && (d / 512) % stride == 0 )) || { echo "depth $d: not a multiple of the sweep stride, $((stride * 512)) tokens" >&2; exit 2; }
done
for w in w8 w4; do # written again where an earlier run's is missing, unreadable or holds too few positions
    have=$("$root/build/qhx" inspect "$dir/4b-$w" 2>/dev/null | sed -n 's/^context: \([0-9]*\) positions$/\1/p' || true)
    ((${have:-0} >= ctx)) ||
        "$root/build/qhx" synth --preset 4b --seed 1 --out "$dir/4b-$w" --bundle $w --lmhead $w --context-len $ctx --force
done
for t in q8_0 q4_0; do [[ -s $dir/4b.$t.gguf ]] || "$root/build/gguf_synth" preset:4b "$dir/4b.$t.gguf" $t; done

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads, depths $depths, $decode decode steps"
ik_run() { # GGUF: "depth prefill decode" for each wanted depth (sweep-bench writes its JSON lines to stderr, its llama.log into DIR)
    (cd "$dir" && "$ik/llama-sweep-bench" -m "$1" -c $ctx -ub 512 -b 512 -n "$decode" -t "$threads" -fa 1 --no-mmap \
        -ctk "${IK_KV:-f16}" -ctv "${IK_KV:-f16}" --sweep-stride $stride -wb --output-format jsonl 2>&1 >/dev/null) |
        tee "$dir/ik-$(basename "$1").jsonl" | grep '^{' | python3 -c '
import json, sys
wanted = set(int(d) for d in sys.argv[1].split(","))
for line in sys.stdin:
    r = json.loads(line)
    if r["n_kv"] in wanted: print(r["n_kv"], round(r["speed_pp"], 2), round(r["speed_tg"], 2))' "$depths"
}
qhx_run() { # BUNDLE: the same (a failed bench has said why on stderr; the script stops there)
    local out=$dir/qhx-$(basename "$1").json
    "$root/build/qhx" bench "$1" -t "$threads" --kv "${QHX_KV:-f16}" --prompts 16 --decode "$decode" --depth "$depths" --json >"$out" || return 1
    python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["depths"]: print(r["depth"], r["prefill_512_tok_s"], r["decode_tok_s"], r["decode_vs_depth0"])' "$out"
}
rows=$(mktemp) # "pair depth prefill-ratio decode-ratio qhexrt-vs-0 ik-vs-0", a line per round
trap 'rm -f "$rows"' EXIT
for round in $(seq "$rounds"); do
    for pair in ${PAIRS:-w8:q8_0 w4:q4_0}; do
        w=${pair%:*} t=${pair#*:}
        q=$(qhx_run "$dir/4b-$w")
        echo "qhexrt $w: $(tr '\n' ' ' <<<"$q")"
        k=$(ik_run "$dir/4b.$t.gguf")
        echo "ik_llama.cpp $t: $(tr '\n' ' ' <<<"$k")"
        echo "## qhexrt $w against ik_llama.cpp $t, round $round of $rounds"
        echo "| depth | qhexrt prefill / decode tok/s | ik_llama.cpp prefill / decode | ratio prefill / decode | decode over depth 0's: qhexrt (alternated) / ik |"
        echo "|---|---|---|---|---|"
        awk -v pair="$w:$t" -v rows="$rows" '
             NR == FNR { pre[$1] = $2; dec[$1] = $3; vs0[$1] = $4; next }
             FNR == 1 { first = $3 }
             $1 in pre { printf "| %d | %.2f / %.2f | %.2f / %.2f | %.2fx / %.2fx | %.2f / %.2f |\n", $1, pre[$1], dec[$1], $2, $3, pre[$1] / $2, dec[$1] / $3, vs0[$1], $3 / first
                         printf "%s %d %.4f %.4f %.4f %.4f\n", pair, $1, pre[$1] / $2, dec[$1] / $3, vs0[$1], $3 / first >> rows }' \
            <(echo "$q") <(echo "$k")
    done
done
if ((rounds > 1)); then
    python3 - "$rows" "$rounds" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    pair, depth, *r = line.split()
    by.setdefault((pair, int(depth)), []).append([float(x) for x in r])
for pair in dict.fromkeys(p for p, _ in by):
    print(f"## medians over {sys.argv[2]} rounds, qhexrt {pair.replace(':', ' against ik_llama.cpp ')} (range)")
    print("| depth | ratio prefill | ratio decode | decode over depth 0's: qhexrt / ik |")
    print("|---|---|---|---|")
    for (p, d), rs in sorted(by.items()):
        if p != pair: continue
        col = lambda i, x="": f"{statistics.median(r[i] for r in rs):.2f}{x} ({min(r[i] for r in rs):.2f}-{max(r[i] for r in rs):.2f})"
        print(f"| {d} | {col(0, 'x')} | {col(1, 'x')} | {col(2)} / {col(3)} |")
PY
fi
