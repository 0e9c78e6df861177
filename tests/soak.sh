#!/usr/bin/env bash
# A soak of qhx serve on loopback (not in make test: it runs for minutes): CLIENTS clients for
# SECONDS mixing streamed and plain requests that share prefixes, hang-ups mid-prefill and
# mid-stream, and malformed requests (tests/oracle/soak_clients.js). Checks: no crash, every
# greedy or seeded reply equal to its solo reply, RSS flat after warm-up (the figures printed:
# after the first quarter and at the end; flat = within 10 % + 16 MB), no slot, queue entry or
# file descriptor left behind.
#   tests/soak.sh [BUILD] [CLIENTS] [SECONDS] [MODEL]      (defaults: build 64 600 models/q35-kjv)
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
clients=${2:-64} seconds=${3:-600} model=${4:-models/q35-kjv}
"$qhx" serve "$model" --port 0 --parallel 4 --cache-mb 64 2>"$tmp/log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/log" | grep -o '[0-9]*$'); [[ -n $port ]] && break; sleep 0.1; done
url="http://127.0.0.1:$port"
rss() { awk '/^VmRSS/ {print $2}' /proc/$pid/status; }
fds() { ls /proc/$pid/fd | wc -l; }
fd0=$(fds)
node tests/oracle/soak_clients.js "$url" "$clients" "$seconds" >"$tmp/clients" 2>&1 &
cpid=$!
sleep $((seconds / 4)); rss1=$(rss)
wait $cpid; rc=$?
sleep 1
rss2=$(rss) fd1=$(fds)
cat "$tmp/clients" | grep -v '^ok'
p=$(sed -nE 's/^soak: ([0-9]+) passed, ([0-9]+) failed$/\1/p' "$tmp/clients"); f=$(sed -nE 's/^soak: ([0-9]+) passed, ([0-9]+) failed$/\2/p' "$tmp/clients")
pass=$((pass + ${p:-0})); fail=$((fail + ${f:-1}))
check "kill -0 $pid" "the server died: $(tail -3 "$tmp/log")"
echo "  RSS after a quarter ${rss1} kB, at the end ${rss2} kB; file descriptors ${fd0} before, ${fd1} after"
check "(( rss2 <= rss1 * 11 / 10 + 16384 ))" "RSS grew from $rss1 to $rss2 kB"
check "(( fd1 <= fd0 ))" "file descriptors: $fd0 before, $fd1 after"
curl -s "$url/metrics" >"$tmp/metrics"
check "grep -qx 'qhx_slots_busy 0' $tmp/metrics && grep -qx 'qhx_queue_depth 0' $tmp/metrics" "slots or queue left busy: $(grep -E 'busy|queue' "$tmp/metrics")"
grep -E '^qhx_requests_total|^qhx_generated_tokens_total' "$tmp/metrics" | sed 's/^/  /'
kill -INT $pid; wait $pid
check "[[ $? -eq 0 ]]" "the server did not stop cleanly"
finish soak
