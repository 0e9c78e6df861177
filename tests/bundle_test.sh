#!/usr/bin/env bash
# Bundles end to end through the CLI: forge, gates, equivalences (2 shards == 1 shard bit for bit,
# token-by-token == sequence), W8 quality against the fp32 reference, context enforcement, and
# every kind of damaged bundle refused with a one-line message before any compute.
source "$(dirname "$0")/lib.sh"

# forge: one shard (default ceiling) and several (a ceiling of ~half the decode weights)
"$qhx" forge models/q35-kjv -o "$tmp/one" >"$tmp/forge1.log" 2>&1 || bad "forge one shard: $(tail -1 "$tmp/forge1.log")"
sed 's/^/  /' "$tmp/forge1.log"
"$qhx" forge models/q35-kjv -o "$tmp/two" --max-context-bytes 3500000 >"$tmp/forge2.log" 2>&1 ||
    bad "forge two shards: $(tail -1 "$tmp/forge2.log")"
check "grep -q '^gates: oracle-gated export 5/5' $tmp/forge1.log" "export gate not 5/5"
check "grep -q '^gates: oracle-gated export 10/10' $tmp/forge2.log" "export gate not 10/10 on two shards"
check "[[ \$(grep -c '^shard ' $tmp/forge2.log) -eq 2 ]]" "3.5 MB ceiling did not give 2 shards"
check "grep -q 'shard 0: layers 0-3' $tmp/forge2.log && grep -q 'shard 1: layers 4-7' $tmp/forge2.log" "shards not balanced 4/4"
for f in manifest.json decode_s0_w8.qhx embed_f16.qhx tokenizer.json tokenizer.qhxtok; do check "[[ -s $tmp/one/$f ]]" "bundle lacks $f"; done
check "[[ ! -e $tmp/one/lm_head_f16.qhx ]]" "a tied fp16 head was stored twice"
check "! ls -d $tmp/*.tmp-* >/dev/null 2>&1" "forge left a temporary directory"
"$qhx" inspect "$tmp/two" >"$tmp/inspect" 2>&1
check "grep -q 'decode shard 1: decode_s1_w8.qhx, layers 4-7' $tmp/inspect && grep -q 'greedy .* passed' $tmp/inspect && grep -q 'KV cache' $tmp/inspect" \
    "inspect: $(cat "$tmp/inspect")"

