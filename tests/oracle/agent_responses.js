// What a coding agent sends to /v1/responses (the shape of the Codex CLI's requests: developer
// messages, reasoning handed back as encrypted_content, namespaced tools beside a hosted
// web_search, include, prompt_cache_key, client_metadata) against `qhx serve` on q35-kjv. Each
// reply is held to the chat completion its request amounts to, token for token (greedy), streamed
// and whole; a second turn that hands the first one's items back hits the prefix cache through
// the first one's call. q35-kjv closes its reasoning at once, so a second server on
// q35-rand-tiny (a random model that never closes it) carries the reasoning checks.
// node agent_responses.js KJV_URL TINY_URL
const [kjv, tiny] = process.argv.slice(2);
const OpenAI = require("openai");
let base = kjv;
let pass = 0, fail = 0;
const check = (cond, what, detail) => {
  if (cond) { pass++; console.log("ok", what); } else { fail++; console.log("FAIL", what, detail === undefined ? "" : JSON.stringify(detail).slice(0, +(process.env.DETAIL || 600))); }
};
const post = async (path, body) => {
  const r = await fetch(base + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.text() };
};
// a streamed response's events, in order
const events = text => text.split("\n").filter(l => l.startsWith("data: {")).map(l => JSON.parse(l.slice(6)));
// the items as a reply's content: ids name the request, so they are left out
const norm = out => JSON.stringify(out, (k, v) => (k === "id" || k === "call_id" ? undefined : v));
const itemsOf = out => ({
  reasoning: out.find(i => i.type === "reasoning"),
  text: (out.find(i => i.type === "message") || { content: [{ text: "" }] }).content.map(p => p.text).join(""),
  calls: out.filter(i => i.type === "function_call"),
});

const dev1 = "You are a careful agent.", dev2 = "<skills>none</skills>", env = "<environment_context><cwd>/tmp</cwd></environment_context>";
const question = "Who is the LORD?";
const fn = (name, props) => ({ type: "function", name, description: "does " + name, strict: false,
  parameters: { type: "object", properties: props, required: Object.keys(props), additionalProperties: false } });
const shell = fn("exec_command", { cmd: { type: "string", maxLength: 12 } });
const spawn = fn("spawn", { task: { type: "string", maxLength: 8 } }), close = fn("close", { id: { type: "integer", minimum: 0, maximum: 9 } });
const agents = { type: "namespace", name: "agents", description: "sub-agents", tools: [spawn, close] };
const asChat = t => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } });
const inNs = (ns, t) => ({ ...t, name: ns + "." + t.name });
const input = [
  { type: "message", role: "developer", content: [{ type: "input_text", text: dev1 }] },
  { type: "message", role: "developer", content: [{ type: "input_text", text: dev2 }] },
  { type: "message", role: "user", content: [{ type: "input_text", text: env }] },
  { type: "message", role: "user", content: [{ type: "input_text", text: question }] },
];
const codex = { model: "kjv", input, tools: [shell, agents, { type: "web_search", external_web_access: false }], tool_choice: "auto",
  parallel_tool_calls: true, reasoning: { summary: "auto" }, store: false, include: ["reasoning.encrypted_content"],
  prompt_cache_key: "conversation-1", client_metadata: { session_id: "s" }, temperature: 0, max_output_tokens: 48 };
const chatOf = (extra = {}) => ({ model: "kjv", temperature: 0, max_tokens: 48,
  messages: [{ role: "system", content: dev1 + "\n\n" + dev2 }, { role: "user", content: env }, { role: "user", content: question }],
  tools: [asChat(shell), asChat(inNs("agents", spawn)), asChat(inNs("agents", close))], ...extra });

// the stream's items are whole at output_item.done, each item's events lie between its added and
// its done, and the completed response holds the same items
const streamed = text => {
  const ev = events(text), open = new Set(), done = [];
  let nested = false;
  for (const e of ev) {
    if (e.type === "response.output_item.added") { if (open.size) nested = true; open.add(e.output_index); }
    else if (e.type === "response.output_item.done") { open.delete(e.output_index); done.push(e.item); }
    else if (e.item_id && !open.size) nested = true;
  }
  const completed = ev.find(e => e.type === "response.completed" || e.type === "response.incomplete");
  return { done, nested, completed: completed && completed.response };
};

