#!/usr/bin/env bash
# The aarch64 build under qemu-aarch64 (make check-aarch64; make check runs it): the kernel tests
# on a CPU with the dot product and i8mm (-cpu max: every NEON set against its scalar twin) and on
# one without (cortex-a53: the NEON sets refused, auto falls back to scalar), the parity tests
# against the golden logits, and a bundle forged on x86-64 run on aarch64
# (same weight layout: accepted, and the logits of the two machines agree); then the statically
# linked qhx (make CROSS=aarch64 STATIC=1), which needs no loader and no library on the device:
# its greedy text equals the dynamic build's, through the seed's qhx_generate and through serve.
# usage: tests/aarch64_test.sh AARCH64_BUILD NATIVE_BUILD [STATIC_BUILD]
set -u
abuild=${1:-build-aarch64} nbuild=${2:-build} sbuild=${3:-}
cd "$(dirname "$0")/.."
source tests/lib.sh "$nbuild"
emu() { qemu-aarch64 -cpu "$1" "${@:2}"; }
for cpu in max cortex-a53; do
    out=$(emu $cpu "$abuild/test_kernels" 2>&1); rc=$?
    printf '%s\n' "$out" | sed "s/^/  [$cpu] /" | grep -E 'neon|auto|passed|FAIL'
    [[ $rc -eq 0 ]] && ok || bad "test_kernels on $cpu"
done
emu cortex-a53 "$abuild/qhx" generate models/q35-kjv x -n 1 --kernels neon >/dev/null 2>"$tmp/err"
grep -q "lacks the instructions" "$tmp/err" && ok || bad "neon on a CPU without sdot: $(cat "$tmp/err")"
# parity against the golden logits (test_kernels above holds every set to its scalar twin): auto
# (neon-i8mm on -cpu max). The fp32 reference is plain C, checked natively. The greedy check reads
# the teacher-forced decode steps (test_parity: QHX_PARITY_GREEDY).
for set in auto; do
    out=$(QHX_TEST_QUICK=1 QHX_PARITY_GREEDY=rows emu max "$abuild/test_parity" ${set/auto/} 2>&1); rc=$?
    printf '%s\n' "$out" | grep -E 'worst|greedy|passed|FAIL' | sed "s/^/  [max $set] /"
    [[ $rc -eq 0 ]] && ok || bad "test_parity on aarch64 with $set"
done

# an x86-64 bundle on aarch64: the same W8 layout, so it loads; prefill logits within the kernel
# sets' own difference (avx512 against neon-i8mm: the same int16 activations and exact
# integer products, fp32 sums in other lane orders)
ids=$(seq -s, 7 53 4000 | head -c 300)
# across BUNDLE LABEL TOL: its logits on x86-64 and under qemu, within TOL of the largest |logit|
across() {
    "$nbuild/qhx" logits "$1" --tokens "$ids" --out "$tmp/x86.f32" 2>/dev/null
    emu max "$abuild/qhx" logits "$1" --tokens "$ids" --out "$tmp/arm.f32" 2>"$tmp/err" || bad "aarch64 refused an x86-64 $2: $(cat "$tmp/err")"
    local dev
    dev=$(paste <(od -An -v -f -w4 "$tmp/x86.f32") <(od -An -v -f -w4 "$tmp/arm.f32") |
        awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; a = $1 < 0 ? -$1 : $1; if (a > s) s = a} END {printf "%.2e", NR ? m / s : 1}')
    echo "  x86-64 $2 on aarch64: logits within $dev of the largest |logit| of the x86-64 run"
    awk -v d="$dev" -v t="$3" 'BEGIN {exit !(d < t)}' && ok || bad "x86-64 and aarch64 logits of the $2 differ by $dev"
}
"$nbuild/qhx" forge models/q35-kjv -o "$tmp/b" --no-gate >/dev/null 2>&1 || bad "forge on x86-64"
across "$tmp/b" bundle 1e-4
# a W4 bundle too: its integer kernels are the twin's bit for bit on both machines, the rest of
# the model's fp32 arithmetic differs as above, and W4 takes int8 activations, so a value the two
# put on either side of a rounding boundary moves by a step, 1/254 of its block's largest value:
# two x86-64 sets differ as much (avx512 against avx2 5.4e-3, against scalar 9.5e-3)
"$nbuild/qhx" forge models/q35-kjv -o "$tmp/b4" --weights w4 --lmhead w4 --no-gate >/dev/null 2>&1 || bad "forge W4 on x86-64"
across "$tmp/b4" "W4 bundle" 2e-2
sed -i 's/"target": "cpu-x86_64"/"target": "gpu-hexagon-v81"/' "$tmp/b/manifest.json"
emu max "$abuild/qhx" generate "$tmp/b" --tokens 1 -n 1 >/dev/null 2>"$tmp/err"
grep -q "forge the checkpoint again" "$tmp/err" && ok || bad "another target's bundle: $(cat "$tmp/err")"
if [[ -n $sbuild ]]; then
    readelf -lW "$sbuild/qhx" >"$tmp/elf" 2>&1 && readelf -dW "$sbuild/qhx" >>"$tmp/elf" 2>&1
    ! grep -qE 'INTERP|NEEDED' "$tmp/elf" && grep -q AArch64 <(readelf -h "$sbuild/qhx") && ok || bad "$sbuild/qhx is not a static aarch64 program: $(grep -E 'INTERP|NEEDED' "$tmp/elf" | head -3)"
    emu max "$abuild/qhx_generate" "$tmp/b4/manifest.json" cpu - "$tmp/b4" 16 "And God said" >"$tmp/dyn.txt" 2>/dev/null
    emu max "$sbuild/qhx_generate" "$tmp/b4/manifest.json" cpu - "$tmp/b4" 16 "And God said" >"$tmp/static.txt" 2>"$tmp/err"
    [[ -s $tmp/dyn.txt ]] && cmp -s "$tmp/dyn.txt" "$tmp/static.txt" && ok || bad "static qhx_generate: '$(cat "$tmp/static.txt")' vs '$(cat "$tmp/dyn.txt")' ($(tail -1 "$tmp/err"))"
    echo "  static qhx_generate on aarch64: $(tr '\n' ' ' <"$tmp/static.txt")"
    qemu-aarch64 -cpu max "$sbuild/qhx" serve "$tmp/b4" --port 0 2>"$tmp/slog" & # not through emu(): SIGINT must reach it
    spid=$!
    for _ in $(seq 300); do port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/slog" | grep -o '[0-9]*$'); [[ -n $port ]] && break; sleep 0.1; done
    curl -s "http://127.0.0.1:${port:-1}/v1/completions" -d '{"prompt":"And God said","max_tokens":16,"temperature":0}' >"$tmp/sreply"
    kill -INT "$spid"; wait "$spid"
    node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1])), want=require("fs").readFileSync(process.argv[2],"utf8");
             process.exit(want.startsWith("And God said" + r.choices[0].text) ? 0 : 1)' "$tmp/sreply" "$tmp/static.txt" && ok ||
        bad "static qhx serve: $(head -c 300 "$tmp/sreply") ($(tail -2 "$tmp/slog"))"
fi
finish aarch64
