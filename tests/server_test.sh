#!/usr/bin/env bash
# qhx serve against the official OpenAI client (tests/oracle/openai_client.js) and curl: shapes,
# streaming, seeds, concurrency, stop strings, and every kind of bad request (4xx in OpenAI's error
# shape, the server still serving afterwards); a client that disconnects mid-stream frees its slot.
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
if [[ ! -d tests/oracle/node_modules/openai ]] || ! command -v curl >/dev/null; then
    echo "server: node_modules/openai or curl missing (make check installs them: scripts/deps.sh)"
    echo "server: 0 passed, 1 failed"; exit 1
fi

# start_server LOG ARGS... -> sets port; the server prints its address once it listens ($model, or
# the bundled q35-kjv)
start_server() {
    local log=$1; shift
    "$qhx" serve "${model:-models/q35-kjv}" --port 0 "$@" 2>"$log" &
    pids+=($!)
    server_pid=$!
    for _ in $(seq $((100 * slow))); do
        port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$')
        [[ -n $port ]] && return 0
        sleep 0.1
    done
    echo "server did not start: $(cat "$log")"; return 1
}

start_server "$tmp/log" --parallel 4 || { echo "server: 0 passed, 1 failed"; exit 1; }
url="http://127.0.0.1:$port"

"$qhx" generate models/q35-kjv "And God said" -n 24 --json >"$tmp/greedy.json" 2>/dev/null
out=$(node tests/oracle/openai_client.js "$url" "$tmp/greedy.json")
echo "$out" | grep -v '^ok '
p=$(sed -nE 's/^openai: ([0-9]+) passed, ([0-9]+) failed$/\1/p' <<<"$out"); f=$(sed -nE 's/^openai: ([0-9]+) passed, ([0-9]+) failed$/\2/p' <<<"$out")
pass=$((pass + ${p:-0})); fail=$((fail + ${f:-1}))

# curl_status WANT_CODE NEEDLE ARGS... : the HTTP status, an OpenAI error body naming NEEDLE
curl_status() {
    local want=$1 needle=$2; shift 2
    local code
    code=$(curl -s -o "$tmp/body" -w '%{http_code}' "$@")
    if [[ $code != "$want" ]]; then bad "curl $* -> $code, want $want: $(head -c 300 "$tmp/body")"; return; fi
    if [[ $want -ge 400 ]] && ! node -e 'const e=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8")).error;
            if (typeof e.message!=="string"||typeof e.type!=="string"||!e.message.includes(process.argv[2])) process.exit(1)' "$tmp/body" "$needle"; then
        bad "curl $* -> body is not an OpenAI error naming '$needle': $(head -c 300 "$tmp/body")"; return
    fi
    ok
}
post() { echo "$url/v1/$1"; }
curl_status 200 "" "$url/health"
curl_status 404 "no route" "$url/v1/nothing"
curl_status 405 "use POST" "$url/v1/chat/completions"
curl_status 405 "use GET" -X POST "$url/v1/models"
curl_status 400 "not valid JSON" "$(post completions)" -d '{"prompt": "x",'
curl_status 400 "JSON object" "$(post completions)" -d '[1,2]'
curl_status 400 "'prompt'" "$(post completions)" -d '{}'
curl_status 400 "'max_tokens'" "$(post completions)" -d '{"prompt":"x","max_tokens":"many"}'
curl_status 400 "'max_tokens'" "$(post completions)" -d '{"prompt":"x","max_tokens":0}'
curl_status 400 "'top_p'" "$(post completions)" -d '{"prompt":"x","top_p":7}'
curl_status 400 "'seed'" "$(post completions)" -d '{"prompt":"x","seed":1.5}'
curl_status 400 "'stop'" "$(post completions)" -d '{"prompt":"x","stop":[1]}'
curl_status 400 "'stop'" "$(post completions)" -d '{"prompt":"x","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}'
curl_status 400 "'stream'" "$(post completions)" -d '{"prompt":"x","stream":"yes"}'
curl_status 400 "'n'" "$(post completions)" -d '{"prompt":"x","n":3}'
curl_status 400 "token id" "$(post completions)" -d '{"prompt":[1,2,99999999]}'
# what the server does not implement is refused by name, never answered as if it were done
curl_status 400 "'frobnicate' is not a field" "$(post completions)" -d '{"prompt":"x","frobnicate":1}'
curl_status 400 "'top_logprobs' needs" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"top_logprobs":2}'
curl_status 400 "'top_logprobs'" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}'
curl_status 400 "'logprobs'" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"logprobs":2}'
curl_status 400 "'logit_bias'" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"logit_bias":{"99999999":10}}'
curl_status 400 "'logit_bias'" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"logit_bias":{"5":101}}'
curl_status 400 "'logprobs'" "$(post completions)" -d '{"prompt":"x","logprobs":21}'
# real clients' tool-bearing requests (AI SDK chat and responses providers, LangChain bindTools)
out=$(cd tests/oracle && node client_tools.js "$url" 2>&1)
line=$(grep -E '^tool-clients: [0-9]+ passed, [0-9]+ failed$' <<<"$out")
[[ -n $line && $line == *" 0 failed" ]] && ok || bad "client_tools.js: $(grep -m3 FAIL <<<"$out")"
# structured output and forced tool calls through the openai client, the AI SDK and LangChain,
# validated by ajv and zod (tests/oracle/structured.js)
out=$(cd tests/oracle && node structured.js "$url" 2>&1)
line=$(grep -E '^structured: [0-9]+ passed' <<<"$out")
[[ -n $line && $line == *" 0 failed" ]] && ok || bad "structured.js: $(grep -m3 FAIL <<<"$out")"
# what coding agents send to /v1/responses (the Codex CLI's request shape), held to the chat
# completions it amounts to; a second server on q35-rand-tiny, whose reasoning never closes
kjv_pid=$server_pid kjv_port=$port
model=models/q35-rand-tiny start_server "$tmp/logt" --parallel 1 || bad "server on q35-rand-tiny"
out=$(cd tests/oracle && node agent_responses.js "$url" "http://127.0.0.1:$port" 2>&1)
line=$(grep -E '^agent-responses: [0-9]+ passed' <<<"$out")
[[ -n $line && $line == *" 0 failed" ]] && ok || bad "agent_responses.js: $(grep -m3 FAIL <<<"$out")"
# ... and Anthropic's Messages API as Claude Code sends it, through the Anthropic SDK
out=$(cd tests/oracle && node agent_messages.js "$url" "http://127.0.0.1:$port" 2>&1)
line=$(grep -E '^agent-messages: [0-9]+ passed' <<<"$out")
[[ -n $line && $line == *" 0 failed" ]] && ok || bad "agent_messages.js: $(grep -m3 FAIL <<<"$out")"
kill -INT "$server_pid"; wait "$server_pid"; server_pid=$kjv_pid port=$kjv_port
# thinking_budget: with </think> banned the model reasons to max_tokens; with a budget of 5 its
# reasoning is the first 5 tokens of that, then the block closes and an answer follows
curl_status 400 "'thinking_budget'" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"thinking_budget":-1}'
think=$(printf '</think>' | "$qhx" tokenize models/q35-kjv --special | tr -d ' \n')
tq="\"messages\":[{\"role\":\"user\",\"content\":\"Who is the LORD?\"}],\"max_tokens\":30,\"temperature\":0,\"logit_bias\":{\"$think\":-100}"
curl -s "$(post chat/completions)" -d "{$tq}" >"$tmp/nobudget"
curl -s "$(post chat/completions)" -d "{$tq,\"thinking_budget\":5}" >"$tmp/budget"
node -e 'const fs=require("fs"), a=JSON.parse(fs.readFileSync(process.argv[1])).choices[0].message, b=JSON.parse(fs.readFileSync(process.argv[2])).choices[0].message;
  process.exit(a.content==="" && b.reasoning_content.length>0 && a.reasoning_content.startsWith(b.reasoning_content) && b.reasoning_content.length<a.reasoning_content.length && b.content.length>0 ? 0 : 1)' \
  "$tmp/nobudget" "$tmp/budget" && ok || bad "thinking_budget: $(head -c 300 "$tmp/budget")"
