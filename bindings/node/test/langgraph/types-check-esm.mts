// Type-checked by run.sh (tsc --noEmit) as an ES module (.mts): the declarations fit LangGraph's ESM types.
import { TurnstoneSaver, PLUGINS } from 'turnstone/langgraph'
import { Store } from 'turnstone'
import type { BaseCheckpointSaver } from '@langchain/langgraph-checkpoint'

const a: BaseCheckpointSaver = new TurnstoneSaver('./dir')
const b = new TurnstoneSaver(new Store('./dir', { plugins: TurnstoneSaver.plugins }))
const kinds: string[] = Object.keys(PLUGINS)
const id: string = TurnstoneSaver.sessionId('t')
async function f() {
  for await (const t of b.list({ configurable: { thread_id: 't' } }, { limit: 2 })) t.checkpoint.id.toUpperCase()
  await b.close()
}
void [a, kinds, id, f]
