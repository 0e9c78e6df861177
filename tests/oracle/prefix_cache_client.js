// The prefix cache through the official OpenAI client: node prefix_cache_client.js CACHED_URL COLD_URL TINY_URL
// Three servers on one model: CACHED (default cache), COLD (--cache-mb 0) and TINY (a budget that
// holds a snapshot or two, so it evicts all the time). Every answer of the cached servers must equal
// the cold server's exactly (text, finish reason, token counts); usage.prompt_tokens_details
// .cached_tokens says how much was resumed. Prints "ok ..." / "FAIL ..." lines and the tally.
const OpenAI = require("openai");
const [cachedUrl, coldUrl, tinyUrl] = process.argv.slice(2);
const slow = Math.max(1, Number(process.env.QHX_SLOW) || 1);
const mk = (u) => new OpenAI({ baseURL: u + "/v1", apiKey: "none", maxRetries: 0, timeout: 120000 * slow });
const cached = mk(cachedUrl), cold = mk(coldUrl), tiny = mk(tinyUrl);
let pass = 0, fail = 0;
const check = (cond, what, detail) => {
  if (cond) { pass++; console.log("ok", what); } else { fail++; console.log("FAIL", what, detail === undefined ? "" : JSON.stringify(detail)); }
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms * slow));

const system = "In the beginning God created the heaven and the earth. And the earth was without form, and void; " +
  "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.";
const req = (messages, extra = {}) => ({
  model: "q35-kjv", messages: [{ role: "system", content: system }, ...messages], max_tokens: 32, temperature: 0,
  stop: [","], chat_template_kwargs: { enable_thinking: false }, ...extra,
});
const cachedTokens = (r) => (r.usage.prompt_tokens_details || {}).cached_tokens;

async function streamed(client, body) {
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let content = "", finish = null, usage = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) { content += c.delta.content || ""; if (c.finish_reason) finish = c.finish_reason; }
  }
  return { choices: [{ message: { content }, finish_reason: finish }], usage };
}

// the same request to a cached server and the cold one: the same answer
async function both(client, body, what, stream = false) {
  const ask = (c) => (stream ? streamed(c, body) : c.chat.completions.create(body));
  const [a, b] = [await ask(client), await ask(cold)];
  const same = a.choices[0].message.content === b.choices[0].message.content &&
    a.choices[0].finish_reason === b.choices[0].finish_reason && a.usage.prompt_tokens === b.usage.prompt_tokens &&
    a.usage.completion_tokens === b.usage.completion_tokens;
  check(same, `${what}: the answer equals the uncached one`, [a.choices[0].message.content, b.choices[0].message.content]);
  check(cachedTokens(b) === 0, `${what}: the cold server resumed nothing`, b.usage);
  return a;
}

async function conversation(client, first, second, what) {
  const m1 = [{ role: "user", content: first }];
  const r1 = await both(client, req(m1), `${what} turn 1`);
  await sleep(300); // the reply's snapshot is taken after the answer is sent
  const m2 = [...m1, { role: "assistant", content: r1.choices[0].message.content }, { role: "user", content: second }];
  const r2 = await both(client, req(m2), `${what} turn 2`);
  return [r1, r2];
}

async function main() {
  // one conversation, turn by turn: turn 2 resumes past turn 1's whole prompt (from the reply's snapshot)
  const [a1, a2] = await conversation(cached, "And God said", "Then what", "conversation A");
  check(cachedTokens(a2) > a1.usage.prompt_tokens && cachedTokens(a2) < a2.usage.prompt_tokens,
    "turn 2 resumed past turn 1's prompt, from the end of its reply", [cachedTokens(a2), a1.usage.prompt_tokens, a2.usage.prompt_tokens]);
  // a second conversation shares the system prompt's snapshot
  const [b1] = await conversation(cached, "Who made the light", "And the waters", "conversation B");
  const sysTokens = b1.usage.prompt_tokens - 30; // the system message alone, well past half the prompt
  check(cachedTokens(b1) >= sysTokens && cachedTokens(b1) < b1.usage.prompt_tokens,
    "another conversation resumes from the shared system prompt", [cachedTokens(b1), b1.usage.prompt_tokens]);
  // two branches from one history
  const base = [{ role: "user", content: "And God said" }, { role: "assistant", content: a1.choices[0].message.content }];
  for (const [i, q] of ["Let there be light", "And the evening"].entries()) {
    const r = await both(cached, req([...base, { role: "user", content: q }]), `branch ${i + 1}`);
    check(cachedTokens(r) > a1.usage.prompt_tokens, `branch ${i + 1} resumed from the shared history`, r.usage);
  }
  // the same prompt again resumes at its user message (a turn is evaluated whole); streamed, usage in the last chunk
  const again = await both(cached, req([{ role: "user", content: "And God said" }]), "a repeated prompt, streamed", true);
  check(cachedTokens(again) === cachedTokens(b1), "a repeated prompt resumes at its user message", [again.usage, b1.usage]);
  // completions (no chat markers): a repeat resumes all but the last token; a longer prompt, nothing
  const p1 = "And God saw the light, that it was good: and God divided the light from the darkness.";
  for (const [what, prompt, resumed] of [["completion", p1, 0], ["a repeated completion", p1, -1], ["a longer completion", p1 + " And God called the light Day", 0]]) {
    const [x, y] = [await cached.completions.create({ model: "q35-kjv", prompt, max_tokens: 24, temperature: 0 }),
      await cold.completions.create({ model: "q35-kjv", prompt, max_tokens: 24, temperature: 0 })];
    check(x.choices[0].text === y.choices[0].text, `${what}: the answer equals the uncached one`, [x.choices[0].text, y.choices[0].text]);
    const want = resumed < 0 ? x.usage.prompt_tokens - 1 : resumed;
    check(cachedTokens(x) === want, `${what}: ${want} tokens resumed`, x.usage);
  }
  // four conversations at once on four slots, sharing the system prompt
  const qs = ["And the LORD spake", "Blessed is the man", "The LORD is my shepherd", "In my Father's house"];
  const got = await Promise.all(qs.map((q) => cached.chat.completions.create(req([{ role: "user", content: q }]))));
  const want = await Promise.all(qs.map((q) => cold.chat.completions.create(req([{ role: "user", content: q }]))));
  check(got.every((g, i) => g.choices[0].message.content === want[i].choices[0].message.content),
    "4 concurrent requests: answers equal the uncached ones", got.map((g) => g.choices[0].message.content));
  check(got.every((g) => cachedTokens(g) > 0), "4 concurrent requests all resumed from the system prompt", got.map(cachedTokens));
  // under a budget that holds almost nothing: evictions all the time, answers unchanged
  await conversation(tiny, "And God said", "Then what", "tiny budget A");
  await conversation(tiny, "Who made the light", "And the waters", "tiny budget B");
  await conversation(tiny, "The LORD is my shepherd", "I shall not want", "tiny budget C");
  await conversation(tiny, "Blessed is the man", "that walketh not", "tiny budget D");
  await conversation(tiny, "And God said", "Then what", "tiny budget A again");
  console.log(`prefix-cache: ${pass} passed, ${fail} failed`);
}
main().catch((e) => { console.log("FAIL prefix cache client:", e.message); console.log(`prefix-cache: ${pass} passed, ${fail + 1} failed`); });
