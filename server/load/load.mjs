// Bounded loopback load: W writers append small JSON messages (one POST per
// message, each answered only once durable) to S streams for D seconds while
// R live SSE readers follow them. Prints one JSON line. Loopback only.
//   node load.mjs URL [writers=32] [streams=8] [seconds=5] [readers=8]
// Writers use node:http with a keep-alive agent (one socket per writer), not
// fetch: fetch cost ~475 µs of client CPU per POST, so on a 2-core machine the
// client, not the server, bounded the rate (~95 µs per POST with node:http).
import http from "node:http";
const [url, W = 32, S = 8, D = 5, R = 8] = process.argv.slice(2).map((v, i) => (i ? Number(v) : v));
if (!/^http:\/\/(127\.|localhost|\[::1\])/.test(url ?? "")) {
  console.error("usage: node load.mjs http://127.0.0.1:PORT [writers] [streams] [seconds] [readers] (loopback only)");
  process.exit(2);
}
const run = `load-${Date.now()}`;
const path = (s) => `${url}/v1/stream/${run}-${s}`;
for (let s = 0; s < S; s++) {
  const r = await fetch(path(s), { method: "PUT", headers: { "content-type": "application/json" } });
  if (r.status !== 201) throw new Error(`create ${r.status}`);
}
const stopAt = Date.now() + D * 1000;
const lat = [];
let errors = 0;
const payload = Buffer.from(JSON.stringify({ kind: "assistant/chunk", text: "x".repeat(160) }));
const agent = new http.Agent({ keepAlive: true, maxSockets: W });
function post(target) {
  return new Promise((resolve, reject) => {
    const req = http.request(target, {
      method: "POST", agent,
      headers: { "content-type": "application/json", "content-length": payload.length },
    }, (res) => {
      res.on("data", () => {});
      res.on("end", () => resolve(res.statusCode));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(payload);
  });
}
async function writer(w) {
  const target = path(w % S);
  while (Date.now() < stopAt) {
    const t0 = performance.now();
    let status = 0;
    try { status = await post(target); } catch { status = 0; }
    if (status === 204 || status === 200) lat.push(performance.now() - t0);
    else errors++;
  }
}
let received = 0;
const readers = [];
const controllers = [];
for (let i = 0; i < R; i++) {
  const c = new AbortController();
  controllers.push(c);
  readers.push((async () => {
    try {
      const r = await fetch(`${path(i % S)}?offset=-1&live=sse`, { signal: c.signal });
      for await (const chunk of r.body) received += chunk.length;
    } catch {}
  })());
}
const t0 = Date.now();
await Promise.all(Array.from({ length: W }, (_, w) => writer(w)));
const secs = (Date.now() - t0) / 1000;
controllers.forEach((c) => c.abort());
await Promise.all(readers);
lat.sort((a, b) => a - b);
const q = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] : NaN);
console.log(JSON.stringify({
  url, writers: W, streams: S, readers: R, seconds: +secs.toFixed(2),
  appends: lat.length, errors, appends_per_s: Math.round(lat.length / secs),
  p50_ms: +q(0.5).toFixed(2), p99_ms: +q(0.99).toFixed(2), sse_bytes: received,
}));