(async () => {
  // 1. the Codex-shaped request, whole and streamed, against the chat completion it amounts to
  const whole = await post("/v1/responses", codex), chat = await post("/v1/chat/completions", chatOf());
  check(whole.status === 200 && chat.status === 200, "a Codex-shaped request is answered", whole.body);
  const r = JSON.parse(whole.body), c = JSON.parse(chat.body).choices[0].message, it = itemsOf(r.output);
  check(it.text === c.content && (it.reasoning ? it.reasoning.summary[0].text : "") === c.reasoning_content.replace(/\n+$/, ""),
        "its answer and reasoning are the chat completion's (system = both developer messages)", [it, c]);
  const s = streamed((await post("/v1/responses", { ...codex, stream: true })).body);
  check(!s.nested && norm(s.done) === norm(r.output) && JSON.stringify(s.completed.output) === JSON.stringify(s.done),
        "streamed: items one at a time, each whole at output_item.done, as the whole reply's", [s.done, r.output]);

  const side = await Promise.all([post("/v1/responses", codex), post("/v1/responses", { ...codex, stream: true }),
                                  post("/v1/chat/completions", chatOf({ max_tokens: 30 })), post("/v1/responses", { ...codex, reasoning: { effort: "none" } })]);
  check(norm(JSON.parse(side[0].body).output) === norm(r.output) && norm(streamed(side[1].body).done) === norm(r.output),
        "the same beside three other requests", side.map(x => x.body.slice(0, 300)));

  // the official SDK's stream helper builds the response from the events alone
  const sdk = new OpenAI({ baseURL: kjv + "/v1", apiKey: "none", maxRetries: 0 });
  const built = await sdk.responses.stream({ ...codex }).finalResponse();
  check(itemsOf(built.output).text === it.text, "openai SDK: responses.stream builds the same answer", [built.output, r.output]);

  // 2. a forced call to a namespaced tool comes back with its namespace apart
  const forced = { ...codex, tools: [agents, { type: "web_search" }], tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 200 };
  const f = JSON.parse((await post("/v1/responses", forced)).body), fc = itemsOf(f.output).calls;
  check(fc.length === 1 && fc[0].namespace === "agents" && ["spawn", "close"].includes(fc[0].name) && JSON.parse(fc[0].arguments),
        "a namespaced tool's call names its namespace and the tool", f.output);
  const fs = streamed((await post("/v1/responses", { ...forced, stream: true })).body);
  check(norm(fs.done) === norm(f.output), "the same call streamed", [fs.done, f.output]);
  const fcut = { ...forced, max_output_tokens: fc.length ? f.usage.output_tokens : 1 }; /* ends as the call does: incomplete or not, built from events */
  const fb = await sdk.responses.stream(fcut).finalResponse();
  check(norm(fb.output.filter(i => i.type === "function_call").map(i => [i.name, i.namespace, i.arguments])) ===
        norm(fc.map(i => [i.name, i.namespace, i.arguments])), "openai SDK: responses.stream builds the same call", [fb.output, fc]);

  const named = JSON.parse((await post("/v1/responses", { ...forced, tool_choice: { type: "function", namespace: "agents", name: "close" } })).body);
  check(itemsOf(named.output).calls.length === 1 && itemsOf(named.output).calls[0].name === "close" && itemsOf(named.output).calls[0].namespace === "agents",
        "tool_choice naming a namespaced function forces that one", named.output);

  // 3. the next turn hands the items back: the prompt is the first turn's and its reply, so the
  // prefix cache serves all of it, and the answer is the chat completion's with the same history
  const turn2 = { ...forced, tool_choice: "auto", parallel_tool_calls: true,
    input: [...input, ...f.output, { type: "function_call_output", call_id: fc[0].call_id, output: [{ type: "input_text", text: "spawned" }] }] };
  const t2 = await post("/v1/responses", turn2), t2r = JSON.parse(t2.body);
  const fr = itemsOf(f.output).reasoning;
  const chat2 = await post("/v1/chat/completions", chatOf({ max_tokens: 200, tools: [asChat(inNs("agents", spawn)), asChat(inNs("agents", close))],
    messages: [...chatOf().messages,
      { role: "assistant", content: itemsOf(f.output).text, reasoning_content: fr ? fr.summary[0].text : "",
        tool_calls: [{ id: fc[0].call_id, type: "function", function: { name: "agents." + fc[0].name, arguments: fc[0].arguments } }] },
      { role: "tool", tool_call_id: fc[0].call_id, content: "spawned" }] }));
  const c2 = JSON.parse(chat2.body).choices[0].message;
  check(t2.status === 200 && itemsOf(t2r.output).text === c2.content, "turn 2 answers as the chat completion with that history", [itemsOf(t2r.output).text, c2.content, f.output]);
  check(t2r.usage.input_tokens_details.cached_tokens > f.usage.input_tokens, "turn 2's prompt is served from the cache through turn 1's call",
        [t2r.usage, f.usage]);

  // 4. reasoning.effort: none and minimal are the reasoning off, the others on; a developer
  // message after the first turn is a user turn; a hosted tool alone is no tool at all
  const off = JSON.parse((await post("/v1/chat/completions", chatOf({ chat_template_kwargs: { enable_thinking: false } }))).body).choices[0].message;
  for (const effort of ["none", "minimal"]) {
    const e = JSON.parse((await post("/v1/responses", { ...codex, reasoning: { effort, summary: null } })).body);
    check(!itemsOf(e.output).reasoning && itemsOf(e.output).text === off.content, `reasoning.effort ${effort}: the reasoning off`, e.output);
  }
  const high = JSON.parse((await post("/v1/responses", { ...codex, reasoning: { effort: "high" } })).body);
  check(norm(high.output) === norm(r.output), "reasoning.effort high: the default", high.output);
  const viaChat = JSON.parse((await post("/v1/chat/completions", chatOf({ reasoning_effort: "minimal", prompt_cache_key: "k", safety_identifier: "u" }))).body);
  check(JSON.stringify(viaChat.choices[0].message) === JSON.stringify(off), "chat's reasoning_effort minimal: the reasoning off", viaChat);
  const late = { ...codex, input: [...input, { type: "message", role: "assistant", content: [{ type: "output_text", text: "The LORD." }] },
    { role: "developer", content: "Be brief." }, { role: "user", content: "And Moses?" }] };
  const lr = JSON.parse((await post("/v1/responses", late)).body);
  const lc = JSON.parse((await post("/v1/chat/completions", chatOf({ messages: [...chatOf().messages, { role: "assistant", content: "The LORD." },
    { role: "user", content: "Be brief." }, { role: "user", content: "And Moses?" }] }))).body).choices[0].message;
  check(itemsOf(lr.output).text === lc.content, "a later developer message is a user turn", [lr.output, lc]);
  const bare = { model: "kjv", input: question, temperature: 0, max_output_tokens: 24 };
  const h = JSON.parse((await post("/v1/responses", { ...bare, tools: [{ type: "web_search" }, { type: "file_search", vector_store_ids: [] }] })).body);
  const b = JSON.parse((await post("/v1/responses", bare)).body);
  check(norm(h.output) === norm(b.output), "hosted tools alone: the reply without tools", [h.output, b.output]);

  // 5. reasoning that is there (q35-rand-tiny): an item of its own, whole and streamed, handed out
  // as encrypted_content, and handed back it is the assistant turn's reasoning_content
  base = tiny;
  const tq = { model: "tiny", input: question, temperature: 0, max_output_tokens: 12, include: ["reasoning.encrypted_content"] };
  const tw = JSON.parse((await post("/v1/responses", tq)).body), tr = itemsOf(tw.output).reasoning;
  const tc = JSON.parse((await post("/v1/chat/completions", { messages: [{ role: "user", content: question }], temperature: 0, max_tokens: 12 })).body).choices[0].message;
  check(tw.status === "incomplete" && tw.output.length === 1 && tr && tr.summary[0].text === tc.reasoning_content.replace(/\n+$/, "")
        && tr.summary[0].text.length > 0 && tr.encrypted_content === tr.summary[0].text,
        "reasoning: one item, the chat completion's reasoning, as encrypted_content too", [tw.output, tc]);
  // chat's own stream says the same reasoning as its whole reply, here and on q35-kjv (whose
  // empty reasoning once streamed as "\n")
  const chatStream = async body => {
    let rs = "", cs = "";
    for (const e of events((await post("/v1/chat/completions", { ...body, stream: true })).body))
      if (e.choices && e.choices[0]) rs += e.choices[0].delta.reasoning_content || "", cs += e.choices[0].delta.content || "";
    return { reasoning_content: rs, content: cs };
  };
  const tcs = await chatStream({ messages: [{ role: "user", content: question }], temperature: 0, max_tokens: 12 });
  base = kjv;
  const kq = { messages: [{ role: "user", content: question }], temperature: 0, max_tokens: 12 };
  const kw = (JSON.parse((await post("/v1/chat/completions", kq)).body)).choices[0].message, ks = await chatStream(kq);
  base = tiny;
  check(tcs.reasoning_content === tc.reasoning_content && tcs.content === (tc.content || "") && ks.reasoning_content === kw.reasoning_content &&
        ks.content === kw.content, "chat streams: the whole reply's reasoning and answer", [tcs, tc, ks, kw]);
  const ts = streamed((await post("/v1/responses", { ...tq, stream: true })).body);
  check(!ts.nested && norm(ts.done) === norm(tw.output), "reasoning streamed: the same item", [ts.done, tw.output]);
  const back = { ...tq, input: [{ role: "user", content: question }, tr, { type: "message", role: "assistant", content: [{ type: "output_text", text: "Amen." }] },
    { role: "user", content: "And Moses?" }] };
  const bw = JSON.parse((await post("/v1/responses", back)).body);
  const bc = JSON.parse((await post("/v1/chat/completions", { temperature: 0, max_tokens: 12, messages: [{ role: "user", content: question },
    { role: "assistant", content: "Amen.", reasoning_content: tr.summary[0].text }, { role: "user", content: "And Moses?" }] })).body).choices[0].message;
  check(itemsOf(bw.output).reasoning && itemsOf(bw.output).reasoning.summary[0].text === bc.reasoning_content.replace(/\n+$/, ""),
        "a reasoning item handed back is its turn's reasoning_content", [bw.output, bc]);
  const { encrypted_content, ...summaryOnly } = tr;
  const bs = JSON.parse((await post("/v1/responses", { ...back, input: [back.input[0], summaryOnly, ...back.input.slice(2)] })).body);
  check(norm(bs.output) === norm(bw.output), "handed back by its summary alone: the same", [bs.output, bw.output]);
  base = kjv;

  // 6. what is not done is refused by name
  const refused = [
    [{ ...bare, reasoning: { effort: "extreme" } }, "reasoning"], [{ ...bare, reasoning: { budget: 5 } }, "reasoning"],
    [{ ...bare, reasoning: "high" }, "reasoning"], [{ ...bare, include: ["file_search_call.results"] }, "include"],
    [{ ...bare, tools: [{ type: "custom", name: "apply_patch" }] }, "tools"],
    [{ ...bare, tools: [{ type: "namespace", name: "n", tools: [{ type: "custom", name: "x" }] }] }, "tools"],
    [{ ...bare, input: [{ type: "reasoning", summary: [{ type: "summary_text" }] }] }, "input"],
    [{ ...bare, input: [{ type: "function_call_output", call_id: "c", output: [{ type: "input_image", image_url: "x" }] }] }, "input"],
    [{ ...bare, input: [{ type: "function_call_output", output: "no id" }] }, "input"],
  ];
  for (const [body, param] of refused) {
    const x = await post("/v1/responses", body), e = x.status === 400 && JSON.parse(x.body).error;
    check(e && e.param === param && e.message.length > 0, `refused, naming '${param}': ${JSON.stringify(body).slice(60, 140)}`, x.body);
  }
  const both = await post("/v1/chat/completions", chatOf({ reasoning_effort: "low", chat_template_kwargs: { enable_thinking: true } }));
  check(both.status === 400 && JSON.parse(both.body).error.param === "reasoning_effort", "reasoning_effort beside enable_thinking: a 400", both.body);

  // 7. stored responses (store is true unless said): previous_response_id continues the
  // conversation as if its items were handed back (the earlier instructions not carried over),
  // streamed ones too; GET and DELETE reach a stored response; store: false, unknown and deleted
  // ids are a 404 naming previous_response_id
  {
    const fetchAt = async (path, method = "GET") => { const r = await fetch(kjv + path, { method }); return { status: r.status, body: await r.text() }; };
    const t1 = { model: "kjv", instructions: "Answer from the scriptures.", input: question, temperature: 0, max_output_tokens: 16 };
    const p1 = JSON.parse((await post("/v1/responses", t1)).body);
    const t2 = { ...t1, instructions: "Be brief.", input: [{ role: "user", content: "And Moses?" }] };
    const p2 = JSON.parse((await post("/v1/responses", { ...t2, previous_response_id: p1.id })).body);
    const q2 = JSON.parse((await post("/v1/responses", { ...t2, store: false, input: [{ role: "user", content: question }, ...p1.output, ...t2.input] })).body);
    check(p2.output && norm(p2.output) === norm(q2.output) && p2.usage.input_tokens === q2.usage.input_tokens,
          "previous_response_id: the answer of the items handed back, under the new instructions", [p2.output, q2.output]);
    const same = JSON.parse((await post("/v1/responses", { ...t1, input: "And Moses?", previous_response_id: p1.id })).body);
    check(same.usage.input_tokens_details.cached_tokens > p1.usage.input_tokens, "previous_response_id: resumed from the prefix cache past the first turn", [same.usage, p1.usage]);
    const p3 = await sdk.responses.create({ ...t1, input: "And Aaron?", previous_response_id: p2.id });
    const q3 = JSON.parse((await post("/v1/responses", { ...t1, store: false,
      input: [{ role: "user", content: question }, ...p1.output, ...t2.input, ...p2.output, { role: "user", content: "And Aaron?" }] })).body);
    check(norm(p3.output) === norm(q3.output), "a chain of two through the openai SDK: the whole conversation's answer", [p3.output, q3.output]);
    const ps = streamed((await post("/v1/responses", { ...t1, stream: true })).body).completed;
    const pc = JSON.parse((await post("/v1/responses", { ...t2, previous_response_id: ps && ps.id })).body);
    check(ps && norm(pc.output) === norm(p2.output), "a streamed response is stored too", [pc.output, p2.output]);
    const pgot = await fetchAt("/v1/responses/" + p1.id), pg = pgot.status === 200 && JSON.parse(pgot.body);
    const pr = await sdk.responses.retrieve(p2.id);
    check(pg && pg.id === p1.id && norm(pg.output) === norm(p1.output) && pr.id === p2.id && norm(pr.output) === norm(p2.output),
          "GET /v1/responses/ID (and the SDK's retrieve) give the stored response", [pgot.body.slice(0, 200)]);
    const nostore = JSON.parse((await post("/v1/responses", { ...t1, store: false })).body);
    const pdel = await fetchAt("/v1/responses/" + p1.id, "DELETE"), pdd = await fetchAt("/v1/responses/" + p1.id, "DELETE");
    check(pdel.status === 200 && JSON.parse(pdel.body).deleted === true && pdd.status === 404, "DELETE, then DELETE again: 200, 404", [pdel.body, pdd.body]);
    for (const [id, what] of [[nostore.id, "stored with store: false"], ["resp-nothing", "unknown"], [p1.id, "deleted"]]) {
      const x = await post("/v1/responses", { ...t2, previous_response_id: id }), e = x.status === 404 && JSON.parse(x.body).error;
      check(e && e.param === "previous_response_id" && e.code === "previous_response_not_found" && e.type === "invalid_request_error",
            `previous_response_id of a response ${what}: a 404 naming it`, x.body);
    }
    check((await fetchAt("/v1/responses/" + nostore.id)).status === 404, "a store: false response cannot be got", "");
    check((await post("/v1/responses", { ...t2, previous_response_id: 5 })).status === 400, "previous_response_id not a string: a 400", "");
  }

  console.log(`agent-responses: ${pass} passed, ${fail} failed`);
  process.exit(fail ? 1 : 0);
})().catch(e => { console.log("FAIL", e.stack); console.log(`agent-responses: ${pass} passed, ${fail + 1} failed`); process.exit(1); });
