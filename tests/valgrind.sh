#!/usr/bin/env bash
# valgrind memcheck over every C test binary, the CLI's commands (generate, sampling, chat,
# tokenize, template, forge, inspect, perplexity, logits, a served request) and every shell suite
# (CLI, bundle, chat, server, tokenizer oracle, fuzz-input replay). Slow (hours on two cores), so `make test-valgrind` runs it on demand rather than in
# `make check`; no suppressions.
# The CLI runs with -t 1: valgrind runs one thread at a time, and the pool's spinning workers would
# starve the one doing the work.
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
vg() { # vg NAME CMD... : no memcheck error, no leak
    local name=$1; shift
    if valgrind -q --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
        --error-exitcode=99 "$@" >"$tmp/out" 2>"$tmp/vg"; then pass=$((pass + 1)); echo "  $name: clean"
    elif grep -q "==[0-9]*==" "$tmp/vg"; then fail=$((fail + 1)); echo "FAIL $name:"; grep "==[0-9]*==" "$tmp/vg" | head -30
    else pass=$((pass + 1)); echo "  $name: clean (exit status from the program itself)"; fi
}
for t in "$build"/test_*; do vg "$(basename "$t")" "$t"; done
vg generate "$qhx" generate models/q35-kjv "And God said" -n 16 -t 1
vg sampling "$qhx" generate models/q35-kjv "And God said" -n 16 --temp 0.8 --top-k 40 --top-p 0.9 --min-p 0.05 --repeat-penalty 1.1 --stop "the" --json -t 1
vg chat sh -c "printf 'Who made the earth?\n/reset\nAnd the sea?\n' | valgrind -q --leak-check=full --error-exitcode=99 $qhx chat models/q35-kjv -n 12 -t 1"
vg tokenize sh -c "echo 'In the beginning God created' | valgrind -q --leak-check=full --error-exitcode=99 $qhx tokenize models/q35-kjv"
vg template sh -c "echo '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' | valgrind -q --leak-check=full --error-exitcode=99 $qhx template --jsonl"
vg forge "$qhx" forge models/q35-kjv -o "$tmp/b" --no-gate
vg inspect "$qhx" inspect "$tmp/b" --json
vg bundle-generate "$qhx" generate "$tmp/b" "And God said" -n 8 -t 1
head -c 1500 models/q35-kjv/README.md >"$tmp/text"  # ~800 tokens: memcheck runs the model ~200x slower
vg perplexity "$qhx" perplexity "$tmp/b" "$tmp/text" --ctx 64 -t 1
vg logits "$qhx" logits models/q35-kjv --tokens 1,2,3 --out "$tmp/l" -t 1
vg bad-model "$qhx" generate /nope x
# the server: one request of each kind, then SIGINT
valgrind -q --leak-check=full --error-exitcode=99 "$qhx" serve models/q35-kjv --port 0 -t 1 2>"$tmp/serve" &
spid=$!
for _ in $(seq 300); do port=$(grep -o '127.0.0.1:[0-9]*' "$tmp/serve" | cut -d: -f2); [[ -n $port ]] && break; sleep 0.2; done
curl -s "127.0.0.1:$port/v1/completions" -d '{"prompt":"And God","max_tokens":4}' >/dev/null
curl -sN "127.0.0.1:$port/v1/chat/completions" -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}' >/dev/null
curl -s "127.0.0.1:$port/v1/completions" -d '{bad' >/dev/null
kill -INT $spid; wait $spid; rc=$?
if [[ $rc -eq 0 ]] && ! grep -q "==[0-9]*==" "$tmp/serve"; then pass=$((pass + 1)); echo "  serve: clean"
else fail=$((fail + 1)); echo "FAIL serve (exit $rc):"; grep "==[0-9]*==" "$tmp/serve" | head -30; fi
# The shell suites with every qhx they start under memcheck (QHX_VALGRIND, tests/vg_wrap.sh): their
# own checks must pass and no process may leave a report. Their waits (a server starting, a terminal
# answering, a client's timeout) stretch by QHX_SLOW, 40 under memcheck (tests/lib.sh).
for suite in cli_test bundle_test chat_test server_test oracle_test fuzz_regress; do
    logs="$tmp/vg-$suite"
    mkdir -p "$logs"
    QHX_VALGRIND="$logs" "tests/$suite.sh" "$build" >"$tmp/suite" 2>&1; rc=$?
    reports=$(find "$logs" -name '*.log' -size +0 | head -5)
    runs=$(find "$logs" -name '*.log' | wc -l)
    if [[ $rc -eq 0 && -z $reports ]]; then pass=$((pass + 1)); echo "  $suite suite: $runs qhx runs clean; $(tail -1 "$tmp/suite")"
    else fail=$((fail + 1)); echo "FAIL $suite suite under memcheck (exit $rc):"; tail -5 "$tmp/suite"; for r in $reports; do head -30 "$r"; done; fi
done
finish valgrind