# logprobs: each token's is its greedy top alternative's, sorted, the tokens spell the answer, a
# stream carries the same entries; logit_bias +100 on a token makes every token that one
lq='"messages":[{"role":"user","content":"Who is the LORD?"}],"max_tokens":12,"temperature":0,"logprobs":true,"top_logprobs":3,"chat_template_kwargs":{"enable_thinking":false}'
curl -s "$(post chat/completions)" -d "{$lq}" >"$tmp/lp"
curl -s -N "$(post chat/completions)" -d "{$lq,\"stream\":true}" >"$tmp/lp.sse"
curl -s "$(post completions)" -d '{"prompt":"And God said","max_tokens":4,"temperature":0,"logprobs":1,"logit_bias":{"77":100}}' >"$tmp/bias"
node -e 'const fs=require("fs"), a=JSON.parse(fs.readFileSync(process.argv[1])), c=a.choices[0], e=c.logprobs.content;
  let s=[]; for (const l of fs.readFileSync(process.argv[2],"utf8").split("\n")) if (l.startsWith("data: {")) { const d=JSON.parse(l.slice(6)).choices[0]; if (d&&d.logprobs) s.push(...d.logprobs.content); }
  const b=JSON.parse(fs.readFileSync(process.argv[3])).choices[0];
  const ok = e.length===12 && e.every(x=>x.logprob<=0 && x.top_logprobs.length===3 && x.top_logprobs[0].token===x.token && x.top_logprobs[0].logprob===x.logprob
      && x.top_logprobs[1].logprob<=x.top_logprobs[0].logprob && x.top_logprobs[2].logprob<=x.top_logprobs[1].logprob)
    && e.map(x=>x.token).join("")===c.message.content && JSON.stringify(s)===JSON.stringify(e)
    && b.text===b.logprobs.tokens.join("") && b.logprobs.tokens.length===4 && b.logprobs.tokens.every(t=>t===b.logprobs.tokens[0]);
  process.exit(ok?0:1)' "$tmp/lp" "$tmp/lp.sse" "$tmp/bias" && ok || bad "logprobs / logit_bias: $(head -c 400 "$tmp/lp") / $(head -c 200 "$tmp/bias")"
# ignore_eos (what `vllm bench serve` sends): the reply runs past its end of turn to max_tokens,
# the same tokens up to there
eq='"messages":[{"role":"user","content":"hi"}],"max_tokens":120,"temperature":0,"chat_template_kwargs":{"enable_thinking":false}'
curl -s "$(post chat/completions)" -d "{$eq}" >"$tmp/eos"
curl -s "$(post chat/completions)" -d "{$eq,\"ignore_eos\":true}" >"$tmp/noeos"
node -e 'const fs=require("fs"), J=f=>JSON.parse(fs.readFileSync(f)), a=J(process.argv[1]), b=J(process.argv[2]);
  const ok=a.choices[0].finish_reason==="stop" && a.usage.completion_tokens<120 && b.choices[0].finish_reason==="length"
    && b.usage.completion_tokens===120 && b.choices[0].message.content.startsWith(a.choices[0].message.content+"<|im_end|>");
  process.exit(ok?0:1)' "$tmp/eos" "$tmp/noeos" && ok || bad "ignore_eos: $(head -c 300 "$tmp/noeos")"
