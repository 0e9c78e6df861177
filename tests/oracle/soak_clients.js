// The soak's clients (tests/soak.sh): node soak_clients.js BASE_URL CLIENTS SECONDS
// Each client loops until the time is up over a mix: greedy and seeded chats sharing a system
// prompt (streamed and not), completions, a hang-up mid-stream, a hang-up mid-prefill (a long
// prompt), malformed requests. Every greedy or seeded reply must equal the same request's reply
// computed alone at the start; a malformed one must be a 4xx. Prints counts and the tally.
const [base, clientsArg, secondsArg] = process.argv.slice(2);
const clients = Number(clientsArg), seconds = Number(secondsArg);
const long = require("fs").readFileSync(__dirname + "/../data/corpora/kjv-dev.txt", "utf8").slice(0, 12000);
const system = "Answer from the scriptures, briefly.";
const questions = ["Who made the earth?", "Who was Moses?", "What is love?", "Where is Zion?", "Who slew Goliath?", "What did Noah build?"];
let pass = 0, fail = 0;
const counts = {};
const bad = (what, detail) => { fail++; if (fail <= 20) console.log("FAIL", what, JSON.stringify(detail).slice(0, 400)); };

const reqs = [];
for (let i = 0; i < questions.length; i++) {
  const seeded = i % 2 === 1;
  reqs.push({ path: "chat/completions", body: { messages: [{ role: "system", content: system }, { role: "user", content: questions[i] }],
    max_tokens: 24 + 4 * i, temperature: seeded ? 0.8 : 0, seed: 7 + i } });
  reqs.push({ path: "completions", body: { prompt: questions[i], max_tokens: 16 + 2 * i, temperature: seeded ? 0.7 : 0, seed: 3 + i } });
}
// a full queue answers 503 with Retry-After: wait and send again, as clients do (counted)
async function post(path, body, signal) {
  for (;;) {
    const r = await fetch(`${base}/v1/${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal });
    if (r.status !== 503) return r;
    counts.busy_503 = (counts.busy_503 || 0) + 1;
    if (r.headers.get("retry-after") !== "1") bad("503 without Retry-After: 1", r.headers.get("retry-after"));
    await r.text();
    await new Promise((res) => setTimeout(res, 200 + Math.random() * 300));
  }
}
const answer = (path, j) => (path === "completions" ? j.choices[0].text : (j.choices[0].message.reasoning_content || "") + "|" + j.choices[0].message.content);
async function streamed(path, body) {
  const r = await post(path, { ...body, stream: true });
  let s = "", reasoning = "", content = "";
  for await (const chunk of r.body) s += Buffer.from(chunk).toString();
  for (const line of s.split("\n")) {
    if (!line.startsWith("data: {")) continue;
    const ev = JSON.parse(line.slice(6));
    for (const c of ev.choices) {
      if (path === "completions") content += c.text || "";
      else { reasoning += c.delta.reasoning_content || ""; content += c.delta.content || ""; }
    }
  }
  return path === "completions" ? content : reasoning.replace(/\n+$/, "") + "|" + content;
}

async function client(k, until, solo) {
  for (let n = 0; Date.now() < until; n++) {
    const pick = (k * 7 + n * 13) % 20;
    try {
      if (pick < 8) { // plain
        const i = (k + n) % reqs.length, r = await post(reqs[i].path, reqs[i].body), j = await r.json();
        const got = r.status === 200 ? answer(reqs[i].path, j) : null;
        if (got === solo[i]) pass++; else bad("plain reply differs from solo", [i, r.status, got, solo[i]]);
        counts.plain = (counts.plain || 0) + 1;
      } else if (pick < 14) { // streamed
        const i = (k + 3 * n) % reqs.length, got = await streamed(reqs[i].path, reqs[i].body);
        if (got === solo[i]) pass++; else bad("streamed reply differs from solo", [i, got, solo[i]]);
        counts.streamed = (counts.streamed || 0) + 1;
      } else if (pick < 16) { // hang up mid-stream
        const ac = new AbortController(), r = await post("completions", { prompt: "And", max_tokens: 400, temperature: 1, stream: true }, ac.signal);
        const reader = r.body.getReader();
        await reader.read(); await reader.read();
        ac.abort();
        pass++, counts.hangup_stream = (counts.hangup_stream || 0) + 1;
      } else if (pick < 18) { // hang up mid-prefill
        const ac = new AbortController();
        setTimeout(() => ac.abort(), 50 + (n % 5) * 40);
        await post("completions", { prompt: long, max_tokens: 4, stream: true }, ac.signal).then((r) => r.text()).catch(() => {});
        pass++, counts.hangup_prefill = (counts.hangup_prefill || 0) + 1;
      } else { // malformed
        const bodies = ['{"prompt":', '{"messages":{}}', '{"prompt":"x","temperature":"hot"}', '{"prompt":"x","frobnicate":1}'];
        const r = await fetch(`${base}/v1/completions`, { method: "POST", body: bodies[n % bodies.length] });
        await r.text();
        if (r.status >= 400 && r.status < 500) pass++; else bad("malformed request answered", r.status);
        counts.malformed = (counts.malformed || 0) + 1;
      }
    } catch (e) {
      if (e.name !== "AbortError") bad("client error", String(e));
    }
  }
}

(async () => {
  const solo = [];
  for (const q of reqs) { const r = await post(q.path, q.body); solo.push(answer(q.path, await r.json())); }
  const until = Date.now() + seconds * 1000;
  await Promise.all([...Array(clients).keys()].map((k) => client(k, until, solo)));
  console.log("  requests: " + Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(", "));
  console.log(`soak: ${pass} passed, ${fail} failed`);
  process.exit(fail ? 1 : 0);
})();
