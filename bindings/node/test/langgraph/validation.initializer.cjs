'use strict'
// The CheckpointerTestInitializer that @langchain/langgraph-checkpoint-validation
// runs against TurnstoneSaver (run.sh: `validate-checkpointer ./test/langgraph/validation.initializer.cjs`).
// Each checkpointer gets a fresh store in its own directory.
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { TurnstoneSaver } = require('../../langgraph.js')

const dirs = new Map()

module.exports = {
  checkpointerName: 'turnstone',
  createCheckpointer() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstone-lg-validate-'))
    const saver = new TurnstoneSaver(dir)
    dirs.set(saver, dir)
    return saver
  },
  async destroyCheckpointer(saver) {
    await saver.close()
    fs.rmSync(dirs.get(saver), { recursive: true, force: true })
    dirs.delete(saver)
  },
}