curl_status 400 "'ignore_eos' must be a boolean" "$(post completions)" -d '{"prompt":"x","ignore_eos":1}'
curl_status 400 "'continue_final_message' needs a final assistant" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"continue_final_message":true}'
curl_status 400 "'echo'" "$(post completions)" -d '{"prompt":"x","echo":true}'
curl_status 400 "'suffix'" "$(post completions)" -d '{"prompt":"x","suffix":"end"}'
curl_status 400 "'best_of'" "$(post completions)" -d '{"prompt":"x","best_of":3}'
curl_status 400 "'response_format'" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema"}}'
curl_status 400 "keyword 'not'" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"not":{"type":"string"}}}}}'
curl_status 400 "'uniqueItems'" "$(post responses)" -d '{"input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"array","uniqueItems":true}}}}'
curl_status 400 "'response_format'" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"yaml"}}'
curl_status 400 "'tool_choice'" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"tool_choice":"required"}'
# llama-server's own constraint fields, "grammar" (GBNF) and "json_schema", on both endpoints: a
# greedy answer is the CLI's cold solo one under the same constraint, though it ran beside others
printf 'root ::= ("yea" | "nay") " " [a-z ]+\n' >"$tmp/g.gbnf"
printf '{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}' >"$tmp/s.json"
"$qhx" generate models/q35-kjv "And God said" -n 12 --grammar "$tmp/g.gbnf" --json >"$tmp/g.cli" 2>/dev/null
"$qhx" generate models/q35-kjv "And God said" -n 40 --json-schema "$tmp/s.json" --json >"$tmp/s.cli" 2>/dev/null
gq=$(node -e 'process.stdout.write(JSON.stringify({prompt:"And God said",max_tokens:12,temperature:0,grammar:require("fs").readFileSync(process.argv[1],"utf8")}))' "$tmp/g.gbnf")
cq='"messages":[{"role":"user","content":"Who?"}],"max_tokens":60,"temperature":0,"grammar":"root ::= \"LORD\" | \"Moses\""'
curl -s "$(post completions)" -d "$gq" >"$tmp/g.srv" & c1=$!
curl -s "$(post completions)" -d "{\"prompt\":\"And God said\",\"max_tokens\":40,\"temperature\":0,\"json_schema\":$(cat "$tmp/s.json")}" >"$tmp/s.srv" & c2=$!
curl -s "$(post completions)" -d '{"prompt":"In the beginning","max_tokens":30}' >/dev/null & c3=$!
curl -s "$(post chat/completions)" -d "{$cq}" >"$tmp/c.srv" & c4=$!
wait $c1 $c2 $c3 $c4
curl -s -N "$(post chat/completions)" -d "{$cq,\"stream\":true}" >"$tmp/c.sse"
node -e 'const fs=require("fs"), J=f=>JSON.parse(fs.readFileSync(f)), [g,gc,s,sc,c]=process.argv.slice(1,6).map(J);
  let text=""; for (const l of fs.readFileSync(process.argv[6],"utf8").split("\n")) if (l.startsWith("data: {")) { const d=JSON.parse(l.slice(6)).choices[0]; if (d) text+=d.delta.content||""; }
  const m=c.choices[0].message;
  const ok=g.choices[0].text===gc.text && /^(yea|nay) [a-z ]+$/.test(gc.text) && s.choices[0].text===sc.text && sc.text.trimStart().startsWith("{")
    && ["LORD","Moses"].includes(m.content) && c.choices[0].finish_reason==="stop" && text===m.content;
  process.exit(ok?0:1)' "$tmp/g.srv" "$tmp/g.cli" "$tmp/s.srv" "$tmp/s.cli" "$tmp/c.srv" "$tmp/c.sse" \
  && ok || bad "grammar / json_schema fields: $(head -c 200 "$tmp/g.srv") / $(head -c 200 "$tmp/s.srv") / $(head -c 200 "$tmp/c.srv")"
curl_status 400 "'response_format' and 'grammar' both" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"},"grammar":"root ::= \"a\""}'
# a forced call outranks response_format (OpenAI's order: the format is for a text answer); not grammar
ft='"messages":[{"role":"user","content":"hi"}],"max_tokens":40,"temperature":0,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],"tool_choice":"required","parallel_tool_calls":false,"chat_template_kwargs":{"enable_thinking":false}'
curl -s "$(post chat/completions)" -d "{$ft,\"response_format\":{\"type\":\"json_object\"}}" >"$tmp/ft"
node -e 'const c=JSON.parse(require("fs").readFileSync(process.argv[1])).choices[0];
  process.exit(c.finish_reason==="tool_calls" && c.message.tool_calls.length===1 && c.message.tool_calls[0].function.name==="f" ? 0 : 1)' "$tmp/ft" \
  && ok || bad "forced call beside response_format: $(head -c 300 "$tmp/ft")"
