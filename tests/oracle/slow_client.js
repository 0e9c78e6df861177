// A client too slow for `qhx serve --timeout`: prints the seconds from connecting until the
// server closed the connection (or "open" if it was still open after LIMIT seconds).
//   node slow_client.js PORT headers|body|idle LIMIT
//   headers: sends a request line, then a header line every 0.3 s, never ending the headers
//   body:    sends whole headers promising 100 bytes of body, then a byte every 0.3 s
//   idle:    one whole request, its reply read, then nothing (a kept-alive connection)
const net = require("net");
const [port, mode, limit] = [Number(process.argv[2]), process.argv[3], Number(process.argv[4])];
const t0 = performance.now();
const s = net.connect(port, "127.0.0.1");
let timer = null, got = "";
const done = (what) => { clearInterval(timer); console.log(what); process.exit(0); };
s.on("data", (d) => (got += d));
s.on("close", () => done(((performance.now() - t0) / 1000).toFixed(2) + (mode === "idle" && !got.startsWith("HTTP/1.1 200") ? " no reply" : "")));
s.on("error", () => {});
setTimeout(() => done("open"), limit * 1000);
s.on("connect", () => {
  if (mode === "headers") {
    s.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
    timer = setInterval(() => s.write("X-Slow: 1\r\n"), 300);
  } else if (mode === "body") {
    s.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{");
    timer = setInterval(() => s.write(" "), 300);
  } else {
    s.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  }
});
