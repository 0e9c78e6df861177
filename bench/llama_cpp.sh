#!/usr/bin/env bash
# qhexrt against llama.cpp on the same architecture and shapes, in one run: a GGUF of the
# checkpoint's shapes with random Q8_0 weights (build/gguf_synth) timed by llama.cpp through the
# npm package node-llama-cpp, then the qhexrt bundle of the same checkpoint timed by `qhx bench`.
#   bench/llama_cpp.sh CHECKPOINT_DIR BUNDLE_DIR [THREADS]
# QHX_BENCH_KERNELS="auto avx2" times each of those kernel sets after llama.cpp, in
# the same run (default: auto). QHX_LLAMA_CPU=haswell gives llama.cpp only that build of its CPU
# backend (ggml loads the best of its libggml-cpu-*.so for the CPU; haswell is AVX2 + FMA): with
# QHX_BENCH_KERNELS=avx2, an AVX2-only machine measured on this one.
# QHX_LLAMA_TYPES="q8_0 q4_0 q4_k" times llama.cpp on each of those weight types (default q8_0),
# QHX_BUNDLES="DIR..." times more qhexrt bundles after BUNDLE_DIR (a W4 one beside the W8 one).
# Writes CHECKPOINT_DIR.TYPE.gguf next to the checkpoint (4.5 GB for the 4B shape in q8_0).
set -euo pipefail
ck=${1:?usage: bench/llama_cpp.sh CHECKPOINT_DIR BUNDLE_DIR [THREADS]}
bundle=${2:?usage: bench/llama_cpp.sh CHECKPOINT_DIR BUNDLE_DIR [THREADS]}
threads=${3:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
make -C "$root" -s build/gguf_synth build/qhx
nl="$root/build/node-llama-cpp"
if [[ ! -d $nl/node_modules/node-llama-cpp ]]; then
    mkdir -p "$nl" && (cd "$nl" && npm install --silent --no-audit --no-fund node-llama-cpp @node-llama-cpp/linux-x64 >/dev/null)
fi
if [[ -n ${QHX_LLAMA_CPU:-} ]]; then
    one="$nl-$QHX_LLAMA_CPU"
    if [[ ! -d $one ]]; then
        cp -r "$nl" "$one.tmp"
        bins="$one.tmp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
        [[ -f $bins/libggml-cpu-$QHX_LLAMA_CPU.so ]] || { echo "no llama.cpp CPU build '$QHX_LLAMA_CPU' in $bins" >&2; exit 2; }
        find "$bins" -name 'libggml-cpu-*.so' ! -name "libggml-cpu-$QHX_LLAMA_CPU.so" -delete
        mv "$one.tmp" "$one"
    fi
    nl=$one
fi
cp "$root/bench/llama_cpp_bench.mjs" "$nl/"
for type in ${QHX_LLAMA_TYPES:-q8_0}; do
    gguf="${ck%/}.$type.gguf"
    [[ -s $gguf ]] || "$root/build/gguf_synth" "$ck" "$gguf" "$type"
    echo "llama.cpp $type: $(node "$nl/llama_cpp_bench.mjs" "$gguf" --threads "$threads" --prompts 128,512 --decode 128)"
done
for b in "$bundle" ${QHX_BUNDLES:-}; do
    for k in ${QHX_BENCH_KERNELS:-auto}; do
        echo "qhexrt $(basename "$b"): $("$root/build/qhx" bench "$b" -t "$threads" --kernels "$k" --prompts 128,512 --decode 128 --json)"
    done
done
