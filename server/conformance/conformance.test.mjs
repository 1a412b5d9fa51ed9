// The official Durable Streams server conformance suite, pointed at a running
// `turnstone serve` (run.sh starts one and sets CONFORMANCE_TEST_URL).
import { runConformanceTests } from "@durable-streams/server-conformance-tests";

const baseUrl = process.env.CONFORMANCE_TEST_URL;
if (!baseUrl) {
  throw new Error("CONFORMANCE_TEST_URL is not set: run server/conformance/run.sh");
}

runConformanceTests({
  baseUrl,
  // Matches `--long-poll-timeout-ms` in run.sh.
  longPollTimeoutMs: Number(process.env.CONFORMANCE_LONG_POLL_MS ?? 3000),
});
