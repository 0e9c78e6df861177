#!/usr/bin/env bash
# Runs the tests of a tier from the repository root; adds up their "N passed, N failed" lines and
# ends with the total in the same form, each suite's seconds beside it.
# usage: tests/run.sh BUILD [full|quick|sanitize]
#   full      every C test and every shell suite (make test)
#   quick     the C tests on the shipped models, the default kernel family, no servers (make test-quick)
#   sanitize  quick, plus the parsers' replayed fuzz inputs, the server and chat (make test-asan)
set -u
build=${1:-build} tier=${2:-full}
case $tier in full | quick | sanitize) ;; *) echo "tests/run.sh: tier '$tier' is not full, quick or sanitize" >&2; exit 2 ;; esac
[[ $tier != full ]] && export QHX_TEST_QUICK=1
cd "$(dirname "$0")/.."
passed=0 failed=0 status=0
# large test data ships compressed; unpack it next to the build
export QHX_DATA="$build/data"
for gz in tests/data/tokenizers/*/tokenizer.json.gz; do
    out="$QHX_DATA/${gz#tests/data/}"; out=${out%.gz}
    if [[ ! -s $out || $gz -nt $out ]]; then mkdir -p "$(dirname "$out")" && gzip -dc "$gz" >"$out.tmp" && mv "$out.tmp" "$out"; fi
done
run() {
    local out rc t0=$SECONDS
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out"
    echo "  ($* took $((SECONDS - t0)) s)"
    local line
    line=$(printf '%s\n' "$out" | grep -E '^[a-z_-]+: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [[ -z $line ]]; then echo "!! $* printed no summary (exit $rc)"; failed=$((failed + 1)); status=1; return; fi
    local p f
    p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$line")
    passed=$((passed + p)); failed=$((failed + f))
    if [[ $rc -ne 0 || $f -ne 0 ]]; then status=1; fi
}
for t in "$build"/test_*; do
    [[ -x $t ]] && run "$t"
done
if [[ $tier == full ]]; then
    run tests/cli_test.sh "$build"
    run tests/bundle_test.sh "$build"
    run tests/oracle_test.sh "$build"
    run tests/install_test.sh "$build"
fi
if [[ $tier != quick ]]; then
    run tests/fuzz_regress.sh "$build"
    run tests/server_test.sh "$build"
    run tests/chat_test.sh "$build"
fi
echo "$passed passed, $failed failed"
exit $status
