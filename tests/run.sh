#!/usr/bin/env bash
# Runs the tests of a tier from the repository root; adds up their "N passed, N failed" lines and
# ends with the total in the same form, each suite's seconds beside it. Suites run side by side,
# QHX_TEST_JOBS at a time (default: one a core; a suite's replies never depend on load, and its
# few timed checks leave slack for it), the longest started first; the output comes in one fixed
# order, whatever finished first.
# usage: tests/run.sh BUILD [full|quick|sanitize]
#   full      every C test and every shell suite (make test)
#   quick     the C tests on the shipped models, the default kernel family, no servers (make test-quick)
#   sanitize  quick, plus the parsers' replayed fuzz inputs, the server and chat (make test-asan)
set -u
build=${1:-build} tier=${2:-full}
case $tier in full | quick | sanitize) ;; *) echo "tests/run.sh: tier '$tier' is not full, quick or sanitize" >&2; exit 2 ;; esac
jobs=${QHX_TEST_JOBS:-$(nproc)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "tests/run.sh: QHX_TEST_JOBS '$jobs' is not a positive count" >&2; exit 2; }
[[ $tier != full ]] && export QHX_TEST_QUICK=1
cd "$(dirname "$0")/.."
# large test data ships compressed; unpack it next to the build
export QHX_DATA="$build/data"
for gz in tests/data/tokenizers/*/tokenizer.json.gz; do
    out="$QHX_DATA/${gz#tests/data/}"; out=${out%.gz}
    if [[ ! -s $out || $gz -nt $out ]]; then mkdir -p "$(dirname "$out")" && gzip -dc "$gz" >"$out.tmp" && mv "$out.tmp" "$out"; fi
done

suites=() # in the report's order: the C tests, then the shell suites
for t in "$build"/test_*; do [[ -x $t ]] && suites+=("$t"); done
[[ $tier == full ]] && suites+=("tests/cli_test.sh $build" "tests/bundle_test.sh $build" "tests/oracle_test.sh $build" "tests/install_test.sh $build")
[[ $tier != quick ]] && suites+=("tests/fuzz_regress.sh $build" "tests/server_test.sh $build" "tests/chat_test.sh $build")
long=() rest=() # the longest suites start first
for i in "${!suites[@]}"; do
    case ${suites[$i]} in tests/server_test.sh* | tests/cli_test.sh* | tests/bundle_test.sh* | */test_batch) long+=("$i") ;; *) rest+=("$i") ;; esac
done

res=$(mktemp -d)
trap 'rm -rf "$res"' EXIT
start() { # start I: suite I's output, exit status and seconds into $res/I.*
    local t0=$SECONDS
    # shellcheck disable=SC2086 # a suite is a command and its build directory
    ${suites[$1]} >"$res/$1.out" 2>&1
    echo $? >"$res/$1.rc"
    echo $((SECONDS - t0)) >"$res/$1.s"
}
for i in "${long[@]}" "${rest[@]}"; do
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
    start "$i" &
done
wait

passed=0 failed=0 status=0
for i in "${!suites[@]}"; do
    name=${suites[$i]}
    cat "$res/$i.out"
    echo "  ($name took $(cat "$res/$i.s") s)"
    line=$(grep -E '^[a-z_-]+: [0-9]+ passed, [0-9]+ failed$' "$res/$i.out" | tail -n 1)
    rc=$(cat "$res/$i.rc")
    if [[ -z $line ]]; then echo "!! $name printed no summary (exit $rc)"; failed=$((failed + 1)); status=1; continue; fi
    p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$line")
    passed=$((passed + p)); failed=$((failed + f))
    if [[ $rc -ne 0 || $f -ne 0 ]]; then status=1; fi
done
echo "$passed passed, $failed failed"
exit $status
