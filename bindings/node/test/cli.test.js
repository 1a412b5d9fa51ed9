'use strict'
// The package links the `turnstone` command line as its bin (issue 39 §8):
// the Rust CLI's subcommands but `serve`, run by the native module, with
// their exit statuses and their whole output.
const test = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { Store, schema } = require('../turnstone.js')
const tmp = require('./tmp.js')

const PKG = path.join(__dirname, '..')
const CLI = path.join(PKG, 'cli.js')

function cli(args, bin = [process.execPath, CLI]) {
  return spawnSync(bin[0], [...bin.slice(1), ...args], { encoding: 'utf8', timeout: 120000 })
}

test('cli.js runs the engine CLI on a store the package wrote', async () => {
  let out = cli(['schema', 'turn/end'])
  assert.equal(out.status, 0, out.stderr)
  assert.deepEqual(JSON.parse(out.stdout), schema('turn/end'))
  const dir = path.join(tmp(), 'st')
  const st = new Store(dir)
  const s = st.createSession('s1')
  s.user('hello from node')
  await s.flush()
  await st.close()
  out = cli(['verify', dir])
  assert.equal(out.status, 0, out.stderr)
  out = cli(['messages', dir, '--session', 's1', '--json'])
  assert.equal(out.status, 0, out.stderr)
  assert.match(out.stdout, /hello from node/)
})

test('schema --markdown prints docs/EVENTS.md whole', () => {
  // Long output through Rust's stdout inside a Node process: nothing is
  // left in its buffer when the status goes back to Node.
  const out = cli(['schema', '--markdown'])
  assert.equal(out.status, 0, out.stderr)
  assert.equal(out.stdout, fs.readFileSync(path.join(PKG, '../../docs/EVENTS.md'), 'utf8'))
})

test('failures keep their exit status and one line; serve is not in this build', () => {
  let out = cli(['verify', path.join(tmp(), 'no-such-store')])
  assert.equal(out.status, 2)
  assert.ok(out.stderr.startsWith('turnstone: ') && out.stderr.split('\n').length === 2, out.stderr)
  out = cli(['serve', tmp()])
  assert.equal(out.status, 2)
  assert.match(out.stderr, /serve/)
  out = cli(['--version'])
  assert.equal(out.status, 0, out.stderr)
  assert.match(out.stdout, /^turnstone \d+\.\d+\.\d+\n$/)
})

test('npm install links the bin: npx turnstone in a project that installed the package', () => {
  const work = tmp()
  const tgz = execFileSync('npm', ['pack', '--silent', '--pack-destination', work], {
    cwd: PKG,
    encoding: 'utf8',
  }).trim().split('\n').pop()
  const project = path.join(work, 'project')
  fs.mkdirSync(project)
  fs.writeFileSync(path.join(project, 'package.json'), '{"name":"p","version":"1.0.0","private":true}')
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--silent', path.join(work, tgz)], {
    cwd: project,
  })
  const bin = path.join(project, 'node_modules', '.bin', 'turnstone')
  const out = cli(['schema', 'turn/start'], [bin])
  assert.equal(out.status, 0, out.stderr)
  assert.deepEqual(JSON.parse(out.stdout), schema('turn/start'))
})