curl_status 400 "'tool_choice' and 'grammar' both" "$(post chat/completions)" -d "{$ft,\"grammar\":\"root ::= \\\"a\\\"\"}"
curl_status 400 "'grammar' and 'json_schema' both" "$(post completions)" -d '{"prompt":"x","grammar":"root ::= \"a\"","json_schema":{}}'
curl_status 400 "'grammar': grammar: line 1" "$(post completions)" -d '{"prompt":"x","grammar":"root ::= ("}'
curl_status 400 "'grammar': must be" "$(post completions)" -d '{"prompt":"x","grammar":5}'
curl_status 400 "'json_schema': must be" "$(post completions)" -d '{"prompt":"x","json_schema":"yes"}'
curl_status 400 "keyword 'not'" "$(post completions)" -d '{"prompt":"x","json_schema":{"not":{}}}'
curl_status 400 "no tool is named" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}'
curl_status 400 "'messages' is not a field" "$(post completions)" -d '{"prompt":"x","messages":[]}'
curl_status 400 "tools[0]" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}'
# tools: tool_choice "none" hides them, so the reply is the one without tools, token for token;
# with tools the model (which never calls one) answers in content, streamed as it is whole
tools='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
q='"messages":[{"role":"user","content":"Who is the LORD?"}],"max_tokens":24,"temperature":0'
curl -s "$(post chat/completions)" -d "{$q}" >"$tmp/notools"
curl -s "$(post chat/completions)" -d "{$q,\"tools\":$tools,\"tool_choice\":\"none\",\"parallel_tool_calls\":false}" >"$tmp/none"
curl -s "$(post chat/completions)" -d "{$q,\"tools\":$tools}" >"$tmp/withtools"
curl -s -N "$(post chat/completions)" -d "{$q,\"tools\":$tools,\"stream\":true}" >"$tmp/withtools.sse"
node -e 'const fs=require("fs"), J=f=>JSON.parse(fs.readFileSync(f)), a=J(process.argv[1]), b=J(process.argv[2]), c=J(process.argv[3]);
  let text="", reason="", calls=0, fin=null;
  for (const l of fs.readFileSync(process.argv[4],"utf8").split("\n")) if (l.startsWith("data: {")) { const d=JSON.parse(l.slice(6)).choices[0];
    if (!d) continue; text+=d.delta.content||""; reason+=d.delta.reasoning_content||""; calls+=(d.delta.tool_calls||[]).length; fin=d.finish_reason||fin; }
  const m=c.choices[0].message;
  const ok=JSON.stringify(a.choices[0].message)===JSON.stringify(b.choices[0].message) && typeof m.content==="string" && !m.tool_calls
    && ["stop","length"].includes(c.choices[0].finish_reason) && text===m.content && calls===0 && fin===c.choices[0].finish_reason;
  process.exit(ok?0:1)' "$tmp/notools" "$tmp/none" "$tmp/withtools" "$tmp/withtools.sse" && ok || bad "tools: none/auto replies: $(head -c 300 "$tmp/withtools")"
# forced calls cut short by max_tokens (the model calls again and again): the whole calls come
# out, the unfinished one neither as a call nor as text, whole and streamed alike
cq='"messages":[{"role":"user","content":"Weather in Jerusalem?"}],"max_tokens":120,"temperature":0,"tool_choice":"required","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Jerusalem","Babylon"]}},"required":["city"]}}}]'
curl -s "$(post chat/completions)" -d "{$cq}" >"$tmp/cut"
curl -s -N "$(post chat/completions)" -d "{$cq,\"stream\":true}" >"$tmp/cut.sse"
node -e 'const fs=require("fs"), c=JSON.parse(fs.readFileSync(process.argv[1])).choices[0];
  let text="", calls=[], fin=null;
  for (const l of fs.readFileSync(process.argv[2],"utf8").split("\n")) if (l.startsWith("data: {")) { const d=JSON.parse(l.slice(6)).choices[0];
    if (!d) continue; text+=d.delta.content||""; for (const t of d.delta.tool_calls||[]) if (t.function.name) calls.push(t.function.name); fin=d.finish_reason||fin; }
  const m=c.message, n=(m.tool_calls||[]).length;
  process.exit(c.finish_reason==="length" && n>=1 && !(m.content||"").includes("<") && text===(m.content||"") && calls.length===n && fin==="length" ? 0 : 1)' \
  "$tmp/cut" "$tmp/cut.sse" && ok || bad "forced calls cut by max_tokens: $(head -c 400 "$tmp/cut")"
curl_status 400 "messages[0].content[1]" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:,"}}]}]}'
# ... and what cannot change a reply, or asks for the default, is accepted
curl_status 200 "" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":2,"logprobs":false,"logit_bias":{},"user":"u","metadata":{},"store":false,"response_format":{"type":"text"},"tool_choice":"auto","parallel_tool_calls":true}'
curl_status 200 "" "$(post completions)" -d '{"prompt":"x","max_tokens":2,"echo":false,"suffix":"","best_of":1,"logprobs":null}'
curl_status 400 "messages[1]" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"},{"content":"x"}]}'
curl_status 400 "content" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":5}]}'
curl_status 400 "enable_thinking" "$(post chat/completions)" -d '{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":"no"}}'
printf '{"prompt":"\xff\xfe bad"}' >"$tmp/badutf8"
curl_status 400 "not valid JSON" "$(post completions)" --data-binary @"$tmp/badutf8"
printf '{"messages":[{"role":"user","content":"%s"}]}' "$(head -c 1100000 /dev/zero | tr '\0' a)" >"$tmp/huge"
curl_status 413 "over 1048576 bytes" "$(post chat/completions)" --data-binary @"$tmp/huge"
printf '{"prompt":"%s","max_tokens":1}' "$(head -c 1000000 /dev/zero | tr '\0' ' ' | sed 's/  / a/g')" >"$tmp/long"
curl_status 400 "maximum context length" "$(post completions)" --data-binary @"$tmp/long" # kjv: 262,144 positions, ~500k tokens here

# after 100 malformed requests it still answers a good one, and answers it right
for i in $(seq 100); do
    case $((i % 4)) in
        0) body='{"prompt":' ;; 1) body='{"prompt":"x","temperature":-1}' ;; 2) body='{"messages":{}}' ;; 3) body='nul' ;;
    esac
    curl -s -o /dev/null "$(post $([[ $((i % 2)) == 0 ]] && echo completions || echo chat/completions))" -d "$body"
done
curl -s "$(post completions)" -d '{"prompt":"And God said","max_tokens":24,"temperature":0}' >"$tmp/after"
node -e 'const a=JSON.parse(require("fs").readFileSync(process.argv[1])), b=JSON.parse(require("fs").readFileSync(process.argv[2]));
         process.exit(a.choices[0].text===b.text?0:1)' "$tmp/after" "$tmp/greedy.json" && ok || bad "after 100 bad requests: $(head -c 300 "$tmp/after")"

