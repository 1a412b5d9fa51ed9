// vitest settings of the LangGraph checkpointer conformance suite (the
// suite's spec files use vitest's globals).
import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    globals: true,
    include: ['test/langgraph/validation.vitest.mjs'],
    testTimeout: 30000,
  },
})
