// Anthropic's Messages API through the official Anthropic SDK (its own stream parser and message
// assembly), against `qhx serve`, shaped as Claude Code sends it: system blocks with
// cache_control, a system message after the first turn, tools with input_schema beside a deferred
// tool and one of Anthropic's own, thinking, context_management, output_config. Each reply is
// held to the chat completion its request amounts to, token for token (greedy), streamed and
// whole; a turn that hands a tool_use back with its result resumes from the prefix cache past
// the call. q35-kjv closes its thinking at once, so a second server on q35-rand-tiny (a random
// model that never closes it) carries the thinking checks. node agent_messages.js KJV_URL TINY_URL
const Anthropic = require("@anthropic-ai/sdk").default;
const [kjv, tiny] = process.argv.slice(2);
let pass = 0, fail = 0;
const check = (cond, what, detail) => {
  if (cond) { pass++; console.log("ok", what); } else { fail++; console.log("FAIL", what, detail === undefined ? "" : JSON.stringify(detail).slice(0, 600)); }
};
const client = url => new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
const chat = async (url, body) => (await (await fetch(url + "/v1/chat/completions", { method: "POST", body: JSON.stringify(body) })).json()).choices[0].message;
const raw = async (url, path, body) => {
  const r = await fetch(url + path, { method: "POST", body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
};
const blocks = m => JSON.stringify(m.content);
const textOf = m => m.content.filter(b => b.type === "text").map(b => b.text).join("");

const question = "Who is the LORD?";
const schema = props => ({ type: "object", properties: props, required: Object.keys(props) });
const psalm = { name: "psalm", description: "Reads a psalm", input_schema: schema({ n: { type: "integer", minimum: 1, maximum: 150 } }) };
const bash = { name: "Bash", description: "Runs a command", input_schema: schema({ command: { type: "string", maxLength: 12 } }) };
const claudeCode = {
  model: "kjv", max_tokens: 48, temperature: 0,
  system: [{ type: "text", text: "x-billing: none" }, { type: "text", text: "You are an agent.", cache_control: { type: "ephemeral" } }],
  messages: [{ role: "user", content: [{ type: "text", text: "<reminder>be brief</reminder>" }, { type: "text", text: question }] },
             { role: "system", content: [{ type: "text", text: "# Environment: /tmp" }] }],
  tools: [bash, psalm, { ...psalm, name: "Deferred", defer_loading: true }, { type: "web_search_20250305", name: "web_search" }],
  thinking: { type: "adaptive" }, context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
  output_config: { effort: "high" }, metadata: { user_id: "u" },
};
const asChat = t => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.input_schema } });
const chatOf = (extra = {}) => ({ temperature: 0, max_tokens: 48, tools: [asChat(bash), asChat(psalm)],
  messages: [{ role: "system", content: "x-billing: none\nYou are an agent." }, { role: "user", content: "<reminder>be brief</reminder>\n" + question },
             { role: "user", content: "# Environment: /tmp" }], ...extra });

