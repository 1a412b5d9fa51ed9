'use strict'
// TurnstoneSaver (turnstone/langgraph) under real LangGraph graphs: the same
// history as LangGraph's MemorySaver, state resumed from a new Store, an
// interrupt answered after a reopen, a thread deleted, and runs killed with
// SIGKILL then resumed from their last durable checkpoint.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { MemorySaver, Command } = require('@langchain/langgraph')
const { TurnstoneSaver } = require('../langgraph.js')
const { Store } = require('../turnstone.js')
const { approvalGraph, counterGraph, fanGraph, nestedGraph } = require('./langgraph/graphs.cjs')

const made = []
const tmp = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstone-lg-'))
  made.push(d)
  return d
}
// Each store preallocates its first segment: remove them all at the end.
test.after(() => {
  for (const d of made) fs.rmSync(d, { recursive: true, force: true })
})
const cfg = (thread) => ({ configurable: { thread_id: thread } })

async function history(graph, config) {
  const out = []
  for await (const s of graph.getStateHistory(config)) out.push(s)
  return out
}

// A state snapshot without what differs between two runs (ids, times).
function shape(s) {
  return {
    values: s.values,
    next: s.next,
    source: s.metadata.source,
    step: s.metadata.step,
    hasParent: s.parentConfig !== undefined,
    tasks: s.tasks.map((t) => ({ name: t.name, interrupts: t.interrupts.map((i) => i.value), result: t.result })),
  }
}

// Every tuple of a thread, with what differs between two runs made uniform:
// keys sorted, times dropped, uuids (checkpoint and task ids) and interrupt
// ids (32 hex digits) numbered by first appearance. `anyWriteOrder`: pending
// writes sorted by channel and value, their task ids left out (SqliteSaver
// returns them by task id, a random uuid; MemorySaver and TurnstoneSaver in
// writesSortKey order).
async function tuples(saver, thread, anyWriteOrder = false) {
  const out = []
  for await (const t of saver.list(cfg(thread))) {
    if (anyWriteOrder) {
      const key = (w) => JSON.stringify([w[1], w[2]])
      t.pendingWrites = t.pendingWrites.map((w) => ['task', w[1], w[2]]).sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0))
    }
    out.push(t)
  }
  // list without checkpoint_ns: SqliteSaver and TurnstoneSaver sort all
  // namespaces together by id, MemorySaver one namespace after the other.
  if (saver instanceof TurnstoneSaver) {
    const ids = out.map((t) => t.checkpoint.id)
    assert.deepEqual(ids, [...ids].sort().reverse())
  }
  const key = (t) => [t.config.configurable.checkpoint_ns, t.checkpoint.id]
  out.sort((a, b) => {
    const [na, ia] = key(a)
    const [nb, ib] = key(b)
    return na < nb ? -1 : na > nb ? 1 : ia < ib ? 1 : ia > ib ? -1 : 0
  })
  const sorted = (v) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().filter((k) => k !== 'ts' && v[k] !== undefined).map((k) => [k, sorted(v[k])]))
      : Array.isArray(v) ? v.map(sorted) : v
  const ids = new Map()
  const text = JSON.stringify(sorted(out)).replace(
    /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{32}\b/g,
    (u) => (ids.has(u) ? ids.get(u) : (ids.set(u, `id${ids.size}`), `id${ids.size - 1}`)),
  )
  return JSON.parse(text)
}

