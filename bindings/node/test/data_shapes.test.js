'use strict'
// Bad event data from JavaScript (issue 39 §6, §1): a TurnstoneError of kind
// invalid_argument naming the kind and what is wrong — never a raw
// TypeError, never NaN silently stored as null or a Map as {} — and nothing
// written; text cut inside a UTF-16 pair keeps its event (U+FFFD).
const test = require('node:test')
const assert = require('node:assert/strict')
const { Store, TurnstoneError } = require('../turnstone.js')
const tmp = require('./tmp.js')

function refused(fn, words) {
  try {
    fn()
  } catch (e) {
    assert.ok(e instanceof TurnstoneError, `not a TurnstoneError: ${e}`)
    assert.equal(e.kind, 'invalid_argument', e.message)
    for (const w of words) assert.ok(e.message.includes(w), `${w} not in: ${e.message}`)
    return
  }
  assert.fail('did not throw')
}

const call = (x) => ({ call_id: 'c1', name: 'f', input: { x } })

test('bad data is a TurnstoneError naming the kind and the fault', async () => {
  const st = new Store(tmp())
  const s = st.createSession('d')
  const circular = {}
  circular.self = circular
  refused(() => s.append('turn/start', ['x']), ['turn/start', 'JSON object', 'array'])
  refused(() => s.append('turn/end', { turn_id: 't' }), ['turn/end', 'reason'])
  refused(() => s.append('turn/end', { turn_id: 't', reason: { kind: 'done' } }), ['reason', 'completed'])
  refused(() => s.append('tool/call', call(NaN)), ['tool/call', 'input.x', 'NaN'])
  refused(() => s.append('tool/call', call(-Infinity)), ['tool/call', 'Infinity'])
  refused(() => s.append('tool/call', call(10n)), ['tool/call', 'BigInt'])
  refused(() => s.append('tool/call', call(new Map([['a', 1]]))), ['tool/call', 'input.x', 'Map'])
  refused(() => s.append('tool/call', call(new Set([1]))), ['tool/call', 'Set'])
  refused(() => s.append('tool/call', call(circular)), ['tool/call', 'circular'])
  refused(() => s.append('user/message', undefined, { surface: 'append' }), ['user/message'])
  refused(() => s.append('user/message', { content: [] }, { surface: 42 }), ['surface'])
  assert.equal(s.length, 0)
  // null and {} where they belong are data, not faults.
  s.append('tool/call', { call_id: 'c2', name: 'f', input: { a: null, b: {}, c: [] } })
  await s.flush()
  assert.deepEqual((await s.events(0, 1))[0].data.input, { a: null, b: {}, c: [] })
  await st.close()
})

test('a lone surrogate is replaced and the event kept', async () => {
  const st = new Store(tmp())
  const s = st.createSession('u')
  s.user('streamed text cut mid-emoji: \ud83d')
  s.user('a whole one: \u{1f600}, and a backslash-u written out: \\ud83d')
  s.append('tool/call', { call_id: 'c', name: 'f', input: { '\udc00key': 'v\ud83d' } })
  await s.flush()
  const ev = await s.events(0, 3)
  assert.equal(ev[0].data.content[0].text, 'streamed text cut mid-emoji: \ufffd')
  assert.equal(ev[1].data.content[0].text, 'a whole one: \u{1f600}, and a backslash-u written out: \\ud83d')
  assert.deepEqual(ev[2].data.input, { '\ufffdkey': 'v\ufffd' })
  await st.close()
})
