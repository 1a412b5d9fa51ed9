'use strict'
// Typed event data (issue 39 §1): turnstone.d.ts declares one interface per
// core kind whose required and optional fields are those of the engine's
// types (`turnstone schema`), and the turn/step helpers write what the
// engine expects.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { execFileSync } = require('node:child_process')
const turnstone = require('../turnstone.js')
const { Store, TurnstoneError } = turnstone
const tmp = require('./tmp.js')

function schema() {
  return turnstone.schema()
}

const BIN = process.env.TURNSTONE_BIN
test('the package schema is the CLI schema', { skip: !BIN && 'TURNSTONE_BIN is not set' }, () => {
  const cli = JSON.parse(execFileSync(BIN, ['schema'], { encoding: 'utf8' }))
  assert.deepEqual(turnstone.schema(), cli)
  assert.deepEqual(turnstone.schema('turn/end'), cli['turn/end'])
})

test('an unknown kind has no schema', () => {
  assert.throws(() => turnstone.schema('turn/finish'), (e) => {
    assert.ok(e instanceof TurnstoneError)
    assert.equal(e.kind, 'invalid_argument')
    assert.match(e.message, /turn\/end/)
    return true
  })
})

// `export interface Name { a: T; b?: U; [k: string]: any }` → {required, optional}
function declared() {
  const text = fs.readFileSync(path.join(__dirname, '..', 'turnstone.d.ts'), 'utf8')
  const out = {}
  for (const m of text.matchAll(/^export interface (\w+) \{([^\n]*)\}$/gm)) {
    const fields = { required: [], optional: [] }
    for (const part of m[2].split(';')) {
      const f = /^\s*(\w+)(\??):/.exec(part)
      if (f) (f[2] ? fields.optional : fields.required).push(f[1])
    }
    out[m[1]] = fields
  }
  const kinds = {}
  const block = /export interface CoreEvents \{\n([\s\S]*?)\n\}/.exec(text)[1]
  for (const m of block.matchAll(/'([^']+)': (\w+)/g)) kinds[m[1]] = m[2]
  return { interfaces: out, kinds }
}

test('each kind interface has the fields of the engine type', () => {
  const kinds = schema()
  const { interfaces, kinds: declaredKinds } = declared()
  assert.deepEqual(Object.keys(declaredKinds).sort(), Object.keys(kinds).sort())
  const defs = {}
  for (const [name, s] of Object.entries(kinds)) {
    Object.assign(defs, s.$defs ?? {})
    const iface = interfaces[declaredKinds[name]]
    assert.ok(iface, `${name}: interface ${declaredKinds[name]}`)
    const required = s.required ?? []
    const optional = Object.keys(s.properties ?? {}).filter((k) => !required.includes(k))
    assert.deepEqual(iface.required.sort(), [...required].sort(), name)
    assert.deepEqual(iface.optional.sort(), optional.sort(), name)
  }
  for (const name of ['EpochHeader', 'CallConfig', 'ToolSchema']) {
    const d = defs[name]
    const required = d.required ?? []
    assert.deepEqual(interfaces[name].required.sort(), [...required].sort(), name)
    assert.deepEqual(interfaces[name].optional.sort(), Object.keys(d.properties).filter((k) => !required.includes(k)).sort(), name)
  }
})

test('turn and step helpers write the engine shapes', async () => {
  const st = new Store(tmp())
  const s = st.createSession('s')
  s.startTurn('t1')
  s.startStep('t1', 's1')
  s.user('hi')
  s.endStep('t1', 's1', 'tool_use')
  s.endTurn('t1', 'error', { message: 'model timed out' })
  const data = (await s.events()).map((e) => [e.kind, e.data])
  assert.deepEqual(data[3], ['step/end', { turn_id: 't1', step_id: 's1', reason: { kind: 'tool_use' } }])
  assert.deepEqual(data[4], ['turn/end', { turn_id: 't1', reason: { kind: 'error', message: 'model timed out' } }])
  assert.deepEqual(s.turns()[0].reason, { kind: 'error', message: 'model timed out' })
  for (const bad of [() => s.endTurn('t1', 'error'), () => s.endTurn('t1', 'completed', { message: 'x' }), () => s.endTurn('t1', 'done')]) {
    assert.throws(bad, (e) => e instanceof TurnstoneError && e.kind === 'invalid_argument')
  }
  assert.equal(s.length, 5)
  await st.close()
})