// The same graphs on a reference saver and on TurnstoneSaver: the same
// tuples (checkpoints, metadata, parents, pending writes) and state history.
async function differential(reference, anyWriteOrder = false) {
  const runs = []
  for (const saver of [reference, new TurnstoneSaver(tmp())]) {
    const fan = fanGraph().compile({ checkpointer: saver })
    const approval = approvalGraph().compile({ checkpointer: saver })
    const counter = counterGraph(5).compile({ checkpointer: saver })
    const nested = nestedGraph().compile({ checkpointer: saver })
    await fan.invoke({ log: ['in'] }, cfg('fan'))
    await approval.invoke({ log: [] }, cfg('ok'))
    await approval.invoke(new Command({ resume: 'yes' }), cfg('ok'))
    await counter.invoke({ n: 0 }, cfg('count'))
    await nested.invoke({ log: [] }, cfg('nest'))
    const paused = await nested.getState(cfg('nest'), { subgraphs: true })
    await nested.invoke(new Command({ resume: 'fine' }), cfg('nest'))
    // A fork: state updated at an earlier checkpoint, then run on from it.
    const past = (await history(counter, cfg('count')))[3]
    const forked = await counter.updateState(past.config, { n: 3, log: ['forked'] })
    await counter.invoke(null, forked)
    runs.push({
      history: {
        fan: (await history(fan, cfg('fan'))).map(shape),
        ok: (await history(approval, cfg('ok'))).map(shape),
        count: (await history(counter, cfg('count'))).map(shape),
        nest: (await history(nested, cfg('nest'))).map(shape),
        paused: { next: paused.next, sub: paused.tasks[0].state.next, subValues: paused.tasks[0].state.values },
      },
      tuples: Object.fromEntries(await Promise.all(['fan', 'ok', 'count', 'nest'].map(async (t) => [t, await tuples(saver, t, anyWriteOrder)]))),
    })
    if (saver instanceof TurnstoneSaver) await saver.close()
  }
  return runs
}

test('the same tuples and state history as MemorySaver (fan-out, interrupt, fork)', async () => {
  const [memory, turnstone] = await differential(new MemorySaver())
  assert.equal(turnstone.history.fan.length, 4)
  assert.deepEqual(turnstone.history.fan[0].values.log, ['in', 'left', 'right', 'join 3'])
  assert.ok(turnstone.tuples.ok.some((t) => t.pendingWrites.length > 0))
  assert.ok(turnstone.history.count[0].values.log.includes('forked'))
  // The subgraph returns its whole state, which the parent's reducer appends.
  assert.deepEqual(turnstone.history.nest[0].values.log, ['outer', 'outer', 'inner got fine', 'inner done'])
  assert.deepEqual(turnstone.history.paused, { next: ['sub'], sub: ['ask'], subValues: { log: ['outer'] } })
  assert.ok(new Set(turnstone.tuples.nest.map((t) => t.config.configurable.checkpoint_ns)).size >= 1)
  assert.deepEqual(turnstone.history, memory.history)
  assert.deepEqual(turnstone.tuples, memory.tuples)
})

// SqliteSaver, the backend TurnstoneSaver replaces, when it is installed
// (not a dependency: it needs better-sqlite3, a native build).
let SqliteSaver = null
try {
  ;({ SqliteSaver } = require('@langchain/langgraph-checkpoint-sqlite'))
} catch {}
test('the same tuples and state history as SqliteSaver', { skip: SqliteSaver ? false : '@langchain/langgraph-checkpoint-sqlite is not installed' }, async () => {
  const [sqlite, turnstone] = await differential(SqliteSaver.fromConnString(':memory:'), true)
  assert.deepEqual(turnstone.history, sqlite.history)
  assert.deepEqual(turnstone.tuples, sqlite.tuples)
})

