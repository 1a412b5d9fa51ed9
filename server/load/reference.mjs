// The reference Node server (@durable-streams/server), file-backed, on a
// loopback port; prints its URL and runs until killed.
import { DurableStreamTestServer } from "@durable-streams/server";
const dataDir = process.argv[2];
const server = new DurableStreamTestServer({ host: "127.0.0.1", port: 0, dataDir });
const url = await server.start();
console.log(`listening on ${url} (reference)`);
