'use strict'
// The Node package: each API, bad input, concurrency, a SIGKILL crash loop,
// and stores shared with the Rust CLI (TURNSTONE_BIN, set by run.sh).
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawn, execFileSync } = require('node:child_process')
const { Store, TurnstoneError, ToolRefused, ToolAborted } = require('../turnstone.js')

const made = []
const tmp = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstone-node-'))
  made.push(d)
  return d
}
// Each store preallocates its first segment: remove them all at the end.
test.after(() => {
  for (const d of made) fs.rmSync(d, { recursive: true, force: true })
})
const THINKING = { type: 'thinking', thinking: 'let me see', signature: 'EqQBCkYIAxgC' }
const IMAGE = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }
const FUTURE = { type: 'block_from_the_future', payload: { nested: [1, 2.5, null, true] } }

function kindOf(fn) {
  try {
    fn()
  } catch (e) {
    assert.ok(e instanceof TurnstoneError, `not a TurnstoneError: ${e}`)
    return e.kind
  }
  assert.fail('did not throw')
}

test('quick start and provider content crossing unchanged', async () => {
  const st = new Store(tmp())
  const s = st.createSession('s1')
  s.append('turn/start', { turn_id: 't1' })
  s.user([{ type: 'text', text: 'look' }, IMAGE])
  const blocks = [THINKING, { type: 'text', text: 'an answer' }, FUTURE]
  const seq = s.assistant({ content: blocks, stop_reason: 'end_turn' })
  await s.flush()
  assert.deepEqual((await s.events(seq, seq + 1))[0].data.content, blocks)
  assert.deepEqual((await st.replay('s1'))[seq].data.content, blocks)
  const body = s.messages('anthropic')
  assert.deepEqual(body.messages[1].content, blocks)
  assert.deepEqual(body.messages[0].content[1], IMAGE)
  assert.equal((await st.sessions())[0].openTurn, true)
  await st.close()
})

test('bad input throws typed errors and writes nothing', async () => {
  const st = new Store(tmp())
  const s = st.createSession('b')
  s.user('one')
  const n = s.length
  assert.equal(kindOf(() => s.append('user/message', { content: [] })), 'invalid_argument')
  assert.equal(kindOf(() => s.append('turn/end', { turn_id: 'x' }, { surface: 'append' })), 'invalid_argument')
  assert.equal(kindOf(() => s.append('tool/call', { name: 3 })), 'invalid_argument')
  assert.equal(kindOf(() => s.append('no/such-kind', {})), 'invalid_argument')
  // Over the payload limit inline: 70 blocks of 250 KB, each under the blob
  // threshold (256 KiB), so none goes out of line.
  assert.equal(kindOf(() => s.user(Array(70).fill({ type: 'text', text: 'x'.repeat(250_000) }))), 'too_large')
  assert.equal(kindOf(() => s.append('user/message', { content: [] }, { surface: 42 })), 'invalid_argument')
  assert.equal(kindOf(() => s.append('user/message', undefined, { surface: 'append' })), 'invalid_argument')
  assert.equal(s.length, n)
  // One 17 MiB block is stored once as a blob (FORMAT.md §15) and reads back.
  const huge = 'x'.repeat(17 * 1024 * 1024)
  s.user(huge)
  await s.flush()
  assert.equal((await s.events()).at(-1).data.content[0].text, huge)
  assert.equal(kindOf(() => st.createSession('b')), 'session_exists')
  assert.equal(kindOf(() => s.messages('gemini')), 'invalid_argument')
  assert.equal(s.length, n + 1)
  await assert.rejects(st.openSession('missing'), (e) => e instanceof TurnstoneError && e.kind === 'unknown_session')
  await st.close()
  assert.equal(kindOf(() => st.createSession('c')), 'closed')
  // Every asynchronous call of a closed store rejects with the typed error
  // too (not a plain Error carrying the error's JSON).
  const closed = (e) => e instanceof TurnstoneError && e.kind === 'closed'
  for (const f of [() => st.openSession('s'), () => st.openReadOnly('s'), () => st.sessions(),
    () => st.fork('s'), () => st.replay('s'), () => st.search('x'), () => st.delete('s'),
    () => st.collect()]) {
    await assert.rejects(f, closed)
  }
})