test('state is resumed from a new Store; an interrupt is answered after the reopen', async () => {
  const dir = tmp()
  let saver = new TurnstoneSaver(dir)
  let graph = approvalGraph().compile({ checkpointer: saver })
  const first = await graph.invoke({ log: ['hello'] }, cfg('t1'))
  assert.equal(first.__interrupt__[0].value.question, 'deploy?')
  const before = await graph.getState(cfg('t1'))
  assert.deepEqual(before.next, ['b'])
  await saver.close()

  saver = new TurnstoneSaver(dir)
  graph = approvalGraph().compile({ checkpointer: saver })
  const again = await graph.getState(cfg('t1'))
  assert.deepEqual(again.values, before.values)
  assert.deepEqual(again.next, ['b'])
  assert.equal(again.tasks[0].interrupts[0].value.question, 'deploy?')
  assert.deepEqual(again.config, before.config)
  const done = await graph.invoke(new Command({ resume: 'ship it' }), cfg('t1'))
  assert.deepEqual(done.log, ['hello', 'a saw 1', 'b', 'c after ship it'])
  // A second run on the thread starts from the saved state.
  const more = await graph.invoke({ log: ['again'] }, cfg('t1'))
  assert.deepEqual(more.log.slice(0, 5), ['hello', 'a saw 1', 'b', 'c after ship it', 'again'])
  assert.equal(more.__interrupt__.length, 1)
  // list: filter, before, limit over the thread's index.
  const all = []
  for await (const t of saver.list(cfg('t1'))) all.push(t)
  assert.equal(all.length, (await history(graph, cfg('t1'))).length)
  assert.deepEqual(all.map((t) => t.checkpoint.id), [...all.map((t) => t.checkpoint.id)].sort().reverse())
  const inputs = []
  for await (const t of saver.list(cfg('t1'), { filter: { source: 'input' } })) inputs.push(t.metadata.source)
  assert.deepEqual(inputs, ['input', 'input'])
  const page = []
  for await (const t of saver.list(cfg('t1'), { before: all[1].config, limit: 2 })) page.push(t.checkpoint.id)
  assert.deepEqual(page, [all[2].checkpoint.id, all[3].checkpoint.id])
  // limit 0 is no limit (SqliteSaver); a checkpoint_id in the config selects that checkpoint (MemorySaver).
  let n = 0
  for await (const _ of saver.list(cfg('t1'), { limit: 0 })) n++
  assert.equal(n, all.length)
  const one = []
  for await (const t of saver.list({ configurable: { thread_id: 't1', checkpoint_id: all[2].checkpoint.id } })) one.push(t.checkpoint.id)
  assert.deepEqual(one, [all[2].checkpoint.id])
  await saver.close()

  // The thread is one session of ignorable plugin events, readable by any reader.
  const st = new Store(dir, { plugins: TurnstoneSaver.plugins })
  const events = await st.replay(TurnstoneSaver.sessionId('t1'))
  const kinds = new Set(events.map((e) => e.kind))
  assert.deepEqual([...kinds].sort(), ['langgraph/checkpoint', 'langgraph/writes', 'session/meta'])
  assert.ok(events.every((e) => e.ignorable))
  // JSON blobs are kept as text: a dump shows the answer as written.
  const answer = events.find((e) => e.kind === 'langgraph/writes' && e.data.writes.some(([, ch]) => ch === '__resume__'))
  assert.equal(JSON.parse(answer.data.writes.find(([, ch]) => ch === '__resume__')[2].s), 'ship it')
  await st.close()
})

test('deleteThread empties one thread, durably; the thread id can be reused', async () => {
  const dir = tmp()
  let saver = new TurnstoneSaver(dir)
  const graph = () => fanGraph().compile({ checkpointer: saver })
  await graph().invoke({ log: [] }, cfg('keep'))
  await graph().invoke({ log: [] }, cfg('drop'))
  await saver.deleteThread('drop')
  assert.equal(await saver.getTuple(cfg('drop')), undefined)
  await saver.close()
  saver = new TurnstoneSaver(dir)
  assert.equal(await saver.getTuple(cfg('drop')), undefined)
  assert.notEqual(await saver.getTuple(cfg('keep')), undefined)
  const threads = new Set()
  for await (const t of saver.list({})) threads.add(t.config.configurable.thread_id)
  assert.deepEqual([...threads], ['keep'])
  const again = await graph().invoke({ log: ['new'] }, cfg('drop'))
  assert.deepEqual(again.log, ['new', 'left', 'right', 'join 3'])
  await saver.close()
})

