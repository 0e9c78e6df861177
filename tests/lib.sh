# What the shell tests share; each sources it first (its $1, the build directory, is theirs).
# Counts checks into the "NAME: N passed, N failed" line tests/run.sh adds up.
set -u
build=${1:-build}
qhx="$build/qhx"
# QHX_VALGRIND=DIR: every qhx the suite starts runs under memcheck (tests/vg_wrap.sh, logs in DIR)
if [[ -n ${QHX_VALGRIND:-} ]]; then
    mkdir -p "$QHX_VALGRIND"
    printf '#!/bin/sh\nexec %q %q "$@"\n' "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/vg_wrap.sh" "$(realpath "$qhx")" >"$QHX_VALGRIND/qhx"
    chmod +x "$QHX_VALGRIND/qhx"
    qhx="$QHX_VALGRIND/qhx"
    export QHX_SLOW=${QHX_SLOW:-40} # memcheck runs a program ~50x slower: the suites' waits stretch by this
fi
# A tree mirrored for an emulator (scripts/emu_tree.sh) holds scripts that run another
# architecture's programs: emu is the emulator's command, emu_build the build it mirrors.
emu=() emu_build=
if [[ $(head -c 2 "$build/qhx" 2>/dev/null) == '#!' ]]; then
    wrap=$(sed -n 's/^exec //p' "$build/qhx") # EMULATOR... -0 "$0" PROGRAM "$@"
    read -r -a emu <<<"${wrap%% -0 *}"
    emu_build=${wrap#*'"$0" '}; emu_build=$(dirname "${emu_build% \"\$@\"}")
fi
slow=${QHX_SLOW:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }

# expect_err CODE NEEDLE CMD...: exit CODE and one stderr line naming NEEDLE (and, when the test
# sets quiet_stdout=1, nothing on stdout)
expect_err() {
    local code=$1 needle=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [[ $rc -ne $code ]]; then bad "$* -> exit $rc, want $code ($(head -c 300 "$tmp/err"))"; return; fi
    if [[ $(wc -l <"$tmp/err") -ne 1 ]]; then bad "$* -> stderr is not one line: $(cat "$tmp/err")"; return; fi
    if ! grep -qF -- "$needle" "$tmp/err"; then bad "$* -> '$(cat "$tmp/err")' does not name '$needle'"; return; fi
    if [[ ${quiet_stdout:-0} == 1 && -s $tmp/out ]]; then bad "$* -> wrote to stdout"; return; fi
    ok
}

# finish NAME: the summary line; the exit status says whether everything passed
finish() { echo "$1: $pass passed, $fail failed"; [[ $fail -eq 0 ]]; }

# padded_checkpoint DIR: the synthetic tiny shape (4160 lm-head rows) with q35-kjv's tokenizer (4129
# ids), as Qwen3.5 pads its vocabulary; seed 3 greedily generates padded ids (4150 third after the
# prompt 1,2,3 on every kernel set tested)
padded_checkpoint() {
    "$qhx" synth --preset tiny --seed 3 --out "$1" >/dev/null 2>&1 && cp models/q35-kjv/tokenizer.json "$1/"
}
