#!/usr/bin/env bash
# qhexrt against llama.cpp on the same architecture and shapes, in one run: a GGUF of the
# checkpoint's shapes with random Q8_0 weights (build/gguf_synth) timed by llama.cpp through the
# npm package node-llama-cpp, then the qhexrt bundle of the same checkpoint timed by `qhx bench`.
#   bench/llama_cpp.sh CHECKPOINT_DIR BUNDLE_DIR [THREADS]
# QHX_BENCH_KERNELS="auto avx512-q8 avx512" times each of those kernel sets after llama.cpp, in
# the same run (default: auto).
# Writes CHECKPOINT_DIR.q8_0.gguf next to the checkpoint (4.5 GB for the 4B shape).
set -euo pipefail
ck=${1:?usage: bench/llama_cpp.sh CHECKPOINT_DIR BUNDLE_DIR [THREADS]}
bundle=${2:?usage: bench/llama_cpp.sh CHECKPOINT_DIR BUNDLE_DIR [THREADS]}
threads=${3:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
make -C "$root" -s build/gguf_synth build/qhx
gguf="${ck%/}.q8_0.gguf"
[[ -s $gguf ]] || "$root/build/gguf_synth" "$ck" "$gguf"
nl="$root/build/node-llama-cpp"
if [[ ! -d $nl/node_modules/node-llama-cpp ]]; then
    mkdir -p "$nl" && (cd "$nl" && npm install --silent --no-audit --no-fund node-llama-cpp @node-llama-cpp/linux-x64 >/dev/null)
fi
cp "$root/bench/llama_cpp_bench.mjs" "$nl/"
echo "llama.cpp: $(node "$nl/llama_cpp_bench.mjs" "$gguf" --threads "$threads" --prompts 128,512 --decode 128)"
for k in ${QHX_BENCH_KERNELS:-auto}; do
    echo "qhexrt:    $("$root/build/qhx" bench "$bundle" -t "$threads" --kernels "$k" --prompts 128,512 --decode 128 --json)"
done
