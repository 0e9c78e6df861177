// llama.cpp (through the npm package node-llama-cpp) on a GGUF from build/gguf_synth: prefill of
// seeded random token ids from a fresh context, then greedy decode, the way `qhx bench` measures.
//   node bench/llama_cpp_bench.mjs MODEL.gguf [--threads 2] [--prompts 128,512] [--decode 128] [--no-mmap]
// --no-mmap reads the weights into memory (llama-bench -mmp 0), as qhexrt reads a bundle in.
import {getLlama} from "node-llama-cpp";

const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
const modelPath = args[0];
const threads = Number(opt("--threads", "2"));
const prompts = opt("--prompts", "128,512").split(",").map(Number);
const decode = Number(opt("--decode", "128"));

const llama = await getLlama({gpu: false, logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: !args.includes("--no-mmap")});
let seed = 1;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
const ids = n => Array.from({length: n}, () => 256 + (rand() % (model.tokens.length ? 1000 : 1000)));
const result = {model: modelPath, threads, llama_cpp: llama.buildType + " " + (llama.llamaCppRelease?.release ?? ""), prefill: []};
const max = Math.max(...prompts, 128) + decode + 16;
for (const n of prompts) {
    const ctx = await model.createContext({contextSize: max, batchSize: 512, threads, sequences: 1});
    const seq = ctx.getSequence();
    const t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(ids(n));
    const s = (performance.now() - t0) / 1000;
    result.prefill.push({tokens: n, tok_s: +(n / s).toFixed(2)});
    await ctx.dispose();
}
{
    const ctx = await model.createContext({contextSize: max, batchSize: 512, threads, sequences: 1});
    const seq = ctx.getSequence();
    await seq.evaluateWithoutGeneratingNewTokens(ids(128));
    let got = 0;
    const t0 = performance.now();
    for await (const tok of seq.evaluate([ids(1)[0]], {temperature: 0})) {
        if (++got >= decode) break;
    }
    const s = (performance.now() - t0) / 1000;
    result.decode = {tokens: got, tok_s: +(got / s).toFixed(2)};
    await ctx.dispose();
}
console.log(JSON.stringify(result));
await model.dispose();
