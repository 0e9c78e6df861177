// Structured output and forced tool calls end to end, through real clients, against `qhx serve` on
// q35-kjv (a model that knows no JSON: every well-formed reply is the constraint's doing). Each reply
// is validated by an independent validator (ajv, or the client's own zod parse); a streamed reply
// assembles to the whole one; greedy and seeded replies are the same alone, repeated (the prefix
// cache hit) and among concurrent requests. node structured.js BASE_URL
const OpenAI = require("openai");
const Ajv = require("ajv");
const addFormats = require("ajv-formats");
const { createOpenAI } = require("@ai-sdk/openai");
const { generateObject, generateText, streamText, tool } = require("ai");
const { ChatOpenAI } = require("@langchain/openai");
const { z } = require("zod");
const base = process.argv[2];
let pass = 0, fail = 0;
const check = (cond, what, detail) => {
  if (cond) { pass++; console.log("ok", what); } else { fail++; console.log("FAIL", what, detail === undefined ? "" : JSON.stringify(detail)); }
};
const ajv = new Ajv({ strict: false });
addFormats(ajv);
const valid = (schema, text) => {
  try { const v = JSON.parse(text); return ajv.validate(schema, v) ? "" : ajv.errorsText(); } catch (e) { return "not JSON: " + e.message; }
};

const person = {
  type: "object",
  properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 120 },
                role: { enum: ["king", "prophet", "priest"] }, born: { type: "string", format: "date" } },
  required: ["name", "age", "role"], additionalProperties: false,
};
const tools = [
  { type: "function", function: { name: "weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 16 }, days: { type: "integer", minimum: 1, maximum: 7 } },
                  required: ["city", "days"] } } },
  { type: "function", function: { name: "alarm", description: "Sets an alarm",
    parameters: { type: "object", properties: { hour: { type: "integer", minimum: 0, maximum: 23 }, label: { type: "string", enum: ["wake", "pray"] } },
                  required: ["hour"] } } },
];
const messages = [{ role: "user", content: "Who was the first king of Israel?" }];

// the calls in a non-streamed reply, or assembled from a stream's deltas, as [name, arguments]
const callsOf = (msg) => (msg.tool_calls || []).map((c) => [c.function.name, c.function.arguments]);
const assemble = async (stream) => {
  let text = "", calls = [], finish = null;
  for await (const ch of stream) {
    const d = ch.choices[0]?.delta || {};
    if (d.content) text += d.content;
    for (const t of d.tool_calls || []) {
      calls[t.index] = calls[t.index] || ["", ""];
      if (t.function?.name) calls[t.index][0] += t.function.name;
      if (t.function?.arguments) calls[t.index][1] += t.function.arguments;
    }
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  }
  return { text, calls, finish };
};
const callsValid = (calls, only) => calls.length > 0 && calls.every(([name, args]) => {
  const t = tools.find((x) => x.function.name === name);
  return t && (!only || name === only) && valid(t.function.parameters, args) === "";
});

