'use strict'
// Tools as harnesses write them (issue 39 §4): a body's object, number or
// null is stored as JSON text (not refused as "invalid type: map"), and
// runTools makes each result durable as it finishes, so a sibling still
// running cannot take a finished result down with it.
const test = require('node:test')
const assert = require('node:assert/strict')
const { Store } = require('../turnstone.js')
const tmp = require('./tmp.js')

const VALUES = {
  object: { files: ['a.js', 'b.js'], count: 2, ok: true },
  number: 42,
  nothing: null,
  blocks: [{ type: 'text', text: 'as blocks' }],
  text: 'plain text',
}
const STORED = {
  object: [{ type: 'text', text: JSON.stringify(VALUES.object) }],
  number: [{ type: 'text', text: '42' }],
  nothing: [],
  blocks: [{ type: 'text', text: 'as blocks' }],
  text: [{ type: 'text', text: 'plain text' }],
}

async function results(s) {
  const out = {}
  for (const e of await s.events(0, s.length)) if (e.kind === 'tool/result') out[e.data.call_id] = e.data
  return out
}

test('runTools and toolCall store any JSON value a body returns', async () => {
  const st = new Store(tmp())
  const s = st.createSession('t')
  const calls = Object.keys(VALUES).map((name) => ({ callId: name, name, input: {} }))
  const outcomes = await s.runTools(calls, async (c) => VALUES[c.name])
  assert.deepEqual(outcomes.map((o) => o.outcome), Array(calls.length).fill('ran'))
  const got = await results(s)
  for (const [id, content] of Object.entries(STORED)) {
    assert.deepEqual(got[id].content, content, id)
    assert.equal(got[id].is_error, false)
  }
  await s.toolCall('one', 'object', {}, async () => ({ k: 'v' }))
  assert.deepEqual((await results(s)).one.content, [{ type: 'text', text: '{"k":"v"}' }])
  await st.close()
})

test('each result is durable as its body finishes', async () => {
  const st = new Store(tmp())
  const s = st.createSession('t')
  s.user('go')
  await s.flush()
  const follower = st.subscribe('t', s.length)
  let sawFast
  const seenFast = new Promise((resolve) => (sawFast = resolve))
  ;(async () => {
    for await (const e of follower) {
      if (e.kind === 'tool/result' && e.data.call_id === 'fast') return sawFast(true)
    }
  })()
  const timeout = (ms) => new Promise((resolve) => setTimeout(() => resolve(false), ms))
  let durableWhileSiblingRan
  await s.runTools(
    [
      { callId: 'slow', name: 'slow', input: {} },
      { callId: 'fast', name: 'fast', input: {} },
    ],
    async (c) => {
      if (c.name === 'fast') return 'fast done'
      // A follower sees only durable events.
      durableWhileSiblingRan = await Promise.race([seenFast, timeout(5000)])
      return 'slow done'
    },
  )
  assert.equal(durableWhileSiblingRan, true, 'the fast result was not durable while its sibling ran')
  await st.close()
})

test('a repeated tool-use id is refused, not run again (issue 39 §4)', async () => {
  const { TurnstoneError } = require('../turnstone.js')
  const st = new Store(tmp())
  const s = st.createSession('t')
  s.user('go')
  const ask = { content: [{ type: 'tool_use', id: 't1', name: 'ls', input: {} }], stop_reason: 'tool_use' }
  s.assistant(ask)
  let ran = 0
  const body = async () => { ran += 1; return 'ok' }
  const out = await s.runTools([{ callId: 't1', name: 'ls', input: {} }], body)
  assert.deepEqual(out.map((o) => o.outcome), ['ran'])
  const n = s.length
  assert.throws(() => s.assistant(ask), (e) => e instanceof TurnstoneError && e.kind === 'refused' && /t1/.test(e.message))
  await assert.rejects(s.runTools([{ callId: 't1', name: 'ls', input: {} }], body),
    (e) => e instanceof TurnstoneError && e.kind === 'refused')
  assert.equal(ran, 1, 'the answered tool ran again')
  assert.equal(s.length, n, 'nothing was appended')
  await st.close()
})
