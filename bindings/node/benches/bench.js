'use strict'
// Benchmarks of the Node package (not tests). Build first (npm run build), then:
//   node benches/bench.js [--turnstone-bin PATH] [--seconds 5] [--runs 3]
// 1. append of a 1 KiB user/message from Node: median per call over batches
//    of 100 calls, 20,000 calls into sessions of 1,000 events (the steady
//    cost), then 20,000 into one session (which also grows the session's
//    in-memory message cache by ~20 MB);
// 2. the fleet turn shape over 256 sessions from 8 concurrent async tasks,
//    durable events/s, next to `turnstone fleet --sessions 256 --threads 8
//    --events 200000` (Rust) in the same run;
// 3. durable writers: --writers (32) concurrent async tasks, each appending
//    a 1 KiB user/message to its own session and awaiting its durability
//    before the next, durable events/s; next to the same loop on
//    better-sqlite3 (one WAL database, synchronous=FULL, one INSERT per
//    event in its own transaction: better-sqlite3 is synchronous, so the
//    tasks take turns on the event loop), in the same run.
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFileSync } = require('node:child_process')
const { Store } = require('../turnstone.js')

const args = process.argv.slice(2)
const opt = (name, dflt) => {
  const i = args.indexOf(name)
  return i >= 0 ? args[i + 1] : dflt
}
const bin = opt('--turnstone-bin')
const seconds = Number(opt('--seconds', 5))
const runs = Number(opt('--runs', 3))
const writers = Number(opt('--writers', 32))
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]

// Median µs per append: [sessions of 1,000 appends, one session of 20,000].
// A session keeps its model-visible messages in memory, so the second also
// pays for ~20 MB of fresh memory (first-touch page faults, which cost much
// on this VM); the first is the steady cost.
async function benchAppend(dir) {
  const st = new Store(dir)
  const data = { content: [{ type: 'text', text: 'x'.repeat(1000) }] }
  const out = []
  for (const perSession of [10, 200]) {
    const per = []
    let s = null
    for (let b = 0; b < 200; b++) {
      if (b % perSession === 0) {
        if (s) {
          await s.flush()
          s.close()
        }
        s = st.createSession(`append-${perSession}-${b}`)
      }
      const t0 = process.hrtime.bigint()
      for (let i = 0; i < 100; i++) s.append('user/message', data, { surface: 'append' })
      per.push(Number(process.hrtime.bigint() - t0) / 100 / 1000)
    }
    await s.flush()
    s.close()
    out.push(median(per))
  }
  await st.close()
  return out
}

async function turn(s, t) {
  let n = 0
  s.append('turn/start', { turn_id: t }); n++
  s.user('please do the thing '.repeat(15)); n++
  s.append('step/start', { turn_id: t, step_id: 's' }); n++
  for (let j = 0; j < 20; j++) { s.append('assistant/chunk', { index: j, text: 'c'.repeat(80) }); n++ }
  s.assistant({ content: [{ type: 'text', text: 'y'.repeat(1000) }, { type: 'tool_use', id: t + 'c', name: 'sh', input: { cmd: 'ls' } }], stop_reason: 'tool_use' }); n++
  await s.toolCall(t + 'c', 'sh', { cmd: 'ls' }, async () => 'z'.repeat(4000)); n += 2
  s.append('step/end', { turn_id: t, step_id: 's', reason: { kind: 'tool_use' } }); n++
  s.append('turn/end', { turn_id: t, reason: { kind: 'completed' } }); n++
  await s.flush()
  return n
}

async function benchFleet(dir) {
  const st = new Store(dir)
  const sessions = Array.from({ length: 256 }, (_, i) => st.createSession(`s${i}`))
  const stop = Date.now() + seconds * 1000
  const t0 = Date.now()
  const counts = await Promise.all(
    Array.from({ length: 8 }, async (_, k) => {
      const mine = sessions.filter((_, i) => i % 8 === k)
      let n = 0
      for (let r = 0; Date.now() < stop; r++) {
        for (const s of mine) {
          n += await turn(s, `t${r}`)
          if (Date.now() >= stop) break
        }
      }
      return n
    }),
  )
  const secs = (Date.now() - t0) / 1000
  await st.close()
  return counts.reduce((a, b) => a + b, 0) / secs
}