async function main() {
  const client = new OpenAI({ baseURL: base + "/v1", apiKey: "none", maxRetries: 0 });
  const fmt = { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } };
  // openai: json_schema, whole and streamed, greedy and seeded
  const req = { model: "kjv", messages, max_tokens: 200, temperature: 0, response_format: fmt };
  const r = await client.chat.completions.create(req);
  const text = r.choices[0].message.content;
  check(valid(person, text) === "" && r.choices[0].finish_reason === "stop", "openai: response_format json_schema validates", [valid(person, text), text]);
  const s = await assemble(await client.chat.completions.create({ ...req, stream: true }));
  check(s.text === text, "openai: the streamed json_schema reply is the whole one", [s.text, text]);
  const again = await client.chat.completions.create(req);
  check(again.choices[0].message.content === text, "openai: repeated (prefix cache) the same", again.choices[0].message.content);
  const seeded = { ...req, temperature: 0.9, seed: 11 };
  const sd = await client.chat.completions.create(seeded);
  check(valid(person, sd.choices[0].message.content) === "", "openai: a seeded json_schema reply validates", sd.choices[0].message.content);
  const both = await Promise.all([req, seeded, req, seeded].map((q) => client.chat.completions.create(q)));
  check(both[0].choices[0].message.content === text && both[2].choices[0].message.content === text &&
        both[1].choices[0].message.content === sd.choices[0].message.content && both[3].choices[0].message.content === sd.choices[0].message.content,
        "openai: 4 concurrent constrained requests equal their solo replies", both.map((b) => b.choices[0].message.content));
  const jo = await client.chat.completions.create({ ...req, response_format: { type: "json_object" } });
  let obj = null;
  try { obj = JSON.parse(jo.choices[0].message.content); } catch (e) { /* checked below */ }
  check(obj !== null && typeof obj === "object" && !Array.isArray(obj), "openai: response_format json_object is an object", jo.choices[0].message.content);
  // openai: forced tool calls
  const treq = { model: "kjv", messages, max_tokens: 200, temperature: 0, tools, tool_choice: "required" };
  // (this model, once it has called, calls again until max_tokens: a trained one ends its turn)
  const t = await client.chat.completions.create(treq);
  check(callsValid(callsOf(t.choices[0].message)), "openai: tool_choice required gives valid calls",
        [t.choices[0].finish_reason, callsOf(t.choices[0].message), t.choices[0].message.content]);
  const ts = await assemble(await client.chat.completions.create({ ...treq, stream: true }));
  check(JSON.stringify(ts.calls) === JSON.stringify(callsOf(t.choices[0].message)) && ts.finish === t.choices[0].finish_reason,
        "openai: streamed forced calls assemble to the whole reply's", [ts.calls, ts.finish]);
  const named = await client.chat.completions.create({ ...treq, tool_choice: { type: "function", function: { name: "alarm" } } });
  check(callsValid(callsOf(named.choices[0].message), "alarm") && callsOf(named.choices[0].message).length === 1,
        "openai: a named tool_choice calls that function once", callsOf(named.choices[0].message));
  const single = await client.chat.completions.create({ ...treq, parallel_tool_calls: false });
  check(callsOf(single.choices[0].message).length === 1 && callsValid(callsOf(single.choices[0].message)) && single.choices[0].finish_reason === "tool_calls",
        "openai: required with parallel_tool_calls false: one call", callsOf(single.choices[0].message));
  // openai: the Responses API's text.format
  const resp = await client.responses.create({ model: "kjv", input: "Who was the first king of Israel?", max_output_tokens: 200, temperature: 0,
                                               text: { format: { type: "json_schema", name: "person", schema: person, strict: true } } });
  check(valid(person, resp.output_text) === "", "openai: responses text.format json_schema validates", [valid(person, resp.output_text), resp.output_text]);

  // the AI SDK: generateObject with a zod schema (chat provider and the default Responses provider),
  // generateText and streamText with toolChoice 'required'
  const openai = createOpenAI({ baseURL: base + "/v1", apiKey: "none" });
  const zperson = z.object({ name: z.string().max(12), age: z.number().int().min(0).max(120), role: z.enum(["king", "prophet", "priest"]) });
  for (const [name, model] of [["chat", openai.chat("kjv")], ["responses", openai("kjv")]]) {
    const o = await generateObject({ model, schema: zperson, prompt: "Who was the first king of Israel?", temperature: 0, maxOutputTokens: 200, maxRetries: 0 });
    check(zperson.safeParse(o.object).success, `ai-sdk (${name}): generateObject with a zod schema`, o.object);
  }
  const weather = tool({ description: "The weather in a city", inputSchema: z.object({ city: z.string().max(16), days: z.number().int().min(1).max(7) }) });
  const one = { openai: { parallelToolCalls: false } };
  const g = await generateText({ model: openai.chat("kjv"), prompt: "Weather in Jerusalem?", tools: { weather }, toolChoice: "required",
                                 temperature: 0, maxOutputTokens: 200, maxRetries: 0, providerOptions: one });
  check(g.toolCalls.length > 0 && g.toolCalls.every((c) => c.toolName === "weather" && weather.inputSchema.safeParse(c.input).success),
        "ai-sdk: generateText with toolChoice required", g.toolCalls);
  const st = streamText({ model: openai.chat("kjv"), prompt: "Weather in Jerusalem?", tools: { weather }, toolChoice: "required",
                          temperature: 0, maxOutputTokens: 200, maxRetries: 0, providerOptions: one });
  const stCalls = await st.toolCalls;
  check(JSON.stringify(stCalls.map((c) => c.input)) === JSON.stringify(g.toolCalls.map((c) => c.input)), "ai-sdk: streamText with toolChoice required, the same calls",
        stCalls.map((c) => c.input));

  // LangChain: withStructuredOutput (its default method and jsonSchema), bindTools with a forced call
  const lc = new ChatOpenAI({ model: "kjv", apiKey: "none", configuration: { baseURL: base + "/v1" }, maxRetries: 0, maxTokens: 200, temperature: 0 });
  for (const method of [undefined, "jsonSchema"]) {
    const so = lc.withStructuredOutput(zperson, method ? { method, name: "person" } : { name: "person" });
    const v = await so.invoke("Who was the first king of Israel?");
    check(zperson.safeParse(v).success, `langchain: withStructuredOutput (${method || "default"})`, v);
  }
  const bound = lc.bindTools(tools, { tool_choice: "required" });
  const lt = await bound.invoke("Weather in Jerusalem?");
  check(lt.tool_calls.length > 0 && lt.tool_calls.every((c) => tools.some((x) => x.function.name === c.name && valid(x.function.parameters, JSON.stringify(c.args)) === "")),
        "langchain: bindTools with tool_choice required", lt.tool_calls);
  console.log(`structured: ${pass} passed, ${fail} failed`);
  process.exit(fail ? 1 : 0);
}
main().catch((e) => { console.log("FAIL exception", e.stack || e); console.log(`structured: ${pass} passed, ${fail + 1} failed`); process.exit(1); });
