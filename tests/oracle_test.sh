#!/usr/bin/env bash
# Independent oracles on inputs no golden file holds: Hugging Face's tokenizers on seeded random
# Unicode (fixed seed; QHX_ORACLE_SEED=N tries others), and on every code point Unicode 15.1/16.0
# added and every whitespace code point, each in contexts where its class decides the split.
# Every text must give identical ids. Then the other way: seeded random id sequences (bytes that
# form no character among them) must decode to Hugging Face's text, U+FFFD where it puts one.
source "$(dirname "$0")/lib.sh"
data=${QHX_DATA:-build/data}
cd "$(dirname "$0")/.."
if [[ ! -d tests/oracle/node_modules/tokenizers ]]; then
    echo "oracle: node_modules missing (make check installs them: scripts/deps.sh)"
    echo "oracle: 0 passed, 1 failed"; exit 1
fi
for tk in qwen3 qwen3-qwen35regex; do
    node tests/oracle/tokenizer_oracle.js "$data/tokenizers/$tk/tokenizer.json" 1000 ${QHX_ORACLE_SEED:-1} >"$tmp/want.jsonl" || { fail=$((fail + 1)); continue; }
    node tests/oracle/codepoint_oracle.js "$data/tokenizers/$tk/tokenizer.json" >>"$tmp/want.jsonl" || { fail=$((fail + 1)); continue; }
    node -e 'const r=require("readline").createInterface({input:process.stdin});r.on("line",l=>console.log(JSON.stringify({text:JSON.parse(l).text})))' \
        <"$tmp/want.jsonl" | "$qhx" tokenize "$data/tokenizers/$tk" --jsonl --special >"$tmp/got.jsonl"
    node -e 'const [w,g]=process.argv.slice(1).map(f=>require("fs").readFileSync(f,"utf8").trim().split("\n").map(JSON.parse));
             let bad=0; w.forEach((x,i)=>{ if (!g[i] || JSON.stringify(x.ids)!==JSON.stringify(g[i].ids)) { bad++; if (bad <= 5) console.log("MISMATCH", JSON.stringify(x.text), JSON.stringify(x.ids), JSON.stringify(g[i]&&g[i].ids)); } });
             console.log(`  '$tk': ${w.length-bad}/${w.length} texts identical (1000 random, the rest one per added or whitespace code point)`); process.exit(bad?1:0)' "$tmp/want.jsonl" "$tmp/got.jsonl" \
        && pass=$((pass + 1)) || fail=$((fail + 1))
    node tests/oracle/decode_oracle.js "$data/tokenizers/$tk/tokenizer.json" 1000 ${QHX_ORACLE_SEED:-1} >"$tmp/dwant.jsonl" || { fail=$((fail + 1)); continue; }
    node -e 'const r=require("readline").createInterface({input:process.stdin});r.on("line",l=>console.log(JSON.stringify({ids:JSON.parse(l).ids})))' \
        <"$tmp/dwant.jsonl" | "$qhx" detokenize "$data/tokenizers/$tk" --jsonl >"$tmp/dgot.jsonl"
    node -e 'const [w,g]=process.argv.slice(1).map(f=>require("fs").readFileSync(f,"utf8").trim().split("\n").map(JSON.parse));
             let bad=0, fffd=0; w.forEach((x,i)=>{ if (x.text.includes("\ufffd")) fffd++; if (!g[i] || x.text!==g[i].text) { bad++; if (bad <= 5) console.log("MISMATCH", JSON.stringify(x.ids), JSON.stringify(x.text), JSON.stringify(g[i]&&g[i].text)); } });
             console.log(`  '$tk': ${w.length-bad}/${w.length} id sequences decode identically (${fffd} with U+FFFD)`); process.exit(bad||fffd<100?1:0)' "$tmp/dwant.jsonl" "$tmp/dgot.jsonl" \
        && pass=$((pass + 1)) || fail=$((fail + 1))
done
finish oracle