test('deleteThread deletes the thread\'s session from the store (a tombstone); the id comes back under a new generation; forks of it keep working', async () => {
  const dir = tmp()
  let saver = new TurnstoneSaver(dir)
  const graph = () => fanGraph().compile({ checkpointer: saver })
  await graph().invoke({ log: ['a'] }, cfg('gone'))
  const first = await saver.sessionName('gone')
  assert.equal(first, TurnstoneSaver.sessionId('gone'))
  // A fork taken before the delete keeps its whole history.
  const at = (await saver.store.replay(first)).length
  await saver.store.fork(first, { at, child: TurnstoneSaver.sessionId('kid') })
  await saver.deleteThread('gone')
  assert.equal(await saver.sessionName('gone'), null)
  const live = (await saver.store.sessions()).map((s) => s.id)
  assert.ok(!live.includes(first), `the deleted session is still listed: ${live}`)
  await assert.rejects(saver.store.replay(first))
  assert.deepEqual((await graph().getState(cfg('kid'))).values.log, ['a', 'left', 'right', 'join 3'])
  // A fork made after the saver listed its threads is in the next list of every thread.
  await saver.store.fork(TurnstoneSaver.sessionId('kid'), { child: TurnstoneSaver.sessionId('kid2') })
  const seen = new Set()
  for await (const t of saver.list({})) seen.add(t.config.configurable.thread_id)
  assert.deepEqual([...seen].sort(), ['kid', 'kid2'])
  // Used again: a new session, and only the new history.
  await graph().invoke({ log: ['b'] }, cfg('gone'))
  const second = await saver.sessionName('gone')
  assert.equal(second, 'langgraph~1:gone')
  await saver.close()
  saver = new TurnstoneSaver(dir)
  assert.equal(await saver.sessionName('gone'), second)
  const hist = []
  for await (const t of saver.list(cfg('gone'))) hist.push(t.checkpoint.channel_values.log)
  assert.ok(hist.length > 0)
  assert.deepEqual(hist, [['b', 'left', 'right', 'join 3'], ['b', 'left', 'right'], ['b'], []])
  // Deleted twice: the third generation.
  await saver.deleteThread('gone')
  await graph().invoke({ log: ['c'] }, cfg('gone'))
  assert.equal(await saver.sessionName('gone'), 'langgraph~2:gone')
  const threads = new Set()
  for await (const t of saver.list({})) threads.add(t.config.configurable.thread_id)
  assert.deepEqual([...threads].sort(), ['gone', 'kid', 'kid2'])
  await saver.close()
})

test('a thread forked with store.fork is a new thread with the same checkpoints', async () => {
  const dir = tmp()
  let saver = new TurnstoneSaver(dir)
  const graph = () => approvalGraph().compile({ checkpointer: saver })
  await graph().invoke({ log: ['x'] }, cfg('a'))
  const at = (await saver.store.replay(TurnstoneSaver.sessionId('a'))).length
  await graph().invoke(new Command({ resume: 'no' }), cfg('a'))
  await saver.store.fork(TurnstoneSaver.sessionId('a'), { at, child: TurnstoneSaver.sessionId('b') })
  await saver.close()
  saver = new TurnstoneSaver(dir)
  // b holds a's history up to the interrupt; answered differently, it goes its own way.
  const b = await graph().getState(cfg('b'))
  assert.deepEqual(b.next, ['b'])
  assert.equal(b.config.configurable.thread_id, 'b')
  const done = await graph().invoke(new Command({ resume: 'yes' }), cfg('b'))
  assert.deepEqual(done.log, ['x', 'a saw 1', 'b', 'c after yes'])
  assert.deepEqual((await graph().getState(cfg('a'))).values.log, ['x', 'a saw 1', 'b', 'c after no'])
  await saver.close()
})

function run(args) {
  const child = spawn(process.execPath, [path.join(__dirname, 'langgraph', 'agent.cjs'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stdout.on('data', (d) => (out += d))
  child.stderr.on('data', (d) => (err += d))
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, out, err })))
  return { child, exited }
}

const acked = (file) =>
  fs.existsSync(file)
    ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number)
    : []

