// Batched decode against solo runs: node batch_client.js BASE_URL
// For 1, 2, 4 and 8 concurrent requests (greedy and seeded, chat and completions, streamed and
// not, of different lengths so streams join and leave the batch mid-way), every reply must equal
// the same request sent alone, token for token. Prints "ok"/"FAIL" lines and a tally.
const OpenAI = require("openai");
const [base] = process.argv.slice(2);
const slow = Math.max(1, Number(process.env.QHX_SLOW) || 1);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: process.env.QHX_API_KEY || "none", maxRetries: 0, timeout: 300000 * slow });
let pass = 0, fail = 0;
const check = (cond, what, detail) => {
  if (cond) { pass++; console.log("ok", what); } else { fail++; console.log("FAIL", what, detail === undefined ? "" : JSON.stringify(detail)); }
};
const prompts = ["In the beginning", "And the LORD said unto Moses,", "Blessed are the poor in spirit", "Who made the earth?",
                 "And Jesus answered", "The LORD is my shepherd", "Let there be light", "Honour thy father"];
// request i: its kind by i, its length by i, so the batch changes size while it runs
function request(i) {
  const sampled = i % 2 === 1, chat = i % 3 !== 2, stream = i % 4 < 2;
  const common = { model: "m", max_tokens: 12 + 9 * i, temperature: sampled ? 0.9 : 0, top_p: sampled ? 0.95 : 1, seed: 1000 + i };
  return chat ? { chat: true, stream, body: { ...common, messages: [{ role: "user", content: prompts[i] }] } }
              : { chat: false, stream, body: { ...common, prompt: prompts[i] } };
}
async function run(r) {
  if (!r.stream) {
    const out = r.chat ? await client.chat.completions.create(r.body) : await client.completions.create(r.body);
    const c = out.choices[0];
    return { text: r.chat ? (c.message.reasoning_content || "") + "|" + c.message.content : c.text, n: out.usage.completion_tokens };
  }
  const st = r.chat ? await client.chat.completions.create({ ...r.body, stream: true, stream_options: { include_usage: true } })
                    : await client.completions.create({ ...r.body, stream: true, stream_options: { include_usage: true } });
  let reasoning = "", text = "", n = 0;
  for await (const ch of st) {
    if (ch.usage) n = ch.usage.completion_tokens;
    for (const c of ch.choices) {
      if (r.chat) { reasoning += c.delta.reasoning_content || ""; text += c.delta.content || ""; } else text += c.text || "";
    }
  }
  return { text: r.chat ? reasoning.replace(/\n+$/, "") + "|" + text : text, n };
}
async function main() {
  const solo = [];
  for (let i = 0; i < 8; i++) solo.push(await run(request(i)));
  for (const n of [1, 2, 4, 8]) {
    const t0 = Date.now();
    const got = await Promise.all([...Array(n).keys()].map((i) => run(request(i))));
    for (let i = 0; i < n; i++)
      check(got[i].text === solo[i].text && got[i].n === solo[i].n, `${n} concurrent: request ${i} equals its solo reply`, [got[i], solo[i]]);
    console.log(`  ${n} concurrent: ${got.reduce((a, g) => a + g.n, 0)} tokens in ${Date.now() - t0} ms`);
  }
  console.log(`batch: ${pass} passed, ${fail} failed`);
  process.exit(fail ? 1 : 0);
}
main().catch((e) => { console.log("FAIL exception", e.stack || e); console.log(`batch: ${pass} passed, ${fail + 1} failed`); process.exit(1); });
