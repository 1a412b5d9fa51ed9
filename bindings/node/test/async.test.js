'use strict'
// Waits that hold no thread (issue 39 §5, met in Node too): flush() and
// Subscription.next() are the engine's futures, woken by the flusher. As
// libuv thread-pool jobs, four idle followers took every pool thread and a
// writer's flush() behind them never resolved.
const test = require('node:test')
const assert = require('node:assert/strict')
const { Store, TurnstoneError } = require('../turnstone.js')
const tmp = require('./tmp.js')

const within = (p, ms, what) => Promise.race([
  p,
  new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: not settled after ${ms} ms`)), ms).unref()),
])

test('idle followers hold no thread: writers flush beside 300 of them', async () => {
  const st = new Store(tmp())
  const followers = []
  for (let i = 0; i < 300; i++) {
    const s = st.createSession(`f${i}`)
    s.user('hello')
    followers.push(s)
  }
  await Promise.all(followers.map((s) => s.flush()))
  const subs = followers.map((s) => st.subscribe(s.id, 1)) // past their one event: idle
  const waiting = subs.map((sub) => sub.next())
  let woke = 0
  waiting.forEach((p) => p.then(() => { woke++ }))
  const writers = Array.from({ length: 64 }, (_, i) => st.createSession(`w${i}`))
  const lens = await within(Promise.all(writers.map(async (s) => {
    for (let i = 0; i < 20; i++) {
      s.user(`event ${i}`)
      await s.flush()
    }
    return s.length
  })), 60000, 'the writers')
  assert.deepEqual(lens, Array(64).fill(20))
  assert.equal(woke, 0, 'an idle follower woke with nothing to read')
  for (const s of followers) s.user('second')
  await Promise.all(followers.map((s) => s.flush()))
  const got = await within(Promise.all(waiting), 60000, 'the followers')
  assert.deepEqual(got.map((e) => e.seq), Array(300).fill(1))
  assert.ok(got.every((e) => e.data.content[0].text === 'second'))
  await st.close()
})

test('one next() at a time; it ends with null when the store closes', async () => {
  const st = new Store(tmp())
  const s = st.createSession('s')
  await s.flush()
  const sub = st.subscribe('s', 0)
  const first = sub.next()
  await assert.rejects(sub.next(), (e) => e instanceof TurnstoneError && e.kind === 'invalid_argument')
  assert.throws(() => sub.tryNext(), (e) => e instanceof TurnstoneError)
  s.user('x')
  await s.flush()
  assert.equal((await within(first, 30000, 'next')).seq, 0)
  const last = sub.next()
  await st.close()
  assert.equal(await within(last, 30000, 'next at close'), null)
})
