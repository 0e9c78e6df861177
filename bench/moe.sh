#!/usr/bin/env bash
# Qwen3.5-MoE on the 35B-A3B shape against llama.cpp's qwen35moe, in one run: a W4 bundle written
# straight from drawn weights (qhx synth --bundle: no 70 GB of BF16 on disk), a Q4_0 GGUF of the
# same shape (build/gguf_synth preset:35b-a3b), then qhx bench with the weights read in (the
# default) and mapped (--mmap), and llama.cpp through node-llama-cpp with its weights read in
# (llama-bench -mmp 0). Each model is read from disk before it is timed; with 24 GB of memory the
# two 20 GB models do not fit side by side, so they run one after the other.
#   bench/moe.sh DIR [PRESET] [LMHEAD]      (DIR: where the ~40 GB of models go; defaults 35b-a3b, w4)
set -euo pipefail
dir=${1:?usage: bench/moe.sh DIR [PRESET] [LMHEAD]}
preset=${2:-35b-a3b} head=${3:-w4} threads=${QHX_THREADS:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
make -C "$root" -s build/qhx build/gguf_synth
bundle="$dir/$preset.w4-$head" gguf="$dir/$preset.q4_0.gguf"
[[ -d $bundle ]] || "$root/build/qhx" synth --preset "$preset" --seed 1 --out "$bundle" --bundle w4 --lmhead "$head"
[[ -s $gguf ]] || "$root/build/gguf_synth" "preset:$preset" "$gguf" q4_0
nl="$root/build/node-llama-cpp"
if [[ ! -d $nl/node_modules/node-llama-cpp ]]; then
    mkdir -p "$nl" && (cd "$nl" && npm install --silent --no-audit --no-fund node-llama-cpp @node-llama-cpp/linux-x64 >/dev/null)
fi
cp "$root/bench/llama_cpp_bench.mjs" "$nl/"
"$root/build/qhx" inspect "$bundle/manifest.json" --mmap | grep -E "^(MLP|weights):"
echo "qhexrt W4 (read in): $("$root/build/qhx" bench "$bundle/manifest.json" -t "$threads" --prompts 512 --decode 32 --json)"
echo "qhexrt W4 (--mmap): $("$root/build/qhx" bench "$bundle/manifest.json" -t "$threads" --prompts 512 --decode 32 --json --mmap)"
echo "llama.cpp Q4_0: $(node "$nl/llama_cpp_bench.mjs" "$gguf" --threads "$threads" --prompts 512 --decode 32 --no-mmap)"