# bench --json: every field the issue names, each a positive number (speed is bench/'s business;
# this checks the report, on a bundle small enough that the figures mean nothing; GB/s are printed
# to 2 decimals, so the ratio check allows that rounding, which matters on a busy machine)
"$qhx" bench "$tmp/two" --json --prompts 8,16 --decode 20 >"$tmp/bench.json" 2>"$tmp/bench.err"
check "node -e 'const j=JSON.parse(require(\"fs\").readFileSync(process.argv[1],\"utf8\")), pos=v=>typeof v===\"number\"&&v>0;
    process.exit(j.prefill.length===2&&j.prefill[1].tokens===16&&j.prefill.every(p=>pos(p.tok_s))&&j.decode.tokens===20&&pos(j.decode.tok_s)&&
    [\"bandwidth_gb_s\",\"bandwidth_frac\",\"bandwidth_frac_median\",\"bandwidth_peak_gb_s\",\"bandwidth_peak_frac\",\"ttft_ms\",\"peak_rss_mb\",\"weight_gb_s\"].every(k=>pos(j[k]))&&
    Math.abs(j.weight_gb_s/j.bandwidth_gb_s-j.bandwidth_frac)<0.005/j.bandwidth_gb_s+2e-3*j.bandwidth_frac+1e-3 ? 0 : 1)' $tmp/bench.json" "bench --json: $(cat "$tmp/bench.json" "$tmp/bench.err")"
expect_err 2 "--prompts" "$qhx" bench "$tmp/two" --prompts 8,x
# --depth: prefill of 512 and decode after N tokens of context, each a positive rate, and decode
# alternated with depth 0's: their ratio is the two rates' (to the rounding of the three)
"$qhx" bench models/q35-kjv --json --prompts 8 --decode 12 --depth 0,600 >"$tmp/bench4.json" 2>"$tmp/bench4.err"
check "node -e 'const d=JSON.parse(require(\"fs\").readFileSync(process.argv[1],\"utf8\")).depths;
    process.exit(d&&d.length===2&&d[1].depth===600&&d.every(x=>x.prefill_512_tok_s>0&&x.decode_tok_s>0&&x.decode_depth0_tok_s>0&&
        Math.abs(x.decode_tok_s/x.decode_depth0_tok_s-x.decode_vs_depth0)<=0.0006+0.011/x.decode_depth0_tok_s) ? 0 : 1)' $tmp/bench4.json" \
    "bench --depth --json: $(cat "$tmp/bench4.json" "$tmp/bench4.err")"
expect_err 1 "--depth 4000: 512 more tokens exceed the context of 4096" "$qhx" bench "$tmp/two" --depth 4000
# bench/decode_limit.sh: one round over two bundles, a line each and the ratio line
QHX=$qhx bench/decode_limit.sh -n 1 "$tmp/one" "$tmp/two" >"$tmp/limit.out" 2>"$tmp/limit.err"
check "[[ \$(grep -c 'tok/s; interleaved .* >= 0.85 in [01]/1\$' $tmp/limit.out) -eq 2 ]] && grep -q \"median tok/s over $tmp/one's: $tmp/two [0-9.]*x\" $tmp/limit.out" \
    "decode_limit.sh: $(cat "$tmp/limit.out" "$tmp/limit.err")"
expect_err 2 "-n x: not a positive count" bench/decode_limit.sh -n x "$tmp/one"
"$qhx" bench "$tmp/two" --json --prompts 8 --decode 4 --draft ngram --draft-max 3 >"$tmp/bench2.json" 2>"$tmp/bench2.err"
check "node -e 'const j=JSON.parse(require(\"fs\").readFileSync(process.argv[1],\"utf8\")), s=j.speculative, pos=v=>typeof v===\"number\"&&v>0;
    process.exit(s&&s.verify.length===3&&s.verify[2].drafts===3&&s.verify.every(v=>pos(v.verify_ms)&&pos(v.steps_ms)&&v.rewind_ms>=0)&&s.mark_ms>=0 ? 0 : 1)' $tmp/bench2.json" \
    "bench --draft --json: $(cat "$tmp/bench2.json" "$tmp/bench2.err")"

ids=$(seq -s, 1 97 4000 | head -c 400)
for mode in "" --stepwise; do
    "$qhx" logits "$tmp/one" --tokens "$ids" --out "$tmp/l1" $mode && "$qhx" logits "$tmp/two" --tokens "$ids" --out "$tmp/l2" $mode
    check "cmp -s $tmp/l1 $tmp/l2" "2-shard and 1-shard logits differ ($mode)"
done

# on one bundle: prompt processing as a batch (attention in tiles) == token by token,
# both with fp32 activations (scalar kernels: every machine), where they differ by float rounding
# only; then the default batch (int8 activations on AVX2 machines) against that, which moves each
# activation by up to half a step of 1/127 of its 32-column block.
maxdev() {
    paste <(od -An -v -f -w4 "$1") <(od -An -v -f -w4 "$2") |
        awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; a = $1 < 0 ? -$1 : $1; if (a > s) s = a} END {printf "%.2e", m / s}'
}
n_ids=$(tr -cd , <<<"$ids" | wc -c)
"$qhx" logits "$tmp/one" --tokens "$ids" --out "$tmp/seq" --kernels scalar &&
    "$qhx" logits "$tmp/one" --tokens "$ids" --out "$tmp/step" --stepwise --kernels scalar
dev=$(maxdev "$tmp/seq" "$tmp/step")
echo "  bundle: batched prefill vs token by token over $n_ids tokens: max deviation $dev of max |logit| (tolerance 1e-4)"
check "awk 'BEGIN{exit !($dev < 1e-4)}'" "batched vs token-by-token logits deviate by $dev"
"$qhx" logits "$tmp/one" --tokens "$ids" --out "$tmp/fast" && dev=$(maxdev "$tmp/fast" "$tmp/seq")
echo "  bundle: default kernels vs fp32 activations over $n_ids tokens: max deviation $dev of max |logit| (tolerance 3e-2)"
check "awk 'BEGIN{exit !($dev < 3e-2)}'" "default kernels deviate from fp32 activations by $dev"

