'use strict'
// Several processes on one store directory (docs/MULTIPROCESS.md, issue
// 40): the first to open it hosts it, the others write through it; the
// host is killed again and again and no acknowledged event is lost.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawn, execFileSync } = require('node:child_process')
const { Store } = require('../turnstone.js')
const tmp = require('./tmp.js')

const worker = path.join(__dirname, 'mp_worker.js')
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
// A deadline that does not keep the test process alive.
const after = (ms, v) => new Promise((resolve) => setTimeout(() => resolve(v), ms).unref())

/** The pid holding the store's lock (the host), from /proc/locks. */
function lockHolder (dir) {
  const ino = fs.statSync(path.join(dir, 'LOCK')).ino
  for (const line of fs.readFileSync('/proc/locks', 'utf8').split('\n')) {
    const p = line.trim().split(/\s+/)
    if (p.includes('->') || p.length < 6) continue
    if (p[1] === 'FLOCK' && p[5].endsWith(`:${ino}`)) return Number(p[4])
  }
  return null
}

test('a second process writes through the first', async () => {
  const d = tmp()
  const st = new Store(d)
  assert.equal(st.backend, 'embedded')
  const code = `
    const { Store } = require(${JSON.stringify(path.join(__dirname, '..', 'turnstone.js'))})
    const st = new Store(process.argv[1])
    if (st.backend !== 'shared') throw new Error(st.backend)
    const s = st.createSession('child')
    s.user('from the child')
    s.flush().then(() => st.close())`
  execFileSync(process.execPath, ['-e', code, d], { stdio: 'inherit', timeout: 60000 })
  const evs = await (await st.openReadOnly('child')).events()
  assert.equal(evs.at(-1).data.content[0].text, 'from the child')
  await st.close()
})

test('the host killed 20 times loses no acknowledged event', { timeout: 300000 }, async () => {
  const d = tmp()
  await new Store(d).close()
  const lines = []
  const kids = new Set()
  const start = () => {
    const p = spawn(process.execPath, [worker, d, '8'], { stdio: ['ignore', 'pipe', 'inherit'] })
    let buf = ''
    p.stdout.on('data', (chunk) => {
      buf += chunk
      const parts = buf.split('\n')
      buf = parts.pop()
      lines.push(...parts)
    })
    p.done = new Promise((resolve) => p.on('exit', (code, signal) => resolve(code ?? signal)))
    kids.add(p)
  }
  for (let i = 0; i < 4; i++) start()
  let kills = 0
  const deadline = Date.now() + 240000
  while (kills < 20) {
    assert.ok(Date.now() < deadline, `only ${kills} kills in 240 s`)
    await sleep(200 + Math.random() * 400)
    const pid = lockHolder(d)
    const victim = [...kids].find((p) => p.pid === pid)
    if (!victim) continue
    victim.kill('SIGKILL')
    await victim.done
    kids.delete(victim)
    kills++
    start()
  }
  fs.writeFileSync(path.join(d, 'stop'), '')
  for (const p of kids) {
    const code = await Promise.race([p.done, after(60000, 'hung')])
    assert.equal(code, 0, 'a worker did not stop cleanly (or hung)')
  }
  const acked = lines.filter((l) => l.startsWith('ACK ')).map((l) => l.split(' '))
  assert.ok(acked.length > 200, `${acked.length} acks`)
  const st = new Store(d, { readOnly: true })
  const seen = new Set()
  const bySession = new Map()
  for (const info of await st.sessions()) {
    const evs = await (await st.openReadOnly(info.id)).events()
    bySession.set(info.id, evs)
    for (const e of evs) {
      if (e.kind !== 'user/message') continue
      const tag = e.data.content[0].text
      assert.ok(!seen.has(tag), `${tag} twice`)
      seen.add(tag)
    }
  }
  for (const [, sid, seq, tag] of acked) {
    const evs = bySession.get(sid)
    assert.ok(Number(seq) < evs.length, `acknowledged ${tag} lost`)
    assert.equal(evs[Number(seq)].data.content[0].text, tag)
  }
  await st.close()
  console.log(`20 hosts killed: ${acked.length} acknowledged events, all there, none twice`)
})

test('a client follows, searches and flushes through the host', async () => {
  const d = tmp()
  const host = new Store(d)
  const client = new Store(d)
  assert.equal(client.backend, 'shared')
  const s = host.createSession('talk')
  const sub = client.subscribe('talk', 0)
  s.user('find the zebra')
  await s.flush()
  const e = await sub.next()
  assert.equal(e.seq, 0)
  assert.equal(e.kind, 'user/message')
  const hits = await client.search('zebra')
  assert.deepEqual(hits.map((h) => [h.session, h.seq]), [['talk', 0]])
  const c = client.createSession('mine')
  c.user('b')
  await c.flush()
  assert.equal((await (await host.openReadOnly('mine')).events()).length, 1)
  // What only the host runs is refused in a client, saying so.
  await assert.rejects(client.collect(), (err) => err.kind === 'refused' && /hosts the store/.test(err.message))
  await client.close()
  await host.close()
})

test('a LangGraph.js worker process checkpoints through the host', { timeout: 120000 }, async () => {
  const d = tmp()
  const host = new Store(d)
  const code = `
    const { TurnstoneSaver } = require(${JSON.stringify(path.join(__dirname, '..', 'langgraph.js'))})
    const { counterGraph } = require(${JSON.stringify(path.join(__dirname, 'langgraph', 'graphs.cjs'))})
    const saver = new TurnstoneSaver(process.argv[1])
    const graph = counterGraph(5).compile({ checkpointer: saver })
    const cfg = { configurable: { thread_id: 'worker-thread' } }
    graph.invoke({ n: 0, log: [] }, cfg).then(async (out) => {
      if (out.n !== 5) throw new Error(JSON.stringify(out))
      const st = await graph.getState(cfg)
      process.stdout.write(String(st.values.n))
      await saver.store.close()
    }).catch((e) => { console.error(e); process.exit(3) })`
  const out = execFileSync(process.execPath, ['-e', code, d], { timeout: 60000 }).toString()
  assert.equal(out, '5')
  const names = (await host.sessions()).map((s) => s.id)
  assert.ok(names.some((n) => n.includes('worker-thread')), names.join(','))
  await host.close()
})
