// The official OpenAI client against a running `qhx serve`: node openai_client.js BASE_URL GREEDY_JSON
// GREEDY_JSON is `qhx generate --json` output for the completion prompt below (temperature 0, 24
// tokens): the server must give the same text. Prints "ok ..." / "FAIL ..." lines and the tally.
const OpenAI = require("openai");
const [base, greedyFile] = process.argv.slice(2);
const slow = Math.max(1, Number(process.env.QHX_SLOW) || 1); // under memcheck (tests/lib.sh)
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "none", maxRetries: 0, timeout: 120000 * slow });
let pass = 0, fail = 0;
const check = (cond, what, detail) => {
  if (cond) { pass++; console.log("ok", what); } else { fail++; console.log("FAIL", what, detail === undefined ? "" : JSON.stringify(detail)); }
};

const chatReq = (content, seed, extra = {}) => ({
  model: "q35-kjv", messages: [{ role: "system", content: "Answer from the scriptures." }, { role: "user", content }],
  max_tokens: 40, temperature: 0.9, top_p: 0.95, seed, ...extra,
});

async function streamChat(req) {
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let content = "", reasoning = "", finish = null, usage = null, role = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta.role) role = c.delta.role;
      content += c.delta.content || "";
      reasoning += c.delta.reasoning_content || "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { content, reasoning, finish, usage, role };
}

async function main() {
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "q35-kjv", "models.list names the model", models.data);

  // completions, greedy: the same text as qhx generate
  const greedy = JSON.parse(require("fs").readFileSync(greedyFile, "utf8"));
  const cmpl = await client.completions.create({ model: "q35-kjv", prompt: "And God said", max_tokens: 24, temperature: 0 });
  check(cmpl.choices[0].text === greedy.text, "greedy completion equals qhx generate", [cmpl.choices[0].text, greedy.text]);
  check(cmpl.usage.prompt_tokens === greedy.prompt_tokens && cmpl.usage.completion_tokens === greedy.completion_tokens &&
        cmpl.usage.total_tokens === cmpl.usage.prompt_tokens + cmpl.usage.completion_tokens, "completion usage counts", cmpl.usage);
  check(cmpl.choices[0].finish_reason === greedy.finish_reason, "completion finish_reason", cmpl.choices[0].finish_reason);

  // completions, streaming: the pieces add up to the non-streaming text
  const cs = await client.completions.create({ model: "q35-kjv", prompt: "And God said", max_tokens: 24, temperature: 0, stream: true });
  let text = "";
  for await (const ch of cs) text += ch.choices[0] ? ch.choices[0].text : "";
  check(text === greedy.text, "streamed completion equals the non-streamed one", [text, greedy.text]);

  // chat: non-streaming and streaming with the same seed agree
  const req = chatReq("Who made the heaven and the earth?", 11);
  const chat = await client.chat.completions.create(req);
  const msg = chat.choices[0].message;
  check(chat.object === "chat.completion" && msg.role === "assistant" && typeof msg.content === "string", "chat completion shape", chat);
  check(chat.usage.completion_tokens > 0 && chat.usage.completion_tokens <= 40 && chat.usage.prompt_tokens > 10, "chat usage", chat.usage);
  const st = await streamChat(req);
  check(st.role === "assistant", "stream opens with the assistant role", st.role);
  check(st.content === msg.content && st.reasoning.replace(/\n+$/, "") === (msg.reasoning_content || ""),
        "streamed chat equals the non-streamed reply (same seed)", [st.content, msg.content]);
  check(st.usage && st.usage.completion_tokens === chat.usage.completion_tokens && st.finish === chat.choices[0].finish_reason,
        "streamed usage and finish_reason", [st.usage, st.finish]);

  // a different seed gives a different reply (sampling is on), the same seed the same one
  const other = await client.chat.completions.create(chatReq("Who made the heaven and the earth?", 12));
  check(other.choices[0].message.content !== msg.content, "another seed, another reply");
  const again = await client.chat.completions.create(req);
  check(again.choices[0].message.content === msg.content, "same seed, same reply");

  // stop strings never reach the client
  const stopped = await client.completions.create({ model: "q35-kjv", prompt: "And God said", max_tokens: 24, temperature: 0, stop: ["the"] });
  const cut = greedy.text.indexOf("the");
  check(cut >= 0 && stopped.choices[0].text === greedy.text.slice(0, cut) && stopped.choices[0].finish_reason === "stop",
        "a stop string ends the text before it", stopped.choices[0]);

  // a bad request is a 400 the client understands
  try {
    await client.chat.completions.create({ model: "q35-kjv", messages: "hello" });
    check(false, "bad request rejected");
  } catch (e) {
    check(e.status === 400 && e.error && /messages/.test(e.error.message) && e.error.type === "invalid_request_error",
          "bad request: 400 invalid_request_error naming messages", [e.status, e.error]);
  }
  try {
    await client.completions.create({ model: "q35-kjv", prompt: "x", temperature: "hot" });
    check(false, "wrong type rejected");
  } catch (e) {
    check(e.status === 400 && e.error.param === "temperature", "wrong type: 400 naming temperature", [e.status, e.error]);
  }

  // 4 concurrent streams equal the same requests run one at a time
  const prompts = ["Who is the LORD?", "What did Moses say?", "Where is Jerusalem?", "Why did Cain slay Abel?"];
  const serial = [];
  for (let i = 0; i < 4; i++) serial.push(await streamChat(chatReq(prompts[i], 100 + i, { max_tokens: 32 })));
  const t0 = Date.now();
  const conc = await Promise.all(prompts.map((p, i) => streamChat(chatReq(p, 100 + i, { max_tokens: 32 }))));
  for (let i = 0; i < 4; i++)
    check(conc[i].content === serial[i].content && conc[i].reasoning === serial[i].reasoning && conc[i].usage.completion_tokens === serial[i].usage.completion_tokens,
          `concurrent stream ${i} equals its serial run`, [conc[i], serial[i]]);
  console.log(`concurrent: 4 streams in ${Date.now() - t0} ms`);

  console.log(`openai: ${pass} passed, ${fail} failed`);
  process.exit(fail ? 1 : 0);
}
main().catch((e) => { console.log("FAIL exception", e.stack || e); console.log(`openai: ${pass} passed, ${fail + 1} failed`); process.exit(1); });
