'use strict'
// The Node package on a PostgreSQL database (issue 18): the same calls as
// on a store directory, and one writer per session across owners. Against
// a real server: TURNSTONE_PG_URL, or a private one from .ci/postgres.sh,
// stopped at the end; each test gets its own database.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFileSync } = require('node:child_process')
const { Store, TurnstoneError } = require('../turnstone.js')

const script = path.join(__dirname, '..', '..', '..', '.ci', 'postgres.sh')
let server = process.env.TURNSTONE_PG_URL
let pgdir = null
test.before(() => {
  if (server) return
  const out = execFileSync('bash', [script, 'start'], { encoding: 'utf8' })
  const words = Object.fromEntries(out.split(/\s+/).filter((w) => w.includes('=')).map((w) => w.split(/=(.*)/s).slice(0, 2)))
  server = words.PGURL
  pgdir = words.PGDIR_TURNSTONE
})
test.after(() => {
  if (pgdir) execFileSync('bash', [script, 'stop', pgdir])
})
let n = 0
function database() {
  const name = `node_${process.pid}_${n++}`
  execFileSync('psql', [server, '-qc', `CREATE DATABASE ${name}`])
  return server.replace(/\/[^/]*$/, `/${name}`)
}
const dirs = []
test.after(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true })
})

const NATIVE = [
  { type: 'thinking', thinking: 'plan', signature: 'c2lnbmF0dXJl' },
  { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
  { type: 'block_from_the_future', payload: { nested: [1, 2.5, null, true] } },
]

async function workload(st) {
  const s = st.createSession('s1')
  for (let t = 0; t < 2; t++) {
    s.append('turn/start', { turn_id: `t${t}` })
    s.user(`question ${t} about zebras`)
    s.assistant({ content: [...NATIVE, { type: 'text', text: `answer ${t}` }], stop_reason: 'end_turn' })
    s.append('turn/end', { turn_id: `t${t}`, reason: { kind: 'completed' } })
  }
  await s.flush()
  return s
}

const shape = (evs) => evs.map((e) => [e.seq, e.kind, e.data, e.surface ?? null])

test('the same calls give the same session on a directory and a database', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstone-node-pg-'))
  dirs.push(dir)
  const d = new Store(dir)
  const p = new Store(database())
  assert.deepEqual([d.backend, p.backend], ['embedded', 'postgres'])
  const a = await workload(d)
  const b = await workload(p)
  for (const format of [undefined, 'anthropic', 'openai-responses', 'openai-chat']) {
    assert.deepEqual(a.messages(format), b.messages(format), String(format))
  }
  a.close()
  b.close()
  assert.deepEqual(shape(await d.replay('s1')), shape(await p.replay('s1')))
  const ev = (await p.replay('s1')).find((e) => e.kind === 'assistant/message')
  assert.deepEqual(ev.data.content.slice(0, NATIVE.length), NATIVE)
  assert.equal(await p.fork('s1', { at: 4, child: 'f' }), 'f')
  await d.fork('s1', { at: 4, child: 'f' })
  assert.deepEqual((await p.openReadOnly('f')).messages(), (await d.openReadOnly('f')).messages())
  const list = async (st) => (await st.sessions()).map((x) => [x.id, x.events, x.openTurn, x.parent])
  assert.deepEqual(await list(d), await list(p))
  const hits = await p.search('zebras')
  assert.deepEqual(hits.filter((h) => h.session === 's1').map((h) => h.seq).sort(), [1, 5])
  // An online collection is a store directory's: refused on a database.
  await assert.rejects(p.collect(), (e) => e instanceof TurnstoneError && e.kind === 'refused' && /collect is not available on a database/.test(e.message))
  assert.equal((await d.collect()).sessions_reclaimed, 0)
  await d.close()
  await p.close()
})

test('a session has one writer across owners', async () => {
  const url = database()
  const a = new Store(url, { owner: 'worker-a' })
  const b = new Store(url, { owner: 'worker-b' })
  const s = a.createSession('shared')
  s.user('from a')
  await s.flush()
  await assert.rejects(b.openSession('shared'), (e) => e instanceof TurnstoneError && e.kind === 'fenced')
  s.close()
  const t = await b.openSession('shared')
  t.user('from b')
  await t.flush()
  const texts = (await a.openReadOnly('shared')).messages().map((m) => m.content[0].text)
  assert.deepEqual(texts, ['from a', 'from b'])
  t.close()
  await a.close()
  await b.close()
})

test('a follower on another store sees what the writer commits, then the tombstone', async () => {
  const url = database()
  const w = new Store(url, { owner: 'writer' })
  const r = new Store(url, { owner: 'reader' })
  const s = w.createSession('followed')
  s.user('one')
  await s.flush()
  const sub = r.subscribe('followed')
  assert.equal((await sub.next()).seq, 0)
  assert.equal(sub.tryNext(), null)
  const rest = []
  const following = (async () => {
    for await (const e of sub) rest.push(e.kind)
  })()
  s.user('two')
  await s.flush()
  s.close()
  await w.delete('followed')
  await following
  assert.deepEqual(rest, ['user/message', 'session/delete'])
  await r.close()
  await w.close()
})
