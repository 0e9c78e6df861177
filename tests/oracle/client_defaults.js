// Three real clients with their defaults (no max_tokens) against `qhx serve` on a forged bundle:
// the official openai client, LangChain (@langchain/openai) and the Vercel AI SDK (@ai-sdk/openai,
// chat-completions provider, and its default provider on the Responses API).
// node client_defaults.js BASE_URL CONTEXT N_PREDICT
// CONTEXT: the bundle's positions; N_PREDICT: the server's -n. Prints "ok"/"FAIL" lines and a tally.
const OpenAI = require("openai");
const { ChatOpenAI } = require("@langchain/openai");
const { createOpenAI } = require("@ai-sdk/openai");
const { generateText, streamText } = require("ai");
const [base, ctxArg, npredArg] = process.argv.slice(2);
const ctx = Number(ctxArg), npred = Number(npredArg);
const slow = Math.max(1, Number(process.env.QHX_SLOW) || 1);
let pass = 0, fail = 0;
const check = (cond, what, detail) => {
  if (cond) { pass++; console.log("ok", what); } else { fail++; console.log("FAIL", what, detail === undefined ? "" : JSON.stringify(detail)); }
};
const messages = [{ role: "user", content: "Who made the heaven and the earth?" }];

// A reply without max_tokens runs to an end of turn or to min(context left, -n): "length" exactly there.
const bounded = (u, finish) => {
  const cap = Math.min(ctx - u.prompt_tokens, npred);
  return u.completion_tokens >= 1 && u.completion_tokens <= cap && (finish === "length") === (u.completion_tokens === cap);
};

