'use strict'
// A LangGraph run that the crash test kills with SIGKILL: a counter graph
// with durability "sync" (each step's checkpoint is durable before the next
// step runs). Every step appends the value it started from to an ack file
// once it runs, i.e. once the checkpoint holding that value is durable.
//   node agent.cjs <store dir> <ack file> <target> <thread>
const fs = require('node:fs')
const { counterGraph } = require('./graphs.cjs')
const { TurnstoneSaver } = require('../../langgraph.js')

const [dir, ackFile, target, thread] = process.argv.slice(2)
;(async () => {
  const saver = new TurnstoneSaver(dir)
  const ack = fs.openSync(ackFile, 'a')
  const graph = counterGraph(Number(target), (n) => {
    fs.writeSync(ack, `${n}\n`)
  }).compile({ checkpointer: saver })
  const config = { configurable: { thread_id: thread }, durability: 'sync', recursionLimit: 100000 }
  const state = await graph.getState(config)
  // A fresh thread starts from its input; a crashed one resumes from its last checkpoint.
  await graph.invoke(state.next.length > 0 || state.values.n !== undefined ? null : { n: 0, log: [] }, config)
  await saver.close()
  process.stdout.write('done\n')
})().catch((e) => {
  console.error(e)
  process.exit(1)
})
