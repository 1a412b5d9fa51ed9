'use strict'
// Benchmark of the LangGraph.js checkpointer (not a test). Build first, then:
//   node benches/langgraph.js [--runs 3] [--steps 300] [--threads 16]
// A counter graph (one node, one checkpoint and one putWrites per step) run
// on TurnstoneSaver and on SqliteSaver, graph steps per second, median of
// runs: one thread (durability "sync": each step waits for its checkpoint),
// then `threads` threads at once (durability "async", LangGraph's default).
// SqliteSaver runs twice: as it comes (better-sqlite3 in WAL mode with
// synchronous=NORMAL: a commit is not fsynced) and with synchronous=FULL
// (fsynced, like TurnstoneSaver's put).
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { TurnstoneSaver } = require('../langgraph.js')
const { counterGraph } = require('../test/langgraph/graphs.cjs')

const args = process.argv.slice(2)
const opt = (name, dflt) => {
  const i = args.indexOf(name)
  return i >= 0 ? Number(args[i + 1]) : dflt
}
const runs = opt('--runs', 3)
const steps = opt('--steps', 300)
const threads = opt('--threads', 16)
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]
const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'turnstone-lg-bench-'))

let SqliteSaver = null
try {
  ;({ SqliteSaver } = require('@langchain/langgraph-checkpoint-sqlite'))
} catch {}

const savers = {
  turnstone: () => new TurnstoneSaver(tmp()),
  ...(SqliteSaver && {
    'sqlite (NORMAL)': () => SqliteSaver.fromConnString(path.join(tmp(), 'c.db')),
    'sqlite (FULL)': () => {
      const s = SqliteSaver.fromConnString(path.join(tmp(), 'c.db'))
      s.setup()
      s.db.pragma('synchronous = FULL')
      return s
    },
  }),
}

async function once(make, nThreads, nSteps, durability) {
  const saver = make()
  const graph = counterGraph(nSteps).compile({ checkpointer: saver })
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: nThreads }, (_, i) =>
      graph.invoke({ n: 0 }, { configurable: { thread_id: `t${i}` }, durability, recursionLimit: nSteps + 10 }),
    ),
  )
  const perSec = (nThreads * nSteps) / ((performance.now() - t0) / 1000)
  if (saver.close) await saver.close()
  else saver.db.close()
  return perSec
}

;(async () => {
  const shapes = [
    ['1 thread, durability sync', 1, steps, 'sync'],
    [`${threads} threads, durability async`, threads, Math.ceil(steps / 4), 'async'],
  ]
  for (const [label, n, s, durability] of shapes) {
    for (const [name, make] of Object.entries(savers)) {
      const v = []
      for (let r = 0; r < runs; r++) v.push(await once(make, n, s, durability))
      console.log(`${label}: ${name}: ${Math.round(median(v))} steps/s (${v.map(Math.round).join(', ')})`)
    }
  }
})()