test('toolCall: order, refusal, abort, failure, oversized result', async () => {
  const st = new Store(tmp())
  const s = st.createSession('t')
  s.append('turn/start', { turn_id: 't1' })
  await s.toolCall('c1', 'ls', { path: '.' }, async () => {
    const kinds = (await st.replay('t')).map((e) => e.kind)
    assert.equal(kinds.at(-1), 'tool/call', 'the body runs only once its tool/call is durable')
    return 'a b c'
  })
  await assert.rejects(
    s.toolCall('c2', 'rm', {}, () => assert.fail('the body ran'), { guard: () => 'no deletes' }),
    ToolRefused,
  )
  await assert.rejects(
    s.toolCall('c3', 'ls', {}, () => assert.fail('the body ran'), { cancelled: () => true }),
    ToolAborted,
  )
  await assert.rejects(s.toolCall('c4', 'div', {}, async () => { throw new Error('boom') }), /boom/)
  // Too large inline: many blocks each under the blob threshold.
  const big = await s.toolCall('c5', 'big', {}, () => Array(70).fill({ type: 'text', text: 'y'.repeat(250_000) }))
  assert.match(big.notRecorded, /not recorded/)
  const results = Object.fromEntries((await s.events()).filter((e) => e.kind === 'tool/result').map((e) => [e.data.call_id, e.data]))
  assert.deepEqual(Object.keys(results).sort(), ['c1', 'c2', 'c3', 'c4', 'c5'])
  assert.deepEqual(results.c1.content, [{ type: 'text', text: 'a b c' }])
  assert.equal(results.c3.status, 'ABORTED_BEFORE_DISPATCH')
  assert.ok(results.c4.is_error && results.c5.is_error)
  await st.close()
})

test('concurrent promises append to their own sessions', async () => {
  const st = new Store(tmp())
  await Promise.all(
    Array.from({ length: 8 }, async (_, i) => {
      const s = st.createSession(`w${i}`)
      for (let j = 0; j < 200; j++) {
        s.user(`message ${j}`)
        if (j % 20 === 19) await s.flush()
      }
      await s.flush()
    }),
  )
  const lens = Object.fromEntries((await st.sessions()).map((x) => [x.id, x.events]))
  assert.deepEqual(lens, Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`w${i}`, 200])))
  await st.close()
})

test('subscribe, fork, search, metadata, delete', async () => {
  const st = new Store(tmp())
  const s = st.createSession('live')
  const sub = st.subscribe('live')
  const seen = (async () => {
    const out = []
    for await (const ev of sub) {
      out.push(ev.seq)
      if (out.length === 3) return out
    }
    return out
  })()
  s.append('turn/start', { turn_id: 't1' })
  assert.equal(st.subscribe('live').tryNext(), null, 'not durable yet')
  s.user('deploy the frobnicator')
  s.append('turn/end', { turn_id: 't1', reason: { kind: 'completed' } })
  await s.flush()
  assert.deepEqual(await seen, [0, 1, 2])
  assert.equal(await st.fork('live', { child: 'kid' }), 'kid')
  assert.equal((await st.replay('kid')).length, 3)
  assert.equal((await st.search('frobnicator'))[0].session, 'live')
  s.setTitle('Deploy')
  s.addTag('ops')
  s.setMeta('branch', 'main')
  assert.deepEqual(s.metadata, { title: 'Deploy', tags: ['ops'], fields: { branch: 'main' } })
  await assert.rejects(st.delete('live'), (e) => e.kind === 'session_live')
  // Closing the handle releases the session: it can then be deleted, and
  // the closed handle refuses every call.
  await s.flush()
  s.close()
  s.close()
  assert.equal(kindOf(() => s.append('turn/start', { turn_id: 't2' })), 'invalid_argument')
  assert.equal(kindOf(() => s.length), 'invalid_argument')
  await assert.rejects(s.flush(), (e) => e instanceof TurnstoneError && e.kind === 'invalid_argument')
  await assert.rejects(s.events(), (e) => e instanceof TurnstoneError)
  assert.ok((await st.delete('live')) > 0)
  assert.ok(!(await st.sessions()).some((x) => x.id === 'live'), 'deleted sessions are not listed')
  assert.equal((await st.replay('kid')).length, 3, 'the fork still reads what it inherited')
  await st.close()
})

