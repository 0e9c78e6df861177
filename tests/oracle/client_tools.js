// Requests that carry tools, as real clients build them: the AI SDK (chat-completions provider and
// its default, the Responses API) and LangChain's bindTools, against `qhx serve` on q35-kjv, which
// answers in text: each request is accepted and its reply is text with no calls (the parser's
// calls are tested on recorded texts in tests/test_tool_calls.c). node client_tools.js BASE_URL
const { createOpenAI } = require("@ai-sdk/openai");
const { generateText, tool } = require("ai");
const { ChatOpenAI } = require("@langchain/openai");
const { z } = require("zod");
const base = process.argv[2];
let pass = 0, fail = 0;
const check = (cond, what, detail) => {
  if (cond) { pass++; console.log("ok", what); } else { fail++; console.log("FAIL", what, detail === undefined ? "" : JSON.stringify(detail)); }
};

async function main() {
  const openai = createOpenAI({ baseURL: base + "/v1", apiKey: "none" });
  const weather = tool({ description: "The weather in a city", inputSchema: z.object({ city: z.string() }), execute: async () => "sunny" });
  for (const [name, model] of [["chat", openai.chat("kjv")], ["responses", openai("kjv")]]) {
    const t = await generateText({ model, prompt: "Who is the LORD?", tools: { weather }, temperature: 0, maxOutputTokens: 16, maxRetries: 0 });
    check(t.toolCalls.length === 0 && t.text.length > 0, `ai-sdk (${name}): generateText with a tool`, [t.finishReason, t.text.slice(0, 40)]);
  }
  const lc = new ChatOpenAI({ model: "kjv", apiKey: "none", configuration: { baseURL: base + "/v1" }, maxRetries: 0, maxTokens: 16 });
  const bound = lc.bindTools([{ type: "function", function: { name: "weather", description: "The weather in a city",
                                 parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }]);
  const lt = await bound.invoke("Who is the LORD?");
  check(Array.isArray(lt.tool_calls) && lt.tool_calls.length === 0 && typeof lt.content === "string", "langchain: bindTools", [lt.content.slice(0, 40)]);
  console.log(`tool-clients: ${pass} passed, ${fail} failed`);
  process.exit(fail ? 1 : 0);
}
main().catch((e) => { console.log("FAIL exception", e.stack || e); console.log(`tool-clients: ${pass} passed, ${fail + 1} failed`); process.exit(1); });
