// The conformance suite of @langchain/langgraph-checkpoint-validation
// against TurnstoneSaver (its library entry point: the package's
// validate-checkpointer CLI cannot load an initializer in 1.1.1).
// Run by run.sh: npx vitest run --config test/langgraph/vitest.config.mjs
import { validate, deltaChannelHistoryTests } from '@langchain/langgraph-checkpoint-validation'
import initializer from './validation.initializer.cjs'

validate(initializer)
deltaChannelHistoryTests(initializer)
