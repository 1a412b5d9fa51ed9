'use strict'
// The CheckpointerTestInitializer that @langchain/langgraph-checkpoint-validation
// runs against TurnstoneSaver. Each checkpointer gets a fresh store in its
// own directory. With TURNSTONE_LG_REBUILD=1 the saver forgets its indexes
// before every read, so each answer comes from an index rebuilt from the
// session's events (the path a reopened store takes).
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { TurnstoneSaver } = require('../../langgraph.js')

const rebuild = process.env.TURNSTONE_LG_REBUILD === '1'

class RebuildingSaver extends TurnstoneSaver {
  // Drop every thread's index and release its handle (a handle left open
  // would keep its session from being deleted).
  async _forget() {
    const held = await Promise.all([...this._threads.values()].map((p) => p.catch(() => null)))
    this._threads.clear()
    this._cache.clear()
    this._catalog = null
    for (const t of held) {
      if (!t) continue
      await t.session.flush()
      t.session.close()
    }
  }
  async getTuple(config) {
    await this._forget()
    return super.getTuple(config)
  }
  async *list(config, options) {
    await this._forget()
    yield* super.list(config, options)
  }
}

const dirs = new Map()

module.exports = {
  checkpointerName: rebuild ? 'turnstone (indexes rebuilt from the log)' : 'turnstone',
  createCheckpointer() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstone-lg-validate-'))
    const saver = rebuild ? new RebuildingSaver(dir) : new TurnstoneSaver(dir)
    dirs.set(saver, dir)
    return saver
  },
  async destroyCheckpointer(saver) {
    await saver.close()
    fs.rmSync(dirs.get(saver), { recursive: true, force: true })
    dirs.delete(saver)
  },
}
