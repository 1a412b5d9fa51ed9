'use strict'
// Temporary store directories for a test file, removed when it ends (each
// store preallocates its first segment).
const test = require('node:test')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const made = []
test.after(() => {
  for (const d of made) fs.rmSync(d, { recursive: true, force: true })
})

module.exports = function tmp() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstone-node-'))
  made.push(d)
  return d
}
