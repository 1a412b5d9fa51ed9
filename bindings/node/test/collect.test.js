'use strict'
// Online collection (`store.collect`) and recycled segments
// (`recycleSegments`) on a store directory: bytes of deleted sessions
// reclaimed while the store stays open, free files made into new segments,
// a dry run that changes nothing, and bad options refused.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { Store, TurnstoneError } = require('../turnstone.js')

const made = []
const tmp = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstone-node-gc-'))
  made.push(d)
  return d
}
test.after(() => {
  for (const d of made) fs.rmSync(d, { recursive: true, force: true })
})

// Small segments, so that a few sessions fill several of them.
const SEGMENT = 64 * 1024

// The store's segment files (not free ones), and their total size.
function segments(dir) {
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.tseg')).sort()
  return { files, bytes: files.reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0) }
}
// The segment file the store writes ahead of need (Options::prepare_segments,
// a background thread, so it may appear at any moment) and its temporary name.
const PREPARED = '0000000000.tseg.free'
const freeFiles = (dir) => fs.readdirSync(dir).filter((f) => f.endsWith('.tseg.free') && f !== PREPARED)
const namesOf = (dir) => fs.readdirSync(dir).filter((f) => !f.startsWith(PREPARED)).sort()

// Sessions of `events` tool call/result pairs with a result of about 4 KB
// each (distinct text per event), flushed and released.
async function fill(st, ids, events = 20) {
  for (const id of ids) {
    const s = st.createSession(id)
    for (let i = 0; i < events; i++) {
      const callId = `${id}-c${i}`
      s.append('tool/call', { call_id: callId, name: 'read_file', input: { n: i } })
      s.append('tool/result', { call_id: callId, content: [{ type: 'text', text: `${id} ${i} `.padEnd(4000, 'y') }], is_error: false }, { surface: 'append' })
    }
    await s.flush()
    s.close()
  }
}

// A kept session, then four that fill several segments and are deleted.
async function keptAndDeleted(dir, options = {}) {
  const st = new Store(dir, { segmentBytes: SEGMENT, ...options })
  const keep = st.createSession('keep')
  keep.append('turn/start', { turn_id: 't1' })
  keep.user('hello')
  keep.assistant({ content: [{ type: 'text', text: 'hi' }], stop_reason: 'end_turn' })
  await keep.flush()
  keep.close()
  await fill(st, ['d0', 'd1', 'd2', 'd3'])
  for (const id of ['d0', 'd1', 'd2', 'd3']) await st.delete(id)
  return st
}

function kindOf(fn) {
  try {
    fn()
  } catch (e) {
    assert.ok(e instanceof TurnstoneError, `not a TurnstoneError: ${e}`)
    return [e.kind, e.message]
  }
  assert.fail('did not throw')
}

test('collect reclaims deleted sessions while the store stays open', async () => {
  const dir = tmp()
  const st = await keptAndDeleted(dir)
  const events = await st.replay('keep')
  const messages = (await st.openReadOnly('keep')).messages('anthropic')
  const before = segments(dir)
  assert.ok(before.files.length >= 4, `only ${before.files.length} segments: the test proves little`)
  const report = await st.collect()
  assert.equal(report.dry_run, false)
  assert.equal(report.sessions_reclaimed, 4)
  assert.ok(report.segment_files_removed > 0, JSON.stringify(report))
  assert.ok(report.bytes_reclaimed > 0, JSON.stringify(report))
  assert.ok(report.bytes_after < report.bytes_before, JSON.stringify(report))
  const after = segments(dir)
  assert.ok(after.bytes < before.bytes, `segment bytes ${before.bytes} -> ${after.bytes}`)
  assert.ok(after.files.length < before.files.length)
  assert.deepEqual(freeFiles(dir), [], 'without recycleSegments freed files are removed')
  // The kept session reads back unchanged, and takes appends.
  assert.deepEqual(await st.replay('keep'), events)
  assert.deepEqual((await st.openReadOnly('keep')).messages('anthropic'), messages)
  assert.deepEqual((await st.sessions()).map((x) => x.id), ['keep'])
  const s = await st.openSession('keep')
  s.user('after the collection')
  await s.flush()
  s.close()
  // Nothing is left to reclaim.
  const again = await st.collect()
  assert.equal(again.sessions_reclaimed, 0)
  assert.equal(again.segment_files_removed, 0)
  await st.close()
  await assert.rejects(st.collect(), (e) => e instanceof TurnstoneError && e.kind === 'closed')
  const re = new Store(dir)
  const back = await re.replay('keep')
  assert.deepEqual(back.slice(0, events.length), events)
  assert.equal(back.at(-1).data.content[0].text, 'after the collection')
  await re.close()
})

test('recycleSegments: collected files become free files, then new segments', async () => {
  const dir = tmp()
  const st = await keptAndDeleted(dir, { recycleSegments: 4 })
  const report = await st.collect()
  assert.ok(report.segment_files_removed > 0, JSON.stringify(report))
  const free = freeFiles(dir)
  assert.ok(free.length > 0 && free.length <= 4, `free files: ${free}`)
  // Appends that roll new segments take them from the free files.
  await fill(st, ['n0', 'n1'], 30)
  assert.ok(freeFiles(dir).length < free.length, `free files ${free.length} -> ${freeFiles(dir).length}`)
  const expected = {}
  for (const id of ['keep', 'n0', 'n1']) expected[id] = await st.replay(id)
  assert.equal(expected.n1.length, 60)
  assert.equal(expected.n1.at(-1).data.content[0].text, 'n1 29 '.padEnd(4000, 'y'))
  await st.close()
  const re = new Store(dir, { segmentBytes: SEGMENT, recycleSegments: 4 })
  for (const id of Object.keys(expected)) assert.deepEqual(await re.replay(id), expected[id], id)
  assert.deepEqual((await re.sessions()).map((x) => x.id).sort(), ['keep', 'n0', 'n1'])
  await re.close()
})