test('a run killed with SIGKILL resumes from its last durable checkpoint', async () => {
  const dir = tmp()
  const ackFile = path.join(tmp(), 'acks')
  const target = 300
  for (let round = 0; round < 4; round++) {
    const seen = acked(ackFile).length
    const { child, exited } = run([dir, ackFile, String(target), 'counter'])
    // Kill once the run has gone a random number of steps further.
    const more = 10 + Math.floor(Math.random() * 30)
    const deadline = Date.now() + 20000
    while (acked(ackFile).length < seen + more && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2))
    child.kill('SIGKILL')
    const r = await exited
    assert.equal(r.signal, 'SIGKILL', `the run ended before it was killed: ${r.code} ${r.err}`)
    // Every value a step started from was in a durable checkpoint: the
    // reopened thread is at least that far.
    const saver = new TurnstoneSaver(dir)
    const graph = counterGraph(target).compile({ checkpointer: saver })
    const state = await graph.getState(cfg('counter'))
    const maxAck = Math.max(...acked(ackFile))
    assert.ok(state.values.n >= maxAck, `round ${round}: recovered n=${state.values.n} < acked ${maxAck}`)
    assert.deepEqual(state.values.log, Array.from({ length: state.values.n }, (_, i) => i))
    await saver.close()
  }
  // The last resume runs to the end, in a child like the others.
  const r = await run([dir, ackFile, String(target), 'counter']).exited
  assert.equal(r.code, 0, r.err)
  const saver = new TurnstoneSaver(dir)
  const state = await counterGraph(target).compile({ checkpointer: saver }).getState(cfg('counter'))
  assert.equal(state.values.n, target)
  assert.deepEqual(state.values.log, Array.from({ length: target }, (_, i) => i))
  assert.deepEqual(state.next, [])
  await saver.close()
})

test('put and putWrites resolve only once their event is durable; concurrent ones share commits', async () => {
  const { emptyCheckpoint, uuid6 } = require('@langchain/langgraph-checkpoint')
  const saver = new TurnstoneSaver(tmp())
  const sid = TurnstoneSaver.sessionId('d')
  // store.replay reads durable events only.
  const durable = async () => (await saver.store.replay(sid)).map((e) => e.data.id ?? e.data.task_id)
  let config = cfg('d')
  for (let i = 0; i < 20; i++) {
    const cp = { ...emptyCheckpoint(), id: uuid6(i) }
    config = await saver.put(config, cp, { source: 'loop', step: i, parents: {} }, {})
    assert.ok((await durable()).includes(cp.id), `put ${i} resolved before its checkpoint was durable`)
    await saver.putWrites(config, [['ch', i]], `task-${i}`)
    assert.ok((await durable()).includes(`task-${i}`), `putWrites ${i} resolved before it was durable`)
  }
  // Concurrent puts on many threads all resolve durable.
  const ids = await Promise.all(
    Array.from({ length: 32 }, async (_, i) => {
      const cp = { ...emptyCheckpoint(), id: uuid6(100 + i) }
      await saver.put(cfg(`c${i}`), cp, { source: 'input', step: -1, parents: {} }, {})
      return [i, cp.id, (await saver.store.replay(TurnstoneSaver.sessionId(`c${i}`))).some((e) => e.data.id === cp.id)]
    }),
  )
  assert.deepEqual(ids.filter(([, , ok]) => !ok), [])
  await saver.close()
})

test('an oversized checkpoint is refused with too_large and changes nothing; ESM import by subpath', async () => {
  const { emptyCheckpoint, uuid6 } = require('@langchain/langgraph-checkpoint')
  const { TurnstoneError } = require('../turnstone.js')
  const saver = new TurnstoneSaver(tmp())
  const ok = await saver.put(cfg('big'), { ...emptyCheckpoint(), id: uuid6(0), channel_versions: { a: 1 } }, { source: 'input', step: -1, parents: {} }, { a: 1 })
  const huge = { ...emptyCheckpoint(), id: uuid6(1), channel_values: { a: 'x'.repeat(17 * 1024 * 1024) }, channel_versions: { a: 2 } }
  await assert.rejects(saver.put(ok, huge, { source: 'loop', step: 0, parents: {} }, { a: 2 }), (e) => e instanceof TurnstoneError && e.kind === 'too_large')
  assert.equal((await saver.getTuple(cfg('big'))).checkpoint.id, ok.configurable.checkpoint_id)
  await saver.putWrites(ok, [['a', 'small']], 'task')
  assert.deepEqual((await saver.getTuple(cfg('big'))).pendingWrites, [['task', 'a', 'small']])
  await saver.close()
  const esm = await import('turnstone/langgraph')
  assert.equal(esm.TurnstoneSaver, TurnstoneSaver)
})