kill -INT "$server_pid"; wait "$server_pid"; rc=$?
[[ $rc -eq 0 ]] && grep -q "stopping" "$tmp/log" && ok || bad "SIGINT: exit $rc, $(tail -2 "$tmp/log")"

# real clients with their defaults (no max_tokens) on a forged bundle of 256 positions: the reply
# runs to the context's end (or -n), a larger max_tokens is clamped there with finish_reason length
"$qhx" forge models/q35-kjv -o "$tmp/b256" --context-len 256 --no-gate >/dev/null 2>&1 || bad "forge a 256-position bundle"
client_defaults() { # N_PREDICT [-n N]
    local npred=$1; shift
    model=$tmp/b256 start_server "$tmp/logd" "$@" || { bad "server on the bundle"; return; }
    local out p f
    out=$(node tests/oracle/client_defaults.js "http://127.0.0.1:$port" 256 "$npred")
    echo "$out" | grep -v '^ok '
    p=$(sed -nE 's/^clients: ([0-9]+) passed, ([0-9]+) failed$/\1/p' <<<"$out"); f=$(sed -nE 's/^clients: ([0-9]+) passed, ([0-9]+) failed$/\2/p' <<<"$out")
    pass=$((pass + ${p:-0})); fail=$((fail + ${f:-1}))
    kill -INT "$server_pid"; wait "$server_pid"
}
client_defaults 4096
client_defaults 100 --n-predict 100

# batched decode: 1, 2, 4 and 8 concurrent requests each equal to the same request alone, with the
# prefix cache on (its state files written by 8 slots at once) and off, with --draft ngram, and with
# --draft mtp on the model with the head
batch_clients() { # LABEL ARGS...
    local label=$1; shift
    start_server "$tmp/logb" --parallel 8 "$@" || { bad "server $label"; return; }
    local out p f
    out=$(node tests/oracle/batch_client.js "http://127.0.0.1:$port")
    echo "$out" | grep -v '^ok ' | sed "s/^/  [$label] /"
    p=$(sed -nE 's/^batch: ([0-9]+) passed, ([0-9]+) failed$/\1/p' <<<"$out"); f=$(sed -nE 's/^batch: ([0-9]+) passed, ([0-9]+) failed$/\2/p' <<<"$out")
    pass=$((pass + ${p:-0})); fail=$((fail + ${f:-1}))
    kill -INT "$server_pid"; wait "$server_pid"
}
batch_clients cache --cache-dir "$tmp/batchdir"
batch_clients ngram --draft ngram
if [[ -z ${QHX_TEST_QUICK:-} ]]; then # the sanitizer tier runs the two above
    batch_clients no-cache --cache-mb 0
    model=models/q35-kjv-mtp batch_clients mtp --draft mtp
fi

# fair, cancellable prefill: a long prompt goes in pieces between the other streams' steps, so a
# short stream sent after it finishes first, both answers equal their solo ones; a client that
# hangs up mid-prefill frees the slot within a piece
head -c 15000 tests/data/corpora/kjv-dev.txt | node -e 'let t="";process.stdin.on("data",d=>t+=d).on("end",()=>process.stdout.write(JSON.stringify({prompt:t,max_tokens:8,temperature:0})))' >"$tmp/long.json"
short='{"prompt":"And God said","max_tokens":64,"temperature":0,"stream":true}'
start_server "$tmp/logf" --parallel 2 --cache-mb 0 || bad "server for prefill"
url="http://127.0.0.1:$port"
curl -s "$(post completions)" -d @"$tmp/long.json" | grep -o '"text":"[^"]*"' >"$tmp/long.solo"
curl -sN "$(post completions)" -d "$short" | grep -o '"text":"[^"]*"' >"$tmp/short.solo"
(curl -s "$(post completions)" -d @"$tmp/long.json" | grep -o '"text":"[^"]*"' >"$tmp/long.conc"; date +%s.%N >"$tmp/long.t") &
sleep $((slow > 1 ? 2 : 0)).1
curl -sN "$(post completions)" -d "$short" | grep -o '"text":"[^"]*"' >"$tmp/short.conc"; date +%s.%N >"$tmp/short.t"
wait $!
check "[[ -s $tmp/long.solo ]] && cmp -s $tmp/long.solo $tmp/long.conc && cmp -s $tmp/short.solo $tmp/short.conc" "a prompt in pieces beside a stream: answers differ from solo"
check "awk 'BEGIN{exit !($(cat "$tmp/short.t") < $(cat "$tmp/long.t"))}'" "the short stream did not finish before the long prompt's answer"
grep -o 'prompt [0-9]* (cached 0) generated 8; ttft [0-9.]* ms' "$tmp/logf" | head -1 | sed 's/^/  long prompt: /'
# streamed, the same prompt's keep-alive comments between its pieces are whole SSE lines (a NUL
# once followed each), and its text is the solo one's
sed 's/"max_tokens":8,/"max_tokens":8,"stream":true,/' "$tmp/long.json" >"$tmp/longs.json"
curl -sN "$(post completions)" -d @"$tmp/longs.json" >"$tmp/longs.sse"
node -e 'const fs=require("fs"), b=fs.readFileSync(process.argv[1]), s=b.toString("latin1"); let t="";
  const lines=s.split("\n").filter(l=>l!=="");
  for (const l of lines) if (l.startsWith("data: {")) t+=JSON.parse(l.slice(6)).choices.map(c=>c.text).join("");
  const solo=fs.readFileSync(process.argv[2],"utf8").trim().split("\n").map(l=>JSON.parse("{"+l+"}").text).join("");
  process.exit(!b.includes(0) && lines.every(l=>l===": prefill"||l.startsWith("data: ")) && lines.includes(": prefill") && t===solo ? 0 : 1)' \
  "$tmp/longs.sse" "$tmp/long.solo" && ok || bad "a streamed long prompt's bytes: $(head -c 200 "$tmp/longs.sse" | od -c | head -5)"
