import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["conformance.test.mjs"],
    // The suite's own per-test timeouts apply; this is the default for the rest.
    testTimeout: 15000,
    hookTimeout: 15000,
    reporters: ["default", "json"],
    outputFile: { json: process.env.CONFORMANCE_JSON ?? "results.json" },
  },
});