const AGENT = `
const { Store } = require(${JSON.stringify(path.join(__dirname, '..', 'turnstone.js'))})
const fs = require('node:fs')
const [dir, acks, effects] = process.argv.slice(1)
;(async () => {
  const st = new Store(dir)
  const ids = (await st.sessions()).map((x) => x.id)
  const s = ids.includes('agent') ? await st.openSession('agent') : st.createSession('agent')
  let turn = (await s.events()).filter((e) => e.kind === 'turn/start').length
  for (;;) {
    const t = 't' + turn
    s.append('turn/start', { turn_id: t })
    s.user('question ' + turn)
    const calls = [[t + '-a', 'write_file'], [t + '-b', 'read_file']]
    s.assistant({ content: [THINKING_, ...calls.map(([id, name]) => ({ type: 'tool_use', id, name, input: { n: turn } }))], stop_reason: 'tool_use' })
    for (const [id, name] of calls) {
      await s.toolCall(id, name, { n: turn }, async () => {
        if (name === 'write_file') fs.appendFileSync(effects, id + '\\n')
        return name + ' done'
      })
    }
    s.assistant({ content: [{ type: 'text', text: 'answer ' + turn }], stop_reason: 'end_turn' })
    s.append('turn/end', { turn_id: t, reason: { kind: 'completed' } })
    await s.flush()
    fs.appendFileSync(acks, s.length + '\\n')
    turn++
  }
})()
`.replace('THINKING_', JSON.stringify(THINKING))

test('SIGKILL at random moments, 20 rounds: nothing acknowledged lost, repaired, valid', async () => {
  const dir = path.join(tmp(), 'store')
  const acks = path.join(tmp(), 'acks')
  const effects = path.join(tmp(), 'effects')
  fs.writeFileSync(acks, '')
  fs.writeFileSync(effects, '')
  let repaired = 0
  let seed = 7
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648)
  for (let round = 0; round < 20; round++) {
    const child = spawn(process.execPath, ['-e', AGENT, dir, acks, effects], { stdio: 'ignore' })
    await new Promise((r) => setTimeout(r, 250 + rand() * 350))
    child.kill('SIGKILL')
    const sig = await new Promise((r) => child.on('exit', (_code, s) => r(s)))
    assert.equal(sig, 'SIGKILL', `round ${round}: the child ended on its own`)
    const st = new Store(dir)
    const s = await st.openSession('agent')
    if (s.repairReport !== null) repaired++
    const events = await s.events()
    const acked = Math.max(0, ...fs.readFileSync(acks, 'utf8').split('\n').filter(Boolean).map(Number))
    assert.ok(events.length >= acked, `round ${round}: acknowledged events lost`)
    assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i))
    const calls = new Set(events.filter((e) => e.kind === 'tool/call').map((e) => e.data.call_id))
    for (const id of fs.readFileSync(effects, 'utf8').split('\n').filter(Boolean)) {
      assert.ok(calls.has(id), `tool body ${id} ran without a durable tool/call`)
    }
    const results = new Set(events.filter((e) => e.kind === 'tool/result').map((e) => e.data.call_id))
    for (const id of calls) assert.ok(results.has(id), `call ${id} has no result after repair`)
    const msgs = s.messages('anthropic').messages
    assert.equal(msgs[0].role, 'user')
    for (let i = 1; i < msgs.length; i++) assert.notEqual(msgs[i].role, msgs[i - 1].role)
    await st.close()
  }
  assert.ok(repaired > 0, 'no kill landed inside a turn: the test proved nothing')
})

const BIN = process.env.TURNSTONE_BIN
test('stores shared with the Rust CLI, both ways', { skip: !BIN && 'TURNSTONE_BIN is not set' }, async () => {
  const d = tmp()
  const st = new Store(d)
  const s = st.createSession('node-1')
  s.append('turn/start', { turn_id: 't' })
  s.user('hello')
  s.assistant({ content: [THINKING, { type: 'text', text: 'hi' }, FUTURE], stop_reason: 'end_turn' })
  await s.flush()
  const mine = Object.fromEntries(['anthropic', 'openai-responses', 'openai-chat'].map((f) => [f, s.messages(f)]))
  await st.close()
  const verify = JSON.parse(execFileSync(BIN, ['verify', d, '--json'], { encoding: 'utf8' }))
  assert.equal(verify.ok, true)
  for (const [f, body] of Object.entries(mine)) {
    assert.deepEqual(JSON.parse(execFileSync(BIN, ['messages', d, '--session', 'node-1', '--format', f], { encoding: 'utf8' })), body)
  }
  const r = path.join(tmp(), 'rs')
  execFileSync(BIN, ['fleet', r, '--sessions', '2', '--threads', '1', '--events', '300'], { stdio: 'ignore' })
  const ro = new Store(r, { readOnly: true })
  for (const { id } of await ro.sessions()) {
    const v = await ro.openReadOnly(id)
    assert.deepEqual(v.messages('anthropic'), JSON.parse(execFileSync(BIN, ['messages', r, '--session', id, '--format', 'anthropic'], { encoding: 'utf8' })))
  }
  await ro.close()
})