kill -INT "$server_pid"; wait "$server_pid"
start_server "$tmp/logc" --parallel 1 --cache-mb 0 || bad "server for cancel"
url="http://127.0.0.1:$port"
curl -sN --max-time 0.$((slow > 1 ? 9 : 2)) "$(post completions)" -d @"$tmp/longs.json" >/dev/null
curl -sN "$(post completions)" -d "$short" | grep -o '"text":"[^"]*"' >"$tmp/short.after"
check "cmp -s $tmp/short.solo $tmp/short.after && grep -q ' 499 (client gone) prompt' $tmp/logc" "cancel mid-prefill: $(tail -3 "$tmp/logc")"
kill -INT "$server_pid"; wait "$server_pid"

# --cache-dir: a restarted server resumes a prompt from the state files the last one wrote, with
# the answer the first one gave finding the directory empty (a cold run); /metrics counts it
pc_req=$(node -e 'const sys="Thou art a scribe of the King James Bible. ".repeat(40);
  console.log(JSON.stringify({messages:[{role:"system",content:sys},{role:"user",content:"Who made the heaven and the earth?"}],
  max_tokens:24,temperature:0}))')
for run in 1 2; do
    start_server "$tmp/logd$run" --parallel 2 --cache-dir "$tmp/pcdir" || bad "server with --cache-dir"
    url="http://127.0.0.1:$port"
    curl -s "$(post chat/completions)" -d "$pc_req" >"$tmp/pcd$run.json"
    curl -s "$url/metrics" >"$tmp/pcm$run"
    kill -INT "$server_pid"; wait "$server_pid"
done
check "node -e 'const [a,b]=[1,2].map(i=>JSON.parse(require(\"fs\").readFileSync(process.argv[i],\"utf8\")));
    if (a.choices[0].message.content!==b.choices[0].message.content||a.usage.prompt_tokens_details.cached_tokens!==0||
        b.usage.prompt_tokens_details.cached_tokens<a.usage.prompt_tokens/2) process.exit(1)' $tmp/pcd1.json $tmp/pcd2.json" \
    "--cache-dir: a restart's answer or its resumed tokens: $(head -c 300 "$tmp/pcd1.json") / $(head -c 300 "$tmp/pcd2.json")"
check "grep -qx 'qhx_prefix_cache_dir_hits_total 1' $tmp/pcm2 && grep -qx 'qhx_prefix_cache_dir_hits_total 0' $tmp/pcm1" \
    "--cache-dir: /metrics: $(grep dir_ "$tmp/pcm2")"
check "grep -q 'prefix cache in $tmp/pcdir: [1-9][0-9]* state files of this model' $tmp/logd2 &&
    grep -q '1 resumed from files, 0 written' $tmp/logd2" "--cache-dir: the restart's log: $(grep -a 'cache' "$tmp/logd2")"
expect_err 2 "--cache-dir-mb: needs --cache-dir" "$qhx" serve models/q35-kjv --cache-dir-mb 64
expect_err 2 "--cache-mb 0" "$qhx" serve models/q35-kjv --cache-dir "$tmp/pcdir" --cache-mb 0
expect_err 1 "$tmp/pcd1.json: Not a directory" "$qhx" serve models/q35-kjv --port 0 --cache-dir "$tmp/pcd1.json"

# --api-key (every route but /health), --cors (preflight, the origin on answers), /metrics,
# /tokenize and /detokenize against the CLI's tokenizer, a log line per request
start_server "$tmp/logk" --parallel 1 --api-key sekret --cors https://app.example || bad "server with --api-key"
url="http://127.0.0.1:$port"
auth=(-H "Authorization: Bearer sekret")
curl_status 200 "" "$url/health"
curl_status 401 "no API key" "$url/v1/models"
curl_status 401 "wrong API key" -H "Authorization: Bearer sekreT" "$url/v1/models"
curl_status 401 "wrong API key" -H "Authorization: Bearer sekretX" "$(post completions)" -d '{"prompt":"x"}'
curl_status 401 "wrong API key" -H "Authorization: Bearer sek" "$url/v1/models"
curl_status 200 "" "${auth[@]}" "$url/v1/models"
curl_status 200 "" -H "x-api-key: sekret" "$url/v1/models"
curl_status 401 "wrong API key" -H "x-api-key: sekreT" "$url/v1/messages" -d '{"messages":[{"role":"user","content":"hi"}]}'
check "curl -s -i -X OPTIONS '$url/v1/chat/completions' | tr -d '\r' | grep -q '^Access-Control-Allow-Headers: Authorization, Content-Type, x-api-key'" "CORS preflight"
check "curl -s -i ${auth[*]@Q} '$url/v1/models' | tr -d '\r' | grep -qx 'Access-Control-Allow-Origin: https://app.example'" "CORS origin header"
ids=$(printf 'In the beginning God created' | "$qhx" tokenize models/q35-kjv | tr ' ' ,)
curl -s "${auth[@]}" "$url/tokenize" -d '{"content":"In the beginning God created"}' >"$tmp/tok"
check "[[ \"\$(node -e 'console.log(JSON.parse(require(\"fs\").readFileSync(process.argv[1])).tokens.join(\",\"))' $tmp/tok)\" == '$ids' ]]" "/tokenize: $(cat "$tmp/tok") vs $ids"
curl -s "${auth[@]}" "$url/detokenize" -d "{\"tokens\":[$ids]}" >"$tmp/detok"
check "grep -qF '\"content\":\"In the beginning God created\"' $tmp/detok" "/detokenize: $(cat "$tmp/detok")"
curl_status 400 "'bogus' is not a field of /tokenize" "${auth[@]}" "$url/tokenize" -d '{"content":"x","bogus":1}'
curl_status 400 "tokens[1]" "${auth[@]}" "$url/detokenize" -d '{"tokens":[1,-4]}'
curl_status 405 "use GET /metrics" "${auth[@]}" -X POST "$url/metrics"
curl -s "${auth[@]}" "$(post completions)" -d '{"prompt":"And God said","max_tokens":24,"temperature":0}' >"$tmp/k1"
curl -s "${auth[@]}" "$url/metrics" >"$tmp/metrics"
gen=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).usage.completion_tokens)' "$tmp/k1")
check "grep -qx 'qhx_requests_total{status=\"401\"} 5' $tmp/metrics && grep -qx 'qhx_generated_tokens_total $gen' $tmp/metrics && grep -qx 'qhx_slots 1' $tmp/metrics" \
    "/metrics ($gen tokens generated): $(head -c 600 "$tmp/metrics")"