async function benchWriters(dir) {
  const data = { content: [{ type: 'text', text: 'x'.repeat(1000) }] }
  const st = new Store(path.join(dir, 'ts'))
  const sessions = Array.from({ length: writers }, (_, k) => st.createSession(`w${k}`))
  let stop = Date.now() + seconds * 1000
  let t0 = Date.now()
  const counts = await Promise.all(sessions.map(async (s) => {
    let n = 0
    while (Date.now() < stop) {
      s.append('user/message', data, { surface: 'append' })
      await s.flush()
      n++
    }
    return n
  }))
  const ts = counts.reduce((a, b) => a + b, 0) / ((Date.now() - t0) / 1000)
  await st.close()

  const Database = require('better-sqlite3')
  const db = new Database(path.join(dir, 'peer.sqlite3'))
  db.pragma('journal_mode = WAL')
  db.pragma('synchronous = FULL')
  db.exec('CREATE TABLE events (session TEXT, seq INTEGER, kind TEXT, data TEXT, PRIMARY KEY (session, seq))')
  const insert = db.prepare("INSERT INTO events VALUES (?, ?, 'user/message', ?)")
  const text = JSON.stringify(data)
  stop = Date.now() + seconds * 1000
  t0 = Date.now()
  const sq = await Promise.all(Array.from({ length: writers }, async (_, k) => {
    let n = 0
    while (Date.now() < stop) {
      insert.run(`w${k}`, n, text) // its own transaction: committed and fsynced on return
      n++
      await new Promise((r) => setImmediate(r)) // let the other tasks in
    }
    return n
  }))
  const peer = sq.reduce((a, b) => a + b, 0) / ((Date.now() - t0) / 1000)
  db.close()
  return [ts, peer]
}

;(async () => {
  const rows = []
  for (let r = 0; r < runs; r++) {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstone-nbench-'))
    const [append, oneSession] = await benchAppend(path.join(d, 'a'))
    const node = await benchFleet(path.join(d, 'f'))
    let rust = null
    if (bin) {
      const out = execFileSync(bin, ['fleet', path.join(d, 'r'), '--sessions', '256', '--threads', '8', '--events', '200000'], { encoding: 'utf8' })
      rust = JSON.parse(out.split('\n')[0]).events_per_s
    }
    const [wTs, wSq] = await benchWriters(d)
    fs.rmSync(d, { recursive: true, force: true })
    rows.push([append, node, rust, oneSession, wTs, wSq])
    console.log(JSON.stringify({
      run: r, append_1k_us_median: +append.toFixed(2), append_1k_one_session_us_median: +oneSession.toFixed(2),
      node_fleet_events_per_s: Math.round(node), rust_fleet_events_per_s: rust && Math.round(rust), ratio: rust && +(node / rust).toFixed(2),
      [`writers_${writers}_turnstone_durable_events_per_s`]: Math.round(wTs),
      [`writers_${writers}_better_sqlite3_durable_events_per_s`]: Math.round(wSq),
      writers_ratio: +(wTs / wSq).toFixed(1), loadavg_1m: os.loadavg()[0],
    }))
  }
  const m = (i) => median(rows.map((x) => x[i]))
  console.log(`medians of ${runs}: append 1 KiB ${m(0).toFixed(2)} us/call (${m(3).toFixed(2)} into one 20,000-event session); fleet node ${m(1).toFixed(0)} ev/s` + (bin ? `, rust ${m(2).toFixed(0)} ev/s, ratio ${(m(1) / m(2)).toFixed(2)}` : '') +
    `; ${writers} durable writers: turnstone ${m(4).toFixed(0)} ev/s, better-sqlite3 ${m(5).toFixed(0)} ev/s, ratio ${median(rows.map((x) => x[4] / x[5])).toFixed(1)}`)
})().catch((e) => {
  console.error(e)
  process.exit(1)
})