test('runTools: one group, one wait, bodies concurrent; plugin kinds', async () => {
  const st = new Store(tmp(), { plugins: { 'harness/note': true } })
  const s = st.createSession('par')
  s.append('turn/start', { turn_id: 't' })
  const calls = [0, 1, 2, 3].map((i) => ({ callId: `c${i}`, name: 'sleep', input: { ms: 200 } }))
  calls.push({ callId: 'bad', name: 'rm' }, { callId: 'boom', name: 'fail' })
  const seen = []
  const t0 = Date.now()
  const out = await s.runTools(
    calls,
    async (c) => {
      if (c.name === 'fail') throw new Error('nope')
      seen.push(new Set((await st.replay('par')).filter((e) => e.kind === 'tool/call').map((e) => e.data.call_id)))
      await new Promise((r) => setTimeout(r, c.input.ms))
      return `slept ${c.callId}`
    },
    { guard: (c) => (c.name === 'rm' ? 'no rm' : null) },
  )
  assert.ok(Date.now() - t0 < 700, 'bodies ran concurrently')
  assert.deepEqual(out.map((o) => o.outcome), ['ran', 'ran', 'ran', 'ran', 'refused', 'failed'])
  for (const d of seen) assert.equal(d.size, 6, 'every call durable before any body')
  const kinds = (await s.events()).map((e) => e.kind)
  assert.deepEqual(kinds.slice(1, 7), Array(6).fill('tool/call'))
  const aborted = await s.runTools([{ callId: 'x', name: 'ls' }], () => assert.fail('ran'), { cancelled: () => true })
  assert.equal(aborted[0].outcome, 'aborted')
  const seq = s.append('harness/note', { text: 'remember' })
  assert.equal((await s.events(seq, seq + 1))[0].kind, 'harness/note')
  assert.throws(() => s.append('harness/other', {}), (e) => e.kind === 'invalid_argument')
  await st.close()
  assert.throws(() => new Store(tmp(), { plugins: { 'user/message': false } }), TurnstoneError)
})

// A store written from Python is read from Node, and the other way round
// (run.sh points TURNSTONE_PYTHON at the Python package's venv when built).
const PY = process.env.TURNSTONE_PYTHON
test('stores shared with the Python package, both ways', { skip: !PY && 'TURNSTONE_PYTHON is not set' }, async () => {
  const d = tmp()
  const write = `
import json, sys, turnstone
with turnstone.Store(sys.argv[1]) as st:
    s = st.create_session("from-python")
    s.append("turn/start", {"turn_id": "t"})
    s.user("hello from python")
    s.assistant({"content": json.loads(sys.argv[2]), "stop_reason": "end_turn"})
    s.flush()
    print(json.dumps(s.messages(format="anthropic")))
`
  const content = JSON.stringify([THINKING, FUTURE, { type: 'text', text: 'ok' }])
  const pyBody = JSON.parse(execFileSync(PY, ['-c', write, d, content], { encoding: 'utf8', cwd: os.tmpdir() }))
  assert.deepEqual(pyBody.messages[1].content, JSON.parse(content), 'python kept the blocks')
  const st = new Store(d)
  const v = await st.openReadOnly('from-python')
  assert.deepEqual(v.messages('anthropic'), pyBody)
  const s = st.createSession('from-node')
  s.user('hello from node')
  s.assistant({ content: [THINKING, IMAGE, FUTURE], stop_reason: 'end_turn' })
  await s.flush()
  const nodeBody = s.messages('openai-responses')
  await st.close()
  const read = `
import json, sys, turnstone
with turnstone.Store(sys.argv[1], read_only=True) as st:
    print(json.dumps(st.open_read_only("from-node").messages(format="openai-responses")))
`
  assert.deepEqual(JSON.parse(execFileSync(PY, ['-c', read, d], { encoding: 'utf8', cwd: os.tmpdir() })), nodeBody)
})