check "grep -qE '^qhx serve: cmpl-[0-9a-f]+ 200 prompt [0-9]+ \(cached 0\) generated $gen; ttft [0-9.]+ ms' $tmp/logk" "no request log line: $(tail -3 "$tmp/logk")"
kill -INT "$server_pid"; wait "$server_pid"
expect_err 2 "--api-key: empty" "$qhx" serve models/q35-kjv --api-key ""

# --timeout: a client sending its headers or its body too slowly, or idle between requests, is
# cut off within a quarter second of the deadline; a reply that takes longer than it is not
start_server "$tmp/logt" --parallel 1 --timeout 1 --kernels ref || bad "server with --timeout"
url="http://127.0.0.1:$port"
slowpids=()
for mode in headers body idle; do
    node tests/oracle/slow_client.js "$port" $mode 10 >"$tmp/slow.$mode" &
    slowpids+=($!)
done
curl -s -o "$tmp/long" -w '%{http_code} %{time_total}' "$(post completions)" -d '{"prompt":"And God said","max_tokens":400,"temperature":0}' >"$tmp/long.t"
wait "${slowpids[@]}"
limits=(headers "1 1.6" body "1 1.6" idle "1 1.6") # seconds from connecting: the timeout (and the idle reply's few ms) .. + 0.25 + slack
for ((i = 0; i < ${#limits[@]}; i += 2)); do
    read -r lo hi <<<"${limits[i + 1]}"
    check "awk -v t=\"\$(cat $tmp/slow.${limits[i]})\" 'BEGIN{exit !(t + 0 >= $lo && t + 0 <= $hi && t !~ /no reply/)}'" \
        "--timeout 1: a slow client's ${limits[i]} closed after '$(cat "$tmp/slow.${limits[i]}")' s, want $lo-$hi"
done
check "[[ \$(cut -d' ' -f1 $tmp/long.t) == 200 ]] && awk '{exit !(\$2 > 1)}' $tmp/long.t && grep -q '\"finish_reason\":\"length\"' $tmp/long" \
    "--timeout 1: a reply taking longer than the timeout: $(cat "$tmp/long.t") $(head -c 200 "$tmp/long")"
curl -s "$url/metrics" >"$tmp/metrics"
check "grep -qx 'qhx_connections_timed_out_total 3' $tmp/metrics" "/metrics after 3 timeouts: $(grep timed_out "$tmp/metrics")"
check "[[ \$(grep -c 'took longer than 1 s (--timeout)' $tmp/logt) == 3 ]]" "timeouts not logged: $(tail -4 "$tmp/logt")"
kill -INT "$server_pid"; wait "$server_pid"
expect_err 2 "--timeout" "$qhx" serve models/q35-kjv --timeout 0

# one slot: a client that hangs up mid-stream must free it for the next request
start_server "$tmp/log1" --parallel 1 -n 200000 || { echo "server: $pass passed, $((fail + 1)) failed"; exit 1; }
url="http://127.0.0.1:$port"
# ... and one that hangs up while queued behind it gives its place up (logged 499, no tokens);
# greedy, the long stream runs thousands of tokens without an end of turn
curl -sN --max-time "$slow" "$(post completions)" -d '{"prompt":"And","max_tokens":200000,"stream":true,"temperature":0}' >"$tmp/partial" &
sleep 0.2
curl -s --max-time 0.3 "$(post completions)" -d '{"prompt":"Queued","max_tokens":5}' >/dev/null
wait $!
t0=$(date +%s)
curl -s --max-time $((60 * slow)) "$(post completions)" -d '{"prompt":"And God said","max_tokens":24,"temperature":0}' >"$tmp/next"
t1=$(date +%s)
grep -q '^data: {' "$tmp/partial" && ok || bad "the long stream sent nothing before the hang-up"
node -e 'const a=JSON.parse(require("fs").readFileSync(process.argv[1])), b=JSON.parse(require("fs").readFileSync(process.argv[2]));
         process.exit(a.choices[0].text===b.text?0:1)' "$tmp/next" "$tmp/greedy.json" && ok \
    || bad "after a hang-up the next request got '$(head -c 200 "$tmp/next")' after $((t1 - t0)) s"
echo "  slot freed: the next request finished $((t1 - t0)) s after the hang-up"
check "grep -q ' 499 (client gone) prompt [0-9]* (cached 0) generated 0;' $tmp/log1" "a request that left the queue: $(tail -4 "$tmp/log1")"
kill -INT "$server_pid"; wait "$server_pid"

# a padded vocabulary: the 64 tokens include ids the tokenizer has no text for; they are counted in
# usage, add no text, and the text is the same streamed or not (fp32 reference kernels: the same ids
# on every machine)
padded_checkpoint "$tmp/pad" || bad "padded checkpoint"
"$qhx" generate "$tmp/pad" --tokens 1,2,3 -n 64 --kernels ref --json >"$tmp/pad.json" 2>/dev/null
model=$tmp/pad start_server "$tmp/logp" --parallel 1 --kernels ref || { echo "server: $pass passed, $((fail + 1)) failed"; exit 1; }
url="http://127.0.0.1:$port"
curl -s "$(post completions)" -d '{"prompt":[1,2,3],"max_tokens":64,"temperature":0}' >"$tmp/padr"
curl -sN "$(post completions)" -d '{"prompt":[1,2,3],"max_tokens":64,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' >"$tmp/pads"
node -e 'const fs=require("fs"), r=JSON.parse(fs.readFileSync(process.argv[1])), g=JSON.parse(fs.readFileSync(process.argv[2]));
         const ev=fs.readFileSync(process.argv[3],"utf8").split("\n").filter(l=>l.startsWith("data: {")).map(l=>JSON.parse(l.slice(6)));
         const text=ev.map(e=>e.choices.length?e.choices[0].text:"").join(""), u=ev[ev.length-1].usage;
         process.exit(g.ids.some(i=>i>=4129) && r.usage.completion_tokens===g.completion_tokens && r.choices[0].text===g.text &&
                      text===g.text && u && u.completion_tokens===g.completion_tokens ? 0 : 1)' "$tmp/padr" "$tmp/pad.json" "$tmp/pads" \
    && ok || bad "padded vocabulary: $(head -c 300 "$tmp/padr") vs $(head -c 300 "$tmp/pad.json")"
kill -INT "$server_pid"; wait "$server_pid"

# the prefix cache: a cached server (speculative decoding on too), an uncached one and one with a
# budget of almost nothing give the same answers (tests/oracle/prefix_cache_client.js); the tiny one
# must have evicted, and resumed from the state files it keeps in a directory (two slots at once)
start_server "$tmp/logc" --parallel 4 --draft ngram && cport=$port && cpid=$server_pid &&
    start_server "$tmp/logn" --parallel 4 --cache-mb 0 && nport=$port && npid=$server_pid &&
    start_server "$tmp/logt" --parallel 2 --cache-mb 1 --cache-dir "$tmp/tinydir" --cache-dir-mb 64 && tport=$port && tpid=$server_pid ||
    { echo "server: $pass passed, $((fail + 1)) failed"; exit 1; }
out=$(node tests/oracle/prefix_cache_client.js "http://127.0.0.1:$cport" "http://127.0.0.1:$nport" "http://127.0.0.1:$tport")
echo "$out" | grep -v '^ok '
p=$(sed -nE 's/^prefix-cache: ([0-9]+) passed, ([0-9]+) failed$/\1/p' <<<"$out"); f=$(sed -nE 's/^prefix-cache: ([0-9]+) passed, ([0-9]+) failed$/\2/p' <<<"$out")
pass=$((pass + ${p:-0})); fail=$((fail + ${f:-1}))
# the same conversations through a server drafting with the MTP head (q35-kjv-mtp: q35-kjv's trunk,
# so the same answers as the uncached plain server), and the tiny one restarted on its directory
kill -INT "$tpid"; wait "$tpid"; cp "$tmp/logt" "$tmp/logt1"
model=models/q35-kjv-mtp start_server "$tmp/logm" --parallel 4 --draft mtp && mport=$port && mpid=$server_pid &&
    start_server "$tmp/logt" --parallel 2 --cache-mb 1 --cache-dir "$tmp/tinydir" --cache-dir-mb 64 && tport=$port && tpid=$server_pid ||
    { echo "server: $pass passed, $((fail + 1)) failed"; exit 1; }
out=$(node tests/oracle/prefix_cache_client.js "http://127.0.0.1:$mport" "http://127.0.0.1:$nport" "http://127.0.0.1:$tport")
echo "$out" | grep -v '^ok ' | sed 's/^/mtp: /'
p=$(sed -nE 's/^prefix-cache: ([0-9]+) passed, ([0-9]+) failed$/\1/p' <<<"$out"); f=$(sed -nE 's/^prefix-cache: ([0-9]+) passed, ([0-9]+) failed$/\2/p' <<<"$out")
pass=$((pass + ${p:-0})); fail=$((fail + ${f:-1}))
kill -INT "$mpid"; wait "$mpid"
for p in $cpid $npid $tpid; do kill -INT "$p"; wait "$p"; done
grep -E "prefix cache: [1-9][0-9]* hits" "$tmp/logc" && ok || bad "cached server: $(tail -1 "$tmp/logc")"
grep -E "prefix cache: 0 hits, [0-9]+ misses, 0 evictions, 0 snapshots" "$tmp/logn" && ok || bad "uncached server: $(tail -1 "$tmp/logn")"
grep -E "prefix cache: [0-9]+ hits, [0-9]+ misses, [1-9][0-9]* evictions" "$tmp/logt1" && ok || bad "tiny budget did not evict: $(tail -1 "$tmp/logt1")"
grep -E "prefix cache in .*: [0-9]+ resumed from files, [1-9][0-9]* written" "$tmp/logt1" && ok || bad "tiny budget, files: $(tail -1 "$tmp/logt1")"
grep -E "prefix cache in .*: [1-9][0-9]* resumed from files" "$tmp/logt" && ok || bad "tiny budget restarted, from files: $(tail -1 "$tmp/logt")"

# flags
expect_err 2 "--host" "$qhx" serve models/q35-kjv --host localhost:80
expect_err 2 "--port" "$qhx" serve models/q35-kjv --port 70000
expect_err 2 "--parallel" "$qhx" serve models/q35-kjv --parallel 0
expect_err 2 "--cache-mb" "$qhx" serve models/q35-kjv --cache-mb -1
expect_err 1 "no such model" "$qhx" serve /nope
expect_err 1 "has no MTP head" "$qhx" serve models/q35-kjv --draft mtp

finish server