(async () => {
  let c = client(kjv);
  // 1. the Claude Code-shaped request, whole and streamed (the SDK assembles the stream)
  const whole = await c.messages.create(claudeCode);
  const streamed = await c.messages.stream(claudeCode).finalMessage();
  const want = await chat(kjv, chatOf());
  check(textOf(whole) === want.content && !whole.content.some(b => b.type === "thinking") && want.reasoning_content === "",
        "a Claude Code-shaped request answers as its chat completion", [whole.content, want]);
  check(blocks(streamed) === blocks(whole) && streamed.stop_reason === whole.stop_reason && whole.stop_reason === "max_tokens",
        "streamed: the same blocks and stop_reason", [streamed, whole]);
  const side = await Promise.all([c.messages.create(claudeCode), c.messages.stream(claudeCode).finalMessage(), chat(kjv, chatOf({ max_tokens: 30 })),
                                  c.messages.create({ ...claudeCode, thinking: { type: "disabled" } })]);
  check(blocks(side[0]) === blocks(whole) && blocks(side[1]) === blocks(whole), "the same beside three other requests", side);
  const counted = await c.messages.countTokens({ model: "kjv", system: claudeCode.system, messages: claudeCode.messages, tools: claudeCode.tools });
  check(counted.input_tokens === whole.usage.input_tokens + whole.usage.cache_read_input_tokens, "count_tokens: the prompt's tokens", [counted, whole.usage]);

  // 2. a forced tool: one tool_use with its input as an object; streamed, the SDK builds the same
  // input from the JSON delta
  const forced = { ...claudeCode, max_tokens: 120, tool_choice: { type: "tool", name: "psalm", disable_parallel_tool_use: true } };
  const f = await c.messages.create(forced), fs = await c.messages.stream(forced).finalMessage();
  const use = f.content.find(b => b.type === "tool_use");
  check(f.stop_reason === "tool_use" && use && use.name === "psalm" && Number.isInteger(use.input.n) && use.input.n >= 1 && use.input.n <= 150,
        "tool_choice tool: a tool_use with its input", f.content);
  check(JSON.stringify(fs.content.map(b => ({ ...b, id: undefined }))) === JSON.stringify(f.content.map(b => ({ ...b, id: undefined }))),
        "the same tool_use streamed", [fs.content, f.content]);

  // 3. the next turn: the tool_use back, its result in a user turn; the chat completion with that
  // history answers the same, and the prefix cache serves it past the call
  const turn2 = { ...claudeCode, messages: [...claudeCode.messages, { role: "assistant", content: f.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: [{ type: "text", text: "The LORD is my shepherd." }] }] }] };
  const t2 = await c.messages.create(turn2);
  const want2 = await chat(kjv, chatOf({ messages: [...chatOf().messages,
    { role: "assistant", content: textOf(f), tool_calls: [{ id: use.id, type: "function", function: { name: "psalm", arguments: JSON.stringify(use.input) } }] },
    { role: "tool", tool_call_id: use.id, content: "The LORD is my shepherd." }] }));
  check(textOf(t2) === want2.content, "turn 2 answers as the chat completion with that history", [t2.content, want2]);
  check(t2.usage.cache_read_input_tokens > f.usage.input_tokens + f.usage.cache_read_input_tokens,
        "turn 2 is served from the cache past turn 1's call", [t2.usage, f.usage]);

  // 4. thinking disabled is the chat completion without thinking; a stop sequence is reported
  const off = await c.messages.create({ ...claudeCode, thinking: { type: "disabled" } });
  check(textOf(off) === (await chat(kjv, chatOf({ chat_template_kwargs: { enable_thinking: false } }))).content, "thinking disabled", off.content);
  const word = textOf(whole).split(" ")[2];
  const stopped = await c.messages.create({ ...claudeCode, stop_sequences: ["@@", word] });
  check(stopped.stop_reason === "stop_sequence" && stopped.stop_sequence === word && textOf(whole).startsWith(textOf(stopped)) &&
        !textOf(stopped).includes(word), `stop_sequences: stopped at '${word}'`, stopped);

  // a final assistant message is a prefill: the reply continues it, as the greedy reply that
  // began with it goes on (chat's continue_final_message the same)
  const plain = await chat(kjv, { messages: [{ role: "user", content: question }], temperature: 0, max_tokens: 24, chat_template_kwargs: { enable_thinking: false } });
  const head = plain.content.split(" ").slice(0, 2).join(" ");
  const prefill = { model: "kjv", max_tokens: 12, temperature: 0, messages: [{ role: "user", content: question }, { role: "assistant", content: head }] };
  const pre = await c.messages.create(prefill), preS = await c.messages.stream(prefill).finalMessage();
  const preC = await chat(kjv, { ...prefill, continue_final_message: true });
  check(head.length > 0 && textOf(pre).length > 0 && plain.content.startsWith(head + textOf(pre)) && blocks(preS) === blocks(pre) && preC.content === textOf(pre),
        `a prefill ('${head}') is continued`, [plain.content, pre.content, preC]);

  // 5. thinking that is there (q35-rand-tiny): a thinking block whose signature is its text;
  // display omitted keeps the text in the signature only; handed back either way, it is the
  // assistant turn's reasoning
  c = client(tiny);
  const tq = { model: "tiny", max_tokens: 12, temperature: 0, messages: [{ role: "user", content: question }] };
  const tw = await c.messages.create(tq), tt = tw.content.find(b => b.type === "thinking");
  const tc = await chat(tiny, { messages: tq.messages, temperature: 0, max_tokens: 12 });
  check(tt && tt.thinking.length > 0 && tt.thinking === tc.reasoning_content.replace(/\n+$/, "") && tt.signature === tt.thinking,
        "thinking: the chat completion's reasoning, signed with itself", [tw.content, tc]);
  const ts = await c.messages.stream(tq).finalMessage();
  check(blocks(ts) === blocks(tw), "thinking streamed: the same block", [ts.content, tw.content]);
  const om = await c.messages.create({ ...tq, thinking: { type: "enabled", budget_tokens: 1000, display: "omitted" } });
  const ot = om.content.find(b => b.type === "thinking");
  check(ot && ot.thinking === "" && ot.signature === tt.thinking, "display omitted: the thinking in the signature only", om.content);
  const back = th => ({ ...tq, messages: [{ role: "user", content: question }, { role: "assistant", content: [th, { type: "text", text: "Amen." }] },
                                          { role: "user", content: "And Moses?" }] });
  const b1 = await c.messages.create(back(tt)), b2 = await c.messages.create(back(ot));
  const bc = await chat(tiny, { temperature: 0, max_tokens: 12, messages: [{ role: "user", content: question },
    { role: "assistant", content: "Amen.", reasoning_content: tt.thinking }, { role: "user", content: "And Moses?" }] });
  check(b1.content.find(b => b.type === "thinking").thinking === bc.reasoning_content.replace(/\n+$/, "") && blocks(b2) === blocks(b1),
        "a thinking block handed back is its turn's reasoning, by text or by signature", [b1.content, b2.content, bc]);
  const budget = await c.messages.create({ ...tq, max_tokens: 24, thinking: { type: "enabled", budget_tokens: 5 } });
  const bw = await chat(tiny, { ...tq, messages: tq.messages, max_tokens: 24, thinking_budget: 5 });
  check(textOf(budget) === bw.content && budget.content.find(b => b.type === "thinking").thinking === bw.reasoning_content.replace(/\n+$/, ""),
        "budget_tokens: chat's thinking_budget", [budget.content, bw]);

  const models = await c.models.list();
  check(models.data.length === 1 && models.data[0].id.length > 0 && models.data[0].type === "model", "models.list", models.data);

  // 6. what is not done is refused by name, in Anthropic's error shape
  const bad = [
    [{ ...tq, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "" } }] }] }, "messages"],
    [{ ...tq, messages: [{ role: "assistant", content: [{ type: "redacted_thinking", data: "x" }] }, { role: "user", content: "hi" }] }, "messages"],
    [{ ...tq, thinking: { type: "sometimes" } }, "thinking"], [{ ...tq, output_config: { effort: "extreme" } }, "output_config"],
    [{ ...tq, context_management: { edits: [{ type: "clear_tool_uses_20250919" }] } }, "context_management"],
    [{ ...tq, tool_choice: { type: "tool" } }, "tool_choice"], [{ ...tq, tools: [{ name: "x" }] }, "tools"],
    [{ ...tq, frobnicate: 1 }, "frobnicate"], [{ ...tq, messages: [] }, "messages"],
  ];
  for (const [body, param] of bad) {
    const r = await raw(tiny, "/v1/messages", body);
    check(r.status === 400 && r.body.type === "error" && r.body.error.type === "invalid_request_error" && r.body.error.param === param,
          `refused, naming '${param}': ${JSON.stringify(body).slice(70, 150)}`, r);
  }
  try { await c.messages.create({ ...tq, thinking: { type: "sometimes" } }); check(false, "the SDK sees a 400"); }
  catch (e) { check(e.status === 400 && /thinking/.test(e.message), "the SDK reads the error", e.message); }

  console.log(`agent-messages: ${pass} passed, ${fail} failed`);
  process.exit(fail ? 1 : 0);
})().catch(e => { console.log("FAIL", e.stack); console.log(`agent-messages: ${pass} passed, ${fail + 1} failed`); process.exit(1); });
