'use strict'
// A worker process of multiprocess.test.js: `n` writers, each on its own
// session, append one message at a time and flush it, printing
// `ACK session seq tag` for each flush that resolved. After `host_lost` a
// writer closes its session and opens it again. Stops when `dir/stop` exists.
const fs = require('node:fs')
const path = require('node:path')
const { Store, TurnstoneError } = require('../turnstone.js')

const [dir, n] = [process.argv[2], Number(process.argv[3])]
const st = new Store(dir)
const say = (line) => process.stdout.write(line + '\n')
say(`READY ${st.backend}`)
const stop = path.join(dir, 'stop')

async function run (t) {
  const sid = `w${process.pid}-${t}`
  let s = null
  let k = 0
  while (!fs.existsSync(stop)) {
    try {
      if (s === null) {
        try {
          s = await st.openSession(sid)
        } catch (e) {
          if (!(e instanceof TurnstoneError) || e.kind !== 'unknown_session') throw e
          s = st.createSession(sid)
        }
      }
      k++
      const tag = `${sid}/${k}`
      const seq = s.user(tag)
      await s.flush()
      say(`ACK ${sid} ${seq} ${tag}`)
    } catch (e) {
      if (!(e instanceof TurnstoneError) || e.kind !== 'host_lost') throw e
      if (s !== null) s.close()
      s = null
    }
  }
}

Promise.all(Array.from({ length: n }, (_, t) => run(t))).then(async () => {
  await st.close()
  say('DONE')
}, (e) => {
  console.error(e)
  process.exit(2)
})