async function main() {
  const client = new OpenAI({ baseURL: base + "/v1", apiKey: "none", maxRetries: 0, timeout: 120000 * slow });

  // openai: a chat request as the client sends it by default
  const r = await client.chat.completions.create({ model: "kjv", messages });
  check(typeof r.choices[0].message.content === "string" && bounded(r.usage, r.choices[0].finish_reason),
        "openai: chat without max_tokens is answered, bounded by the context", [r.usage, r.choices[0].finish_reason]);
  // the same with a greedy sampler: the reply runs to the context's end or an end of turn
  const g = await client.chat.completions.create({ model: "kjv", messages, temperature: 0 });
  check(bounded(g.usage, g.choices[0].finish_reason), "openai: greedy chat without max_tokens", g.usage);

  // a max_tokens beyond what is left is clamped, finishing with "length" where the context ends
  const big = await client.completions.create({ model: "kjv", prompt: "And God said", max_tokens: 1000000, temperature: 0 });
  const left = Math.min(ctx - big.usage.prompt_tokens, npred);
  // (greedy runs to the end here; an end of turn before it would be "stop" with fewer tokens)
  check(bounded(big.usage, big.choices[0].finish_reason) && big.usage.completion_tokens === left,
        `openai: max_tokens 1000000 clamped to the ${left} tokens left, finish_reason length`, [big.usage, big.choices[0].finish_reason]);
  // a completion without max_tokens: the same rule (llama-server's; OpenAI's legacy 16 would cut clients short)
  const c = await client.completions.create({ model: "kjv", prompt: "And God said", temperature: 0 });
  check(c.choices[0].text === big.choices[0].text && c.usage.completion_tokens === left,
        "openai: completion without max_tokens runs as far as the clamped one", c.usage);
  // streamed, the default way: the same text
  const st = await client.completions.create({ model: "kjv", prompt: "And God said", temperature: 0, stream: true });
  let text = "", finish = null;
  for await (const ch of st) for (const ch0 of ch.choices) { text += ch0.text || ""; if (ch0.finish_reason) finish = ch0.finish_reason; }
  check(text === c.choices[0].text && finish === "length", "openai: streamed completion without max_tokens", [finish, text.length]);

  // LangChain's ChatOpenAI with its defaults (no maxTokens)
  const lc = new ChatOpenAI({ model: "kjv", apiKey: "none", configuration: { baseURL: base + "/v1" }, maxRetries: 0 });
  // (a sampled reply may end its turn at once: then it says so, "stop", else it holds text)
  const lr = await lc.invoke("Who made the heaven and the earth?");
  const lu = lr.usage_metadata || {}, lf = (lr.response_metadata || {}).finish_reason;
  check(typeof lr.content === "string" && Number.isInteger(lu.output_tokens) && ["stop", "length"].includes(lf) &&
        (lr.content.length > 0 || lf === "stop"), "langchain: invoke with defaults", [lr.content.slice(0, 80), lf, lu]);
  let lcText = "", lcAll = null;
  for await (const ch of await lc.stream("And God said")) lcText += ch.content, lcAll = lcAll ? lcAll.concat(ch) : ch;
  const lsu = (lcAll && lcAll.usage_metadata) || {}, lsf = lcAll && lcAll.response_metadata.finish_reason;
  check(Number.isInteger(lsu.output_tokens) && ["stop", "length"].includes(lsf) && (lcText.length > 0 || lsf === "stop"),
        "langchain: stream with defaults", [lcText.slice(0, 80), lsf, lsu]);

  // The AI SDK's OpenAI provider in chat-completions mode, defaults
  const openai = createOpenAI({ baseURL: base + "/v1", apiKey: "none" });
  const gt = await generateText({ model: openai.chat("kjv"), prompt: "Who made the heaven and the earth?", maxRetries: 0 });
  check(typeof gt.text === "string" && gt.usage.outputTokens >= 1 && ["stop", "length"].includes(gt.finishReason),
        "ai-sdk: generateText with defaults", [gt.finishReason, gt.usage]);
  const sr = streamText({ model: openai.chat("kjv"), prompt: "And God said", temperature: 0, maxRetries: 0 });
  let sText = "";
  for await (const part of sr.textStream) sText += part;
  check(sText.length > 0 && (await sr.finishReason) !== "error", "ai-sdk: streamText with defaults", [await sr.finishReason, sText.slice(0, 80)]);

  // The Responses API (POST /v1/responses), which the AI SDK's default OpenAI provider calls: the
  // greedy answer is the chat endpoint's, whole and streamed, through the SDK and the openai client
  const want = (await client.chat.completions.create({ model: "kjv", messages: [{ role: "user", content: "Who is the LORD?" }],
                                                      temperature: 0, max_tokens: 24 })).choices[0].message.content;
  const rg = await generateText({ model: openai("kjv"), prompt: "Who is the LORD?", temperature: 0, maxOutputTokens: 24, maxRetries: 0 });
  check(rg.text === want && rg.usage.outputTokens === 24 && rg.finishReason === "length", "ai-sdk (responses): generateText",
        [rg.text.slice(0, 60), want.slice(0, 60), rg.finishReason, rg.usage]);
  const rs = streamText({ model: openai("kjv"), prompt: "Who is the LORD?", temperature: 0, maxOutputTokens: 24, maxRetries: 0 });
  let rText = "";
  for await (const part of rs.textStream) rText += part;
  check(rText === want && (await rs.finishReason) === "length", "ai-sdk (responses): streamText", [rText.slice(0, 60), await rs.finishReason]);
  const rd = await generateText({ model: openai("kjv"), prompt: "Who made the heaven and the earth?", maxRetries: 0 });
  check(rd.usage.outputTokens >= 1 && ["stop", "length"].includes(rd.finishReason), "ai-sdk (responses): defaults", [rd.finishReason, rd.usage]);
  const oc = await client.responses.create({ model: "kjv", input: "Who is the LORD?", temperature: 0, max_output_tokens: 24 });
  check(oc.output_text === want && oc.status === "incomplete", "openai: responses.create", [oc.output_text.slice(0, 60), oc.status]);
  let ocText = "", last = null;
  for await (const ev of await client.responses.create({ model: "kjv", input: "Who is the LORD?", temperature: 0, max_output_tokens: 24, stream: true })) {
    if (ev.type === "response.output_text.delta") ocText += ev.delta;
    last = ev.type;
  }
  check(ocText === want && last === "response.incomplete", "openai: streamed responses", [ocText.slice(0, 60), last]);

  console.log(`clients: ${pass} passed, ${fail} failed`);
  process.exit(fail ? 1 : 0);
}
main().catch((e) => { console.log("FAIL exception", e.stack || e); console.log(`clients: ${pass} passed, ${fail + 1} failed`); process.exit(1); });
