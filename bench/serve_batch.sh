#!/usr/bin/env bash
# Aggregate decode through `qhx serve` with 1, 2, 4 and 8 concurrent streams (issue 40's batched
# decode): each stream a completion of N tokens from its own prompt (token ids, so any bundle
# serves), all started at once; aggregate tok/s = the tokens of all streams over the wall time
# from the first request to the last reply, minus the time to the first token (prefill).
#   bench/serve_batch.sh [-n TOKENS] [-r ROUNDS] MODEL         (QHX=PATH: the qhx binary)
# A synthetic bundle (qhx synth, qhx forge) has no tokenizer: copy one in first (the Qwen3 one in
# build/data/tokenizers/qwen3/tokenizer.json serves; its ids are a prefix of the vocabulary).
# With LLAMA_SERVER=PATH and GGUF=FILE it runs llama.cpp's llama-server with the same number of
# slots (-np) on the same shape in the same run, the rounds alternated; it reads its weights in
# (--no-mmap; newer llama.cpp spells it LLAMA_SERVER_ARGS="-lm none").
set -euo pipefail
tokens=64 rounds=2
while getopts n:r: o; do
    case $o in
    n) tokens=$OPTARG ;;
    r) rounds=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
(($# == 1)) || { echo "usage: bench/serve_batch.sh [-n TOKENS] [-r ROUNDS] MODEL" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
qhx=${QHX:-$root/build/qhx}
out=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill $pid 2>/dev/null; rm -rf "$out"' EXIT
free_port() { node -e 'const s=require("net").createServer().listen(0,()=>{console.log(s.address().port);s.close()})'; }

# one round: N streams against URL, their completion tokens over the decode wall time
streams() { # URL N
    node - "$1" "$2" "$tokens" <<'EOF'
const [url, n, tokens] = process.argv.slice(2).map((v, i) => (i ? Number(v) : v));
async function one(i) {
  const t0 = performance.now();
  const r = await fetch(url + "/v1/completions", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: [11 + i, 22 + i, 33 + i, 44 + i], max_tokens: tokens, temperature: 0, stream: true }) });
  const reader = r.body.getReader();
  let first = 0, text = "";
  for (;;) { const { done, value } = await reader.read(); if (done) break; if (!first) first = performance.now(); text += Buffer.from(value).toString(); }
  return { first: first - t0, end: performance.now() - t0, events: (text.match(/^data: \{/gm) || []).length };
}
(async () => {
  const t0 = performance.now();
  const all = await Promise.all([...Array(n).keys()].map(one));
  const wall = (performance.now() - t0) - Math.max(...all.map((a) => a.first));
  console.log((n * (tokens - 1) / (wall / 1000)).toFixed(2));
})();
EOF
}

run_server() { # NAME PORT CMD...
    local name=$1 port=$2; shift 2
    "$@" >"$out/$name.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    echo "serve_batch.sh: $name did not start: $(tail -3 "$out/$name.log")" >&2; exit 1
}

echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $tokens tokens a stream, $rounds rounds; aggregate decode tok/s"
for ((r = 0; r < rounds; r++)); do
    port=$(free_port)
    run_server qhx "$port" "$qhx" serve "$1" --port "$port" --parallel 8 --cache-mb 0 -n "$tokens"
    for n in 1 2 4 8; do echo "qhx $n $(streams "http://127.0.0.1:$port" "$n")" >>"$out/all"; done
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    if [[ -n ${LLAMA_SERVER:-} ]]; then
        for n in 1 2 4 8; do
            port=$(free_port)
            run_server llama "$port" "$LLAMA_SERVER" -m "$GGUF" --port "$port" -np "$n" -c $((n * (tokens + 16))) -t "$(nproc)" ${LLAMA_SERVER_ARGS---no-mmap}
            echo "llama-server $n $(streams "http://127.0.0.1:$port" "$n")" >>"$out/all"
            kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
        done
    fi
done
node - "$out/all" <<'EOF'
const rows = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => l.split(" "));
const med = (a) => { const s = [...a].sort((x, y) => x - y), n = s.length; return n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const by = {};
for (const [who, n, v] of rows) ((by[who] ||= {})[n] ||= []).push(Number(v));
for (const [who, g] of Object.entries(by))
  console.log(`${who}: ` + Object.keys(g).map((n) => `${n} streams ${med(g[n]).toFixed(1)}`).join(", ") +
              `; 4 streams / 1 = ${(med(g[4]) / med(g[1])).toFixed(2)}x`);
EOF
