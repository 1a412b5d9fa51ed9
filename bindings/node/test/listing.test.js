'use strict'
// Listing sessions (store.listSessions) with the CLI's filters (issue 39 §3):
// tags, fields, updated since, open turn, parent, newest first; title, tags
// and fields in each entry; stable pages with a cursor.
const test = require('node:test')
const assert = require('node:assert/strict')
const { Store, TurnstoneError } = require('../turnstone.js')
const tmp = require('./tmp.js')

async function fill() {
  const st = new Store(tmp())
  for (let i = 0; i < 7; i++) {
    const s = st.createSession(`s${i}`)
    s.user(`hello ${i}`)
    if (i % 2 === 0) s.addTag('even')
    if (i < 3) s.setMeta('user', 'alice')
    if (i === 4) {
      s.setTitle('the fourth')
      s.append('turn/start', { turn_id: 't' })
    }
    await s.flush()
    s.close()
    // A fork's child is listed once durable: the next flush covers it.
    if (i === 5) await st.fork('s1', { child: 's1-child' })
  }
  return st
}

async function listed(st, filters = {}) {
  const out = []
  let cursor = null
  for (;;) {
    const page = await st.listSessions({ ...filters, limit: 2, cursor })
    out.push(...page.sessions)
    cursor = page.nextCursor
    if (cursor === null) return out
  }
}
const ids = (entries) => entries.map((e) => e.id)

test('filters and what each entry says', async () => {
  const st = await fill()
  assert.deepEqual(ids(await listed(st)), ['s0', 's1', 's2', 's3', 's4', 's5', 's1-child', 's6'])
  assert.deepEqual(ids(await listed(st, { tags: ['even'] })), ['s0', 's2', 's4', 's6'])
  assert.deepEqual(ids(await listed(st, { where: { user: 'alice' } })), ['s0', 's1', 's2', 's1-child'])
  assert.deepEqual(ids(await listed(st, { tags: ['even'], where: { user: 'alice' } })), ['s0', 's2'])
  assert.deepEqual(ids(await listed(st, { openTurn: true })), ['s4'])
  assert.deepEqual(ids(await listed(st, { parent: 's1' })), ['s1-child'])
  assert.deepEqual(ids(await listed(st, { newestFirst: true })).slice(0, 2), ['s6', 's1-child'])
  assert.deepEqual(await listed(st, { updatedSinceMs: 2 ** 52 }), [])
  const four = (await listed(st, { openTurn: true }))[0]
  assert.equal(four.title, 'the fourth')
  assert.deepEqual(four.tags, ['even'])
  assert.equal(four.openTurn, true)
  assert.deepEqual((await listed(st, { parent: 's1' }))[0].parent, { session: 's1', upto: 2 })
  assert.deepEqual((await listed(st, { where: { user: 'alice' } }))[0].fields, { user: 'alice' })
  await st.close()
})

test('pages with a cursor are stable', async () => {
  const st = await fill()
  const seen = []
  let cursor = null
  for (;;) {
    const page = await st.listSessions({ limit: 3, cursor })
    assert.ok(page.sessions.length <= 3)
    seen.push(...ids(page.sessions))
    cursor = page.nextCursor
    if (cursor === null) break
    if (seen.length === 3) {
      const s = st.createSession('late')
      s.user('late')
      await s.flush()
      s.close()
    }
  }
  assert.deepEqual(seen, ['s0', 's1', 's2', 's3', 's4', 's5', 's1-child', 's6', 'late'])
  await assert.rejects(st.listSessions({ cursor: 'not a cursor' }), (e) => e instanceof TurnstoneError && e.kind === 'invalid_argument')
  await st.close()
})
