// Real clients against `turnstone serve`: an agent writes a session's events
// with @durable-streams/client's IdempotentProducer while a second client
// follows them live over SSE; after a clean restart and after kill -9 the
// stream reads back exactly what was acknowledged. The test starts and
// restarts the server itself (TURNSTONE_BIN, set by run.sh).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { DurableStream, IdempotentProducer } from "@durable-streams/client";

const bin = process.env.TURNSTONE_BIN;
const dir = mkdtempSync(join(tmpdir(), "turnstone-clients-"));
const children = new Set();
afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

async function startServer() {
  const child = spawn(bin, ["serve", join(dir, "store"), "--listen", "127.0.0.1:0"], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  children.add(child);
  let log = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no address: ${log}`)), 30000);
    child.stderr.on("data", (d) => {
      log += d;
      // Wait for the whole address (stderr may arrive in pieces).
      const m = log.match(/listening on (http:\S+) \(/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`server exited (${code}): ${log}`)));
  });
  return { child, url };
}

async function stop(child, signal) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const done = new Promise((resolve) => child.on("exit", resolve));
  child.kill(signal);
  await done;
  children.delete(child);
}

function agentTurn(turn) {
  return [
    { kind: "turn/start", turn },
    { kind: "user/message", turn, text: `question ${turn}` },
    ...[0, 1, 2].map((i) => ({ kind: "assistant/chunk", turn, index: i, text: `part ${i}` })),
    { kind: "assistant/message", turn, text: "part 0part 1part 2" },
    { kind: "turn/end", turn, reason: "completed" },
  ];
}

describe.runIf(bin)("real clients", () => {
  test("agent writes, follower tails over SSE, restart and kill -9 keep what was acknowledged", async () => {
    let server = await startServer();
    const path = "/v1/stream/agent-session-1";
    const writer = await DurableStream.create({
      url: `${server.url}${path}`,
      contentType: "application/json",
    });

    // The follower subscribes before anything is written.
    const followed = [];
    const follower = new DurableStream({ url: `${server.url}${path}` });
    const live = await follower.stream({ live: "sse" });
    const caughtUp = new Promise((resolve) => {
      live.subscribeJson(async (batch) => {
        followed.push(...batch.items);
        if (followed.length >= 14) resolve();
      });
    });

    const producer = new IdempotentProducer(writer, "agent-1", { epoch: 0, lingerMs: 5 });
    const events = [...agentTurn(1), ...agentTurn(2)];
    for (const e of events) producer.append(JSON.stringify(e));
    await producer.flush();
    await caughtUp;
    live.cancel();
    expect(followed).toEqual(events);

    // Clean restart: everything acknowledged reads back.
    await stop(server.child, "SIGTERM");
    server = await startServer();
    let res = await new DurableStream({ url: `${server.url}${path}` }).stream({ live: false });
    expect(await res.json()).toEqual(events);

    // kill -9 after more acknowledged appends.
    const more = agentTurn(3);
    const again = new DurableStream({ url: `${server.url}${path}`, contentType: "application/json" });
    const producer2 = new IdempotentProducer(again, "agent-1", { epoch: 1, lingerMs: 5 });
    for (const e of more) producer2.append(JSON.stringify(e));
    await producer2.flush();
    await stop(server.child, "SIGKILL");
    server = await startServer();
    res = await new DurableStream({ url: `${server.url}${path}` }).stream({ live: false });
    expect(await res.json()).toEqual([...events, ...more]);
    await stop(server.child, "SIGTERM");
  }, 90000);
});