# the seed's positional CLI gives what qhx generate gives
"$qhx" generate "$tmp/two" "And God said" -n 20 >"$tmp/g1" 2>/dev/null
"$build/qhx_generate" "$tmp/two/manifest.json" cpu - "$tmp/two" 20 "And God said" >"$tmp/g2" 2>/dev/null
check "cmp -s $tmp/g1 $tmp/g2 && [[ \$(wc -c <$tmp/g1) -gt 40 ]]" "qhx_generate differs from qhx generate"
# weights read in (the default) or mapped from the page cache: the same numbers
"$qhx" generate "$tmp/two" "And God said" -n 20 --mmap >"$tmp/g3" 2>/dev/null
check "cmp -s $tmp/g1 $tmp/g3" "--mmap generates something else"
expect_err 2 "SYSLIB" "$build/qhx_generate" "$tmp/two/manifest.json" cpu libQnnSystem.so "$tmp/two" 20 "x"
expect_err 2 "DIR" "$build/qhx_generate" "$tmp/two/manifest.json" cpu - "$tmp" 20 "x"

# W8 vs fp32 on the golden prompts: greedy ids of the bundle against Hugging Face's (fp32)
golden_ids() {
    awk -v c="\"$1\"" -v k="\"$2\"" '
        $0 ~ "\"name\": " c {in_case = 1}
        in_case && $0 ~ k ": \\[" {grab = 1; next}
        grab && /\]/ {exit}
        grab {gsub(/[ ,]/, ""); printf "%s%s", sep, $0; sep = ","}' models/q35-kjv/golden/golden.json
}
# A divergence must be a near-tie of the reference: its margin between the two tokens under 2 %
# of that step's logit range (the forge's greedy-gate rule). Run for the default kernels and for
# fp32 activations (ref): the default must match Hugging Face wherever fp32 activations do.
kern=$("$qhx" inspect "$tmp/one" | sed -n 's/^kernels: \([^,]*\),.*/\1/p')
fp32_twin=ref
declare -A golden_n
# golden_greedy BUNDLE LABEL KERNELS ENFORCE: each golden prompt's greedy tokens against Hugging
# Face's, with the reference margin at a divergence (ENFORCE=1: it must be a near-tie)
golden_greedy() {
    local b=$1 label=$2 k=$3 enforce=$4 total=0 same=0 c prompt n msg ctx V row verdict i
    for c in $(grep -o '"name": "[^"]*"' models/q35-kjv/golden/golden.json | cut -d'"' -f4); do
        prompt=$(golden_ids "$c" ids)
        read -ra W <<<"$(golden_ids "$c" greedy_ids | tr , ' ')"
        read -ra G <<<"$("$qhx" generate "$b" --tokens "$prompt" -n 64 --ignore-eos --ids --kernels "$k")"
        n=0; while ((n < ${#W[@]})) && [[ ${W[n]} == "${G[n]:-}" ]]; do n=$((n + 1)); done
        total=$((total + ${#W[@]})); same=$((same + n)); golden_n[$label.$k.$c]=$n
        msg="  $label greedy ($k), golden case $c: $n/${#W[@]} tokens match Hugging Face fp32"
        if ((n < ${#W[@]})); then
            ctx="$prompt"; for ((i = 0; i < n; i++)); do ctx="$ctx,${W[i]}"; done
            "$qhx" logits models/q35-kjv --tokens "$ctx" --out "$tmp/lg" --kernels ref
            V=$(grep -o '"vocab_size": [0-9]*' models/q35-kjv/config.json | grep -o '[0-9]*$')
            row=$(od -An -v -f -w$((4 * V)) "$tmp/lg" | tail -n 1)
            verdict=$(awk -v a=$((W[n] + 1)) -v b=$((G[n] + 1)) '{lo = $1; hi = $1; for (i = 2; i <= NF; i++) { if ($i < lo) lo = $i; if ($i > hi) hi = $i }
                m = $a - $b; printf "diverges at %d: reference margin %.4f of logit range %.2f -> %s", '"$n"', m, hi - lo, (m < 0.02 * (hi - lo)) ? "near-tie" : "NOT a near-tie"}' <<<"$row")
            msg="$msg; $verdict"
            [[ $enforce == 1 ]] && check "[[ '$verdict' == *'-> near-tie' ]]" "golden case $c: $verdict"
        fi
        echo "$msg"
    done
    echo "  $label greedy ($k) over the golden prompts: $same/$total tokens before any divergence"
}
golden_greedy "$tmp/one" W8 "$kern" 1
if [[ $kern != "$fp32_twin" ]]; then golden_greedy "$tmp/one" W8 "$fp32_twin" 1; fi
for c in $(grep -o '"name": "[^"]*"' models/q35-kjv/golden/golden.json | cut -d'"' -f4); do
    check "[[ ${golden_n[W8.$kern.$c]} -eq ${golden_n[W8.$fp32_twin.$c]:-${golden_n[W8.$kern.$c]}} ]]" \
        "golden case $c: $kern matches Hugging Face for ${golden_n[W8.$kern.$c]} tokens, fp32 activations for ${golden_n[W8.$fp32_twin.$c]:-?}"
done

# Greedy parity of the default activations: every set this CPU runs (int16 activations for W8)
# generates exactly the 64 tokens fp32 activations (ref) generate on the same W8 bundle, on each
# held-out prompt; auto is the first of them.
if [[ -n ${QHX_KERNELS:-} ]]; then # an explicit choice replaces auto's: held to the choice instead
    check "[[ $kern == \"$QHX_KERNELS\" ]]" "QHX_KERNELS=$QHX_KERNELS, auto chose $kern"
else
    check "[[ $kern =~ ^(avx512|avx2|neon-i8mm|neon|scalar)$ ]]" "auto chose $kern"
fi
mapfile -t held < <(grep -v '^#' tests/data/parity/prompts.txt)
declare -A fp32_ids
for p in "${held[@]}"; do fp32_ids[$p]=$("$qhx" generate "$tmp/one" "$p" -n 64 --ignore-eos --ids --kernels ref); done
for q in avx512 avx2 neon-i8mm neon scalar; do
    "$qhx" generate "$tmp/one" --tokens 1 -n 1 --kernels "$q" >/dev/null 2>&1 || { echo "  parity: $q not run on this CPU"; continue; }
    same=0 differ=()
    for p in "${held[@]}"; do
        a=$("$qhx" generate "$tmp/one" "$p" -n 64 --ignore-eos --ids --kernels "$q")
        [[ -n $a && $a == "${fp32_ids[$p]}" ]] && same=$((same + 1)) || differ+=("$p")
    done
    check "[[ $same -eq ${#held[@]} ]]" "$q differs from ref on: ${differ[*]}"
    echo "  parity: $q generates what ref (fp32 activations) does on $same/${#held[@]} held-out prompts x 64 tokens"
done

# perplexity: W8 on the default kernels within 0.15 % of fp32 (the first 20 KB of the dev text,
# windows of 256, where it measures +0.07 %; the whole text: +0.086 %); 1 % on 4 KB, still over
# 1,000 tokens, under memcheck, where 20 KB takes hours
head -c $((slow > 1 ? 4000 : 20000)) tests/data/corpora/kjv-dev.txt >"$tmp/dev.txt"
p32=$("$qhx" perplexity models/q35-kjv "$tmp/dev.txt" --ctx 256 --json)
p8=$("$qhx" perplexity "$tmp/one" "$tmp/dev.txt" --ctx 256 --json)
echo "  perplexity fp32 $p32, W8 $p8"
x32=$(sed -E 's/.*"perplexity": ([0-9.]+).*/\1/' <<<"$p32"); x8=$(sed -E 's/.*"perplexity": ([0-9.]+).*/\1/' <<<"$p8")
tol=$([[ $slow -gt 1 ]] && echo 0.01 || echo 0.0015)
check "awk 'BEGIN{exit !($x8 / $x32 < 1 + $tol && $x8 / $x32 > 1 - $tol)}'" "W8 perplexity $x8 vs fp32 $x32 (tolerance $tol)"
check "[[ \$(sed -E 's/.*\"tokens\": ([0-9]+).*/\1/' <<<'$p8') -gt 1000 ]]" "perplexity scored too few tokens: $p8"

# W4: forged with its gates, shown as W4, perplexity within 1 % of fp32 (the issue's bound; +0.0X %
# measured), every set's W4 kernel the twin's, a W8 build's refusal simulated by a layout it lacks
"$qhx" forge models/q35-kjv -o "$tmp/w4" --weights w4 >"$tmp/w4.log" 2>&1 || bad "forge --weights w4: $(tail -2 "$tmp/w4.log")"
check "grep -q 'gates: oracle-gated export 5/5' '$tmp/w4.log'" "W4 gates: $(grep gates: "$tmp/w4.log")"
check "ls '$tmp/w4/decode_s0_w4.qhx' >/dev/null" "W4 shard file name"
check "\"$qhx\" inspect '$tmp/w4' | grep -q 'weights: W4: 4-bit'" "inspect does not show W4"
check "[[ \$(du -b '$tmp/w4/decode_s0_w4.qhx' | cut -f1) -lt \$(( \$(du -b '$tmp/one/decode_s0_w8.qhx' | cut -f1) * 6 / 10 )) ]]" "W4 shard not under 0.6x W8's"
p4=$("$qhx" perplexity "$tmp/w4" "$tmp/dev.txt" --ctx 256 --json)
x4=$(sed -E 's/.*"perplexity": ([0-9.]+).*/\1/' <<<"$p4")
echo "  perplexity W4 $p4 ($(awk "BEGIN{printf \"%+.3f %%\", ($x4 / $x32 - 1) * 100}") against fp32)"
check "awk 'BEGIN{exit !($x4 / $x32 < 1.01 && $x4 / $x32 > 0.99)}'" "W4 perplexity $x4 vs fp32 $x32 (tolerance 1 %)"
w4ref=$("$qhx" generate "$tmp/w4" "In the beginning" -n 24 --ignore-eos --ids --kernels scalar)
for k in avx512 avx2 neon-i8mm neon; do
    out=$("$qhx" generate "$tmp/w4" "In the beginning" -n 24 --ignore-eos --ids --kernels "$k" 2>/dev/null) || continue
    check "[[ '$out' == '$w4ref' ]]" "W4 greedy on $k differs from scalar"
done
golden_greedy "$tmp/w4" W4 "$kern" 0 # reported: 4-bit weights move near-ties further than W8
# the lm-head in W4 too: its own file, perplexity still within 1 % of fp32
"$qhx" forge models/q35-kjv -o "$tmp/w4h" --weights w4 --lmhead w4 >"$tmp/w4h.log" 2>&1 || bad "forge --lmhead w4: $(tail -2 "$tmp/w4h.log")"
check "[[ -s '$tmp/w4h/lm_head_w4.qhx' ]] && grep -q '\"dtype\": \"q4\"' '$tmp/w4h/manifest.json'" "no W4 lm-head file"
x4h=$("$qhx" perplexity "$tmp/w4h" "$tmp/dev.txt" --ctx 256 --json | sed -E 's/.*"perplexity": ([0-9.]+).*/\1/')
echo "  perplexity W4 with a W4 lm-head $x4h ($(awk "BEGIN{printf \"%+.3f %%\", ($x4h / $x32 - 1) * 100}") against fp32)"
check "awk 'BEGIN{exit !($x4h / $x32 < 1.01 && $x4h / $x32 > 0.99)}'" "W4 + W4 head perplexity $x4h vs fp32 $x32 (tolerance 1 %)"
expect_err 1 "'w3' is not w8 or w4" "$qhx" forge models/q35-kjv -o "$tmp/x" --weights w3
rm -rf "$tmp/d"; cp -r "$tmp/w4" "$tmp/d"; sed -i 's/"weight_layout": "w4-r4b32"/"weight_layout": "w4-r8b64"/' "$tmp/d/manifest.json"
expect_err 1 "weight layout 'w4-r8b64'" "$qhx" generate "$tmp/d" --tokens 1 -n 1
rm -rf "$tmp/d"; cp -r "$tmp/w4" "$tmp/d"; cp "$tmp/one/decode_s0_w8.qhx" "$tmp/d/decode_s0_w4.qhx" # a W8 shard under a W4 name
expect_err 1 "layout 'w8-r4b32'" "$qhx" generate "$tmp/d" --tokens 1 -n 1

# context: a forge with --context-len 40 refuses what does not fit, before any work
"$qhx" forge models/q35-kjv -o "$tmp/short" --context-len 40 --no-gate >/dev/null 2>&1 || bad "forge --context-len"
expect_err 1 "exceed the context left (40 of 40)" "$qhx" generate "$tmp/short" --tokens 1,2,3,4,5,6,7,8,9,10 -n 31
"$qhx" generate "$tmp/short" --tokens 1,2,3,4,5,6,7,8,9,10 -n 30 --ids >/dev/null 2>&1 && ok || bad "10 + 30 tokens in a context of 40"

# forge errors
expect_err 1 "already exists" "$qhx" forge models/q35-kjv -o "$tmp/one"
expect_err 1 "alone needs" "$qhx" forge models/q35-kjv -o "$tmp/x" --max-context-bytes 100000
expect_err 1 "context-len" "$qhx" forge models/q35-kjv -o "$tmp/x" --context-len 999999999
expect_err 1 "lmhead" "$qhx" forge models/q35-kjv -o "$tmp/x" --lmhead f8
expect_err 2 "unknown option" "$qhx" forge models/q35-kjv -o "$tmp/x" --bogus
expect_err 1 "is a bundle already" "$qhx" forge "$tmp/one" -o "$tmp/x"
# --force that fails keeps the old bundle whole
before=$(md5sum "$tmp/one"/* | md5sum)
"$qhx" forge models/q35-kjv -o "$tmp/one" --force --max-context-bytes 100000 >/dev/null 2>&1 && bad "forge with a too-small ceiling succeeded"
check "[[ '$before' == \"\$(md5sum $tmp/one/* | md5sum)\" ]]" "a failed --force forge changed the old bundle"
check "! ls -d $tmp/*.tmp-* $tmp/*.old-* >/dev/null 2>&1" "failed forge left temporary directories"

# damaged bundles: each refused with a message naming the problem
"$qhx" forge models/q35-rand-tiny -o "$tmp/other" --no-gate >/dev/null 2>&1 || bad "forge q35-rand-tiny"
"$qhx" forge models/q35-kjv -o "$tmp/again" --no-gate >/dev/null 2>&1 || bad "forge q35-kjv again"
damaged() { rm -rf "$tmp/d"; cp -r "$tmp/one" "$tmp/d"; }
edit_manifest() { damaged; sed -i "$1" "$tmp/d/manifest.json"; }
edit_manifest 's/"schema_version": 1/"schema_version": 99/'
expect_err 1 "schema version 99" "$qhx" generate "$tmp/d" --tokens 1 -n 1
edit_manifest '/"host_op"/d'
expect_err 1 "field 'plan.host_op' is missing" "$qhx" generate "$tmp/d" --tokens 1 -n 1
edit_manifest 's/"context_length": [0-9]*/"context_length": "long"/'
expect_err 1 "context_length" "$qhx" generate "$tmp/d" --tokens 1 -n 1
edit_manifest 's/"weight_layout": "w8-r4b32"/"weight_layout": "w8-rows-f32scale"/' # the layout before row groups
expect_err 1 "w8-rows-f32scale" "$qhx" generate "$tmp/d" --tokens 1 -n 1
edit_manifest 's/"target": "cpu-[a-z0-9_]*"/"target": "npu-hexagon-v81"/' # another device's bundle
expect_err 1 "forge the checkpoint again" "$qhx" generate "$tmp/d" --tokens 1 -n 1
edit_manifest 's/"hidden_size": 256/"hidden_size": 512/'
expect_err 1 "model_hash" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; echo '{"format": "qhexrt-bundle", ' >"$tmp/d/manifest.json"
expect_err 1 "not a JSON object" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; rm "$tmp/d/embed_f16.qhx"
expect_err 1 "embed_f16.qhx" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; cp "$tmp/other/decode_s0_w8.qhx" "$tmp/d/"
expect_err 1 "belongs to another model" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; cp "$tmp/again/decode_s0_w8.qhx" "$tmp/d/"
expect_err 1 "belongs to another bundle" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; printf 'gpu-hexagon-v81\0' | dd of="$tmp/d/decode_s0_w8.qhx" bs=1 seek=16 conv=notrunc 2>/dev/null
expect_err 1 "gpu-hexagon-v81" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; truncate -s 1000000 "$tmp/d/decode_s0_w8.qhx"
expect_err 1 "truncated" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; truncate -s 50 "$tmp/d/decode_s0_w8.qhx"
expect_err 1 "not a qhexrt bundle file" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; printf '\x55' | dd of="$tmp/d/decode_s0_w8.qhx" bs=1 seek=400000 conv=notrunc 2>/dev/null
expect_err 1 "checksum mismatch" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; printf '\x02' | dd of="$tmp/d/embed_f16.qhx" bs=1 seek=8 conv=notrunc 2>/dev/null
expect_err 1 "format version 2" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; printf 'x' >>"$tmp/d/tokenizer.qhxtok"
expect_err 1 "tokenizer.qhxtok" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; cp "$tmp/d/embed_f16.qhx" "$tmp/d/decode_s0_w8.qhx"
expect_err 1 "is a embedding file" "$qhx" generate "$tmp/d" --tokens 1 -n 1

# the MTP head: forged into a file of its own, the same drafts-verified ids as plain decoding, and
# every way that file can be missing or wrong refused by name
"$qhx" forge models/q35-kjv-mtp -o "$tmp/mtp" >"$tmp/forgem.log" 2>&1 || bad "forge with MTP: $(tail -1 "$tmp/forgem.log")"
check "grep -q '^MTP head: ' $tmp/forgem.log && grep -q '^export gate: MTP head 5/5' $tmp/forgem.log && [[ -s $tmp/mtp/mtp_w8.qhx ]] && grep -q '\"mtp_num_hidden_layers\": 1' $tmp/mtp/manifest.json" \
    "forge wrote no MTP head: $(cat "$tmp/forgem.log")"
check "\"$qhx\" inspect $tmp/mtp | grep -q 'MTP head file: mtp_w8.qhx' && \"$qhx\" inspect $tmp/one | grep -q 'MTP head: none'" "inspect: MTP head"
plain=$("$qhx" generate "$tmp/mtp" "And God said" -n 48 2>/dev/null)
spec=$("$qhx" generate "$tmp/mtp" "And God said" -n 48 --draft mtp 2>"$tmp/err")
[[ -n $plain && $plain == "$spec" ]] && grep -q 'drafted [1-9]' "$tmp/err" && ok || bad "bundle --draft mtp: '$spec' vs '$plain' $(cat "$tmp/err")"
expect_err 1 "has no MTP head" "$qhx" generate "$tmp/one" "And God said" -n 4 --draft mtp
"$qhx" bench "$tmp/mtp" --json --prompts 8 --decode 4 --draft mtp --draft-max 2 >"$tmp/bench3.json" 2>"$tmp/bench3.err"
check "node -e 'const s=JSON.parse(require(\"fs\").readFileSync(process.argv[1],\"utf8\")).speculative;
    process.exit(s&&s.mtp_draft.length===2&&s.mtp_draft[1].drafts===2&&s.mtp_draft.every(d=>d.ms>0)&&s.verify.length===2 ? 0 : 1)' $tmp/bench3.json" \
    "bench --draft mtp --json: $(cat "$tmp/bench3.json" "$tmp/bench3.err")"
damagedm() { rm -rf "$tmp/d"; cp -r "$tmp/mtp" "$tmp/d"; }
damagedm; rm "$tmp/d/mtp_w8.qhx"
expect_err 1 "mtp_w8.qhx" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damagedm; sed -i '/"mtp": {/,/}/d' "$tmp/d/manifest.json"
expect_err 1 "plan.mtp.file" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damagedm; cp "$tmp/d/decode_s0_w8.qhx" "$tmp/d/mtp_w8.qhx"
expect_err 1 "mtp_w8.qhx" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damagedm; printf '\x55' | dd of="$tmp/d/mtp_w8.qhx" bs=1 seek=300000 conv=notrunc 2>/dev/null
expect_err 1 "checksum mismatch" "$qhx" generate "$tmp/d" --tokens 1 -n 1

# resource limits: absurd sizes are refused by name, with bounded memory
edit_manifest 's/"context_length": [0-9]*/"context_length": 1099511627776/'
expect_err 1 "context_length 1.09951e+12 is not in" "$qhx" generate "$tmp/d" --tokens 1 -n 1
damaged; head -c 1000000 /dev/zero | tr '\0' '[' >"$tmp/d/manifest.json"   # JSON nested a million deep
expect_err 1 "not a JSON object" "$qhx" generate "$tmp/d" --tokens 1 -n 1
mkdir -p "$tmp/deep" && cp models/q35-kjv/model.safetensors "$tmp/deep/" && head -c 1000000 /dev/zero | tr '\0' '{' >"$tmp/deep/config.json"
expect_err 1 "config.json: not a JSON object" "$qhx" generate "$tmp/deep" --tokens 1 -n 1
expect_err 2 "--context-len: '1099511627776' is not an integer in" "$qhx" forge models/q35-kjv -o "$tmp/x" --context-len 1099511627776
"$qhx" generate "$tmp/one" --tokens 1 -n 1073741824 >/dev/null 2>"$tmp/err"; rc=$?
check "[[ $rc -eq 1 ]] && grep -q 'exceed the context left (4096 of 4096)' $tmp/err" "a 2^30-token generation was not refused up front (exit $rc)"

# a padded vocabulary forged: the seed's positional form and qhx generate run through the ids the
# tokenizer has no text for, as tokens without text (the fp32 reference kernels: on random weights
# every kernel set takes its own path, and ref's is the same on every machine)
padded_checkpoint "$tmp/padck" || bad "padded checkpoint"
"$qhx" forge "$tmp/padck" -o "$tmp/pad" --no-gate >"$tmp/padforge.log" 2>&1 || bad "forge padded: $(tail -1 "$tmp/padforge.log")"
got=$("$qhx" generate "$tmp/pad" --tokens 1,2,3 -n 64 --ignore-eos --ids --kernels ref 2>"$tmp/err")
check "[[ \$(wc -w <<<'$got') -eq 64 ]] && tr ' ' '\\n' <<<'$got' | awk '\$1 >= 4129' | grep -q ." "padded bundle --ids: '$got' $(cat "$tmp/err")"
got=$("$qhx" generate "$tmp/pad" "God said" -n 64 --ids --kernels ref 2>/dev/null)
check "[[ \$(wc -w <<<'$got') -eq 64 ]] && tr ' ' '\\n' <<<'$got' | awk '\$1 >= 4129' | grep -q ." "'God said' no longer reaches a padded id: '$got'"
"$build/qhx_generate" "$tmp/pad/manifest.json" ref - "$tmp/pad" 64 "God said" >"$tmp/padg" 2>"$tmp/err"
check "grep -q 'generated 64 (length)' $tmp/err && [[ \"\$(cat $tmp/padg)\" == \"God said\$(tr ' ' '\\n' <<<'$got' | awk '\$1 < 4129' | paste -sd' ' | $qhx detokenize $tmp/pad)\" ]]" \
    "qhx_generate on a padded vocabulary: $(cat "$tmp/err")"
"$build/qhx_generate" "$tmp/pad/manifest.json" cpu - "$tmp/pad" 64 "God said" >/dev/null 2>"$tmp/err"
check "grep -q 'generated [0-9]* (' $tmp/err" "qhx_generate cpu on a padded vocabulary: $(cat "$tmp/err")"

# a forge killed (SIGKILL) at random moments leaves the old complete bundle, never a broken one;
# its temporary directory never loads, and the next forge clears it away
"$qhx" forge models/q35-kjv -o "$tmp/k" >/dev/null 2>&1
"$qhx" generate "$tmp/k" "And God said" -n 16 >"$tmp/k0" 2>/dev/null
survived=0
for delay in 0.02 0.08 0.15 0.25 0.35 0.45 0.6 0.8; do
    "$qhx" forge models/q35-kjv -o "$tmp/k" --force >/dev/null 2>&1 &
    pid=$!
    sleep "$delay"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    "$qhx" generate "$tmp/k" "And God said" -n 16 >"$tmp/k1" 2>"$tmp/kerr" && cmp -s "$tmp/k0" "$tmp/k1" && survived=$((survived + 1)) \
        || bad "after SIGKILL at ${delay}s the bundle does not work: $(cat "$tmp/kerr")"
    for d in "$tmp"/k.tmp-* "$tmp"/k.old-*; do
        [[ -d $d ]] || continue
        "$qhx" generate "$d" --tokens 1 -n 1 >/dev/null 2>&1 && ! cmp -s <("$qhx" generate "$d" "And God said" -n 16 2>/dev/null) "$tmp/k0" \
            && bad "a half-written $d loads and differs"
    done
done
[[ $survived -eq 8 ]] && ok
"$qhx" forge models/q35-kjv -o "$tmp/k" --force >/dev/null 2>&1
left=$(ls -d "$tmp"/k.tmp-* "$tmp"/k.old-* 2>/dev/null | wc -l)
[[ $left -eq 0 ]] && ok || bad "$left stale temporary directories after the next forge"
echo "  SIGKILL during forge: the bundle worked after 8/8 kills; stale directories left after the next forge: $left"

finish bundle
