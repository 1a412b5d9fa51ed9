import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["clients.test.mjs"],
    testTimeout: 90000,
  },
});