test('directWrites: batches into recycled segments go around the page cache and read back', async () => {
  // The engine's tests check the bytes on disk; here the data must come back.
  const dir = tmp()
  const st = await keptAndDeleted(dir, { recycleSegments: 4, directWrites: true })
  await st.collect()
  const free = freeFiles(dir)
  assert.ok(free.length > 0, 'the collection kept no free file')
  await fill(st, ['n0', 'n1'], 30)
  assert.ok(freeFiles(dir).length < free.length, `free files ${free.length} -> ${freeFiles(dir).length}`)
  const small = st.createSession('small')
  for (let i = 0; i < 50; i++) {
    small.user('x'.repeat((i * 37) % 700 + 1)) // batch ends all over a block
    await small.flush()
  }
  small.close()
  const expected = {}
  for (const id of ['keep', 'n0', 'n1', 'small']) expected[id] = await st.replay(id)
  assert.equal(expected.small.length, 50)
  await st.close()
  for (const options of [{ segmentBytes: SEGMENT, recycleSegments: 4, directWrites: true }, {}]) {
    const re = new Store(dir, options)
    for (const id of Object.keys(expected)) assert.deepEqual(await re.replay(id), expected[id], id)
    await re.close()
  }
  const [kind, message] = kindOf(() => new Store(tmp(), { directWrites: 1 }))
  assert.equal(kind, 'invalid_argument')
  assert.match(message, /directWrites must be true or false/)
})

test('collect dryRun reports and changes nothing', async () => {
  const dir = tmp()
  const st = await keptAndDeleted(dir, { recycleSegments: 4 })
  const listing = () => namesOf(dir).map((f) => [f, fs.statSync(path.join(dir, f)).size])
  const before = listing()
  const report = await st.collect({ dryRun: true, threshold: 0.5 })
  assert.equal(report.dry_run, true)
  assert.equal(report.sessions_reclaimed, 4)
  assert.ok(report.bytes_reclaimed > 0 && report.segment_files_removed > 0, JSON.stringify(report))
  assert.deepEqual(listing(), before)
  // It did not reclaim them either: a real collection still does.
  assert.equal((await st.collect()).sessions_reclaimed, 4)
  await st.close()
})

test('prepareSegments turns the preparer on and off', async () => {
  const off = tmp()
  let st = new Store(off, { segmentBytes: SEGMENT, prepareSegments: false })
  await fill(st, ['s0', 's1', 's2', 's3'])
  assert.ok(segments(off).files.length > 2, 'several segments')
  await new Promise((r) => setTimeout(r, 300))
  assert.ok(!fs.readdirSync(off).some((f) => f.startsWith(PREPARED)), fs.readdirSync(off).join(' '))
  st.close()
  const on = tmp()
  st = new Store(on, { segmentBytes: SEGMENT })
  await fill(st, ['s0', 's1', 's2', 's3'])
  // The writer asked at its rolls; the thread writes the file soon.
  const deadline = Date.now() + 10000
  while (!fs.existsSync(path.join(on, PREPARED))) {
    assert.ok(Date.now() < deadline, fs.readdirSync(on).join(' '))
    await new Promise((r) => setTimeout(r, 20))
  }
  assert.equal(fs.statSync(path.join(on, PREPARED)).size, SEGMENT)
  st.close()
  const [kind, message] = kindOf(() => new Store(tmp(), { prepareSegments: 'no' }))
  assert.equal(kind, 'invalid_argument')
  assert.match(message, /prepareSegments must be true or false/)
})

test('bad collection options are refused with typed errors', async () => {
  let [kind, message] = kindOf(() => new Store(tmp(), { segmentBytes: 100 }))
  assert.equal(kind, 'invalid_argument')
  assert.match(message, /below the minimum/)
  for (const bad of [-1, 1.5, 2 ** 32]) {
    ;[kind, message] = kindOf(() => new Store(tmp(), { segmentBytes: bad }))
    assert.equal(kind, 'invalid_argument')
    assert.match(message, /segmentBytes must be a whole number/)
  }
  ;[kind, message] = kindOf(() => new Store(tmp(), { recycleSegments: -2 }))
  assert.equal(kind, 'invalid_argument')
  assert.match(message, /recycleSegments must be a whole number/)
  // A database takes neither (refused before any connection is tried;
  // recycleSegments: 0, off, is what a database has anyway).
  for (const opt of [{ recycleSegments: 2 }, { segmentBytes: SEGMENT }, { prepareSegments: false }, { directWrites: true }]) {
    ;[kind, message] = kindOf(() => new Store('postgres://127.0.0.1:1/none', opt))
    assert.equal(kind, 'invalid_argument')
    assert.match(message, /not of a database/)
  }
  const dir = tmp()
  const st = new Store(dir)
  const s = st.createSession('s')
  s.user('kept')
  await s.flush()
  const before = namesOf(dir)
  for (const threshold of [2, -0.1, NaN]) {
    await assert.rejects(
      st.collect({ threshold }),
      (e) => e instanceof TurnstoneError && e.kind === 'invalid_argument' && /threshold must be within 0.0 and 1.0/.test(e.message),
      String(threshold),
    )
  }
  assert.deepEqual(namesOf(dir), before)
  assert.equal((await st.collect({ threshold: 1 })).sessions_reclaimed, 0)
  await st.close()
})
