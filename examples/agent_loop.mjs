// A runnable agent harness on turnstone's Node package, with a fake model
// that answers the way Anthropic's Messages API does (thinking with a
// signature, streamed text, two tool calls at once).
//
// It runs a turn; runs the next one in a child process that is killed with
// SIGKILL inside a tool body (the tool calls are durable, their results are
// not); reopens the store, where repair closes what the crash left open;
// forks the session at a turn boundary, compacts the first turn, replays and
// searches. The same scope as engine/examples/agent_loop.rs.
//
//   node examples/agent_loop.mjs            # prints what it does
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'

// The package from this clone (`import { Store } from 'turnstone'` once installed).
const { Store } = createRequire(import.meta.url)('../bindings/node/turnstone.js')

const TOOLS = [
  { name: 'ls', description: 'List a directory.', input_schema: { type: 'object', properties: { path: { type: 'string' } } } },
  { name: 'wc', description: 'Count the lines of a file.', input_schema: { type: 'object', properties: { path: { type: 'string' } } } },
]

/** The fake model: a response body in Anthropic's shape. */
function model(body, turn, step) {
  assert.equal(body.messages.at(-1).role, 'user')
  const content = step === 0
    ? [
        { type: 'thinking', thinking: 'List the files and count the lines.', signature: 'EqQBfake==' },
        { type: 'text', text: 'Let me look.' },
        { type: 'tool_use', id: `toolu_${turn}_${step}a`, name: 'ls', input: { path: '.' } },
        { type: 'tool_use', id: `toolu_${turn}_${step}b`, name: 'wc', input: { path: 'README.md' } },
      ]
    : [{ type: 'text', text: 'There are 3 files; the README has 42 lines.' }]
  return {
    id: `msg_${turn}_${step}`, type: 'message', role: 'assistant', model: 'claude-x',
    content, stop_reason: step === 0 ? 'tool_use' : 'end_turn', stop_sequence: null,
    usage: { input_tokens: 100, output_tokens: 20, cache_read_input_tokens: 80 },
  }
}

/** One turn: the user's message, then steps until the model stops calling
 * tools. With `crashInTool` the process dies inside a tool body. */
async function turn(s, turnId, question, crashInTool = false) {
  s.startTurn(turnId)
  s.user(question)
  for (let step = 0; step < 4; step++) {
    const stepId = `${turnId}-s${step}`
    s.startStep(turnId, stepId)
    s.prepareRequest({ provider: 'anthropic', model: 'claude-x', params: { max_tokens: 1024 }, system: 'You are a careful coding agent.', tools: TOOLS })
    const body = s.requestBody('anthropic')
    s.checkRequestBody('anthropic', body)          // what is sent is what is logged
    await s.flush()                                // durable before the request
    const response = model(body, turnId, step)
    ;['There are ', '3 files.'].forEach((text, index) => s.append('assistant/chunk', { index, text }))
    s.assistant(response, { provider: 'anthropic' })
    const calls = response.content.filter((b) => b.type === 'tool_use').map((b) => ({ callId: b.id, name: b.name, input: b.input }))
    if (calls.length === 0) {
      s.endStep(turnId, stepId, 'completed')
      s.endTurn(turnId)
      await s.flush()
      return
    }
    const outcomes = await s.runTools(calls, (call) => {
      if (crashInTool) process.kill(process.pid, 'SIGKILL')   // the calls are durable, the results are not
      return `${call.name} of ${JSON.stringify(call.input)}: ok`
    })                                             // each result durable as it finishes
    assert.deepEqual(outcomes.map((o) => o.outcome), ['ran', 'ran'])
    s.endStep(turnId, stepId, 'tool_use')
    await s.flush()
  }
}

async function main(dir) {
  let store = new Store(dir)
  await turn(store.createSession('agent-1'), 't1', 'How many files, and how long is the README?')
  await store.close()
  // The next turn runs in a process that is killed mid-tool.
  const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--crash', dir], { stdio: 'inherit' })
  assert.equal(child.signal, 'SIGKILL')
  store = new Store(dir)
  const s = await store.openSession('agent-1')     // repairs what the crash left open
  const report = s.repairReport
  console.log(`crash in the middle of turn t2; repair: ${report.tools_outcome_unknown.length} tool outcomes unknown, ${report.turns_interrupted} turn interrupted`)
  assert.equal(report.tools_outcome_unknown.length, 2)
  console.log('turns:', s.turns().map((t) => [t.turn_id, t.reason.kind]))
  const results = s.messages().filter((m) => m.kind === 'tool/result')
  assert.match(JSON.stringify(results.at(-1).content), /TOOL_OUTCOME_UNKNOWN/)
  await s.flush()
  const fork = await s.forkAfterTurn('t1', { child: 'agent-1.retry' })
  console.log(`forked ${fork.child} at seq ${fork.upto}`)
  s.compactTurn('t1', 'Turn 1: there are 3 files; the README has 42 lines.')
  await s.flush()
  console.log(`next request: ${s.requestBody('anthropic').messages.length} messages`)
  console.log(`replay: ${(await store.replay('agent-1')).length} events`)
  const hits = await store.search('README')
  console.log(`search "README": ${hits.length} hits`)
  assert.ok(hits.length > 0)
  await store.close()
}

if (process.argv[2] === '--crash') {
  const store = new Store(process.argv[3])
  await turn(await store.openSession('agent-1'), 't2', 'And now?', true)
  throw new Error('not reached: the tool body kills the process')
} else {
  await main(process.argv[2] ?? mkdtempSync(join(tmpdir(), 'agent-loop-')))
}
