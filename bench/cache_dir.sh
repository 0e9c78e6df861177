#!/usr/bin/env bash
# Time to first token of one long chat prompt across a server restart (`qhx serve --cache-dir`):
# a server without a directory, one with an empty directory (cold, writing the state files), then
# a new server on that directory (resuming from them). Each server loads the model, answers the one
# request and stops; the time is the request's, the model's load left out.
#   bench/cache_dir.sh MODEL [REPEATS]   (REPEATS of an 18-token sentence make the system prompt; 220:
#                                         ~4,000 tokens with Qwen's tokenizer)
# The model needs a tokenizer (copy Qwen's tokenizer.json beside a `qhx synth` bundle).
set -euo pipefail
(($# >= 1)) || { echo "usage: bench/cache_dir.sh MODEL [REPEATS]" >&2; exit 2; }
model=$1 repeats=${2:-220}
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "cache_dir.sh: $repeats: not a positive count" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
qhx=${QHX:-$root/build/qhx}
tmp=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
req=$(node -e 'const w="In the beginning God created the heaven and the earth, and the earth was without form. ".repeat(+process.argv[1]);
  console.log(JSON.stringify({messages:[{role:"system",content:w},{role:"user",content:"Who made the heaven?"}],max_tokens:4,temperature:0}))' "$repeats")
printf '| server | prompt tokens | resumed | time to first token, ms | state files |\n|---|---|---|---|---|\n'
for run in "no directory" "empty directory" "restarted"; do
    args=(--cache-dir "$tmp/dir")
    [[ $run == "no directory" ]] && args=()
    "$qhx" serve "$model" --port 0 --parallel 1 "${args[@]}" 2>"$tmp/log" &
    pid=$!
    port=
    for _ in $(seq 1200); do
        port=$(grep -ao 'listening on http://127.0.0.1:[0-9]*' "$tmp/log" | grep -o '[0-9]*$' || true)
        [[ -n $port ]] && break
        kill -0 "$pid" 2>/dev/null || { cat "$tmp/log" >&2; exit 1; }
        sleep 0.5
    done
    [[ -n $port ]] || { echo "cache_dir.sh: the server did not start" >&2; exit 1; }
    curl -s "http://127.0.0.1:$port/v1/chat/completions" -d "$req" >"$tmp/out"
    sleep 2 # the reply's snapshot, taken after the answer
    kill -INT "$pid"; wait "$pid" || true; pid=
    line=$(grep -a ' 200 prompt ' "$tmp/log" | head -1)
    files=$(grep -ao '[0-9]* files in [0-9.]* MB' "$tmp/log" | tail -1 || true)
    printf '| %s | %s | %s | %s | %s |\n' "$run" "$(sed -E 's/.* prompt ([0-9]+) .*/\1/' <<<"$line")" \
        "$(sed -E 's/.*\(cached ([0-9]+)\).*/\1/' <<<"$line")" "$(sed -E 's/.*ttft ([0-9.]+) ms.*/\1/' <<<"$line")" "${files:--}"
done
