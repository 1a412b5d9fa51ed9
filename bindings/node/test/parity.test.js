'use strict'
// Parity with the Rust session layer (issue 39 §2): a provider's response
// body logged as it came (Anthropic, OpenAI Responses, Chat Completions),
// one atomic group of events, the turns of a session, and fork after a turn.
const test = require('node:test')
const assert = require('node:assert/strict')
const { Store, TurnstoneError } = require('../turnstone.js')
const tmp = require('./tmp.js')

const ANTHROPIC = {
  id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-sonnet-4-5',
  content: [{ type: 'thinking', thinking: 'hm', signature: 'EqQB' }, { type: 'text', text: 'Hello.' }],
  stop_reason: 'end_turn', usage: { input_tokens: 3, output_tokens: 2 },
}
const RESPONSES = {
  id: 'resp_1', object: 'response', model: 'gpt-5',
  output: [
    { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'gAAA' },
    { type: 'message', id: 'msg_1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Hello.', annotations: [] }] },
  ],
  usage: { input_tokens: 3, output_tokens: 2, total_tokens: 5 },
}
const CHAT = {
  id: 'chatcmpl-1', object: 'chat.completion', model: 'gpt-4o',
  choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'Hello.' } }],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
}

test('a response body of each provider is logged as it came', async () => {
  const st = new Store(tmp())
  for (const [provider, body] of [['anthropic', ANTHROPIC], ['openai-responses', RESPONSES], ['openai-chat', CHAT]]) {
    const s = st.createSession(provider)
    s.user('hi')
    s.assistant(body, { provider })
    await s.flush()
    const data = (await s.events(s.length - 1, s.length))[0].data
    assert.ok(JSON.stringify(data.content).includes('Hello.'), provider)
    assert.ok(JSON.stringify(s.messages(provider)).includes('Hello.'), provider)
    if (provider === 'anthropic') assert.deepEqual(data.content[0], ANTHROPIC.content[0])
    if (provider === 'openai-responses') assert.equal(data.content[0].encrypted_content, 'gAAA')
  }
  const s = st.createSession('x')
  assert.throws(() => s.assistant(ANTHROPIC, { provider: 'gemini' }), (e) => e instanceof TurnstoneError && e.kind === 'invalid_argument')
  await st.close()
})

test('appendGroup writes several events atomically, or none', async () => {
  const st = new Store(tmp())
  const s = st.createSession('g')
  const seqs = s.appendGroup([
    ['turn/start', { turn_id: 't1' }],
    ['user/message', { content: [{ type: 'text', text: 'hi' }] }, { surface: 'append' }],
  ])
  assert.deepEqual(seqs, [0, 1])
  assert.throws(
    () => s.appendGroup([['turn/end', { turn_id: 't1', reason: { kind: 'completed' } }], ['turn/start', ['x']]]),
    (e) => e instanceof TurnstoneError && e.kind === 'invalid_argument',
  )
  assert.equal(s.length, 2)
  await st.close()
})

test('turns and fork after a turn', async () => {
  const st = new Store(tmp())
  const s = st.createSession('t')
  for (const t of ['t1', 't2']) {
    s.append('turn/start', { turn_id: t })
    s.user(`question ${t}`)
    s.assistant({ content: [{ type: 'text', text: `answer ${t}` }] })
    s.append('turn/end', { turn_id: t, reason: { kind: 'completed' } })
  }
  s.append('turn/start', { turn_id: 't3' })
  await s.flush()
  const turns = s.turns()
  assert.deepEqual(turns.map((t) => t.turn_id), ['t1', 't2', 't3'])
  assert.equal(turns[0].start_seq, 0)
  assert.equal(turns[0].end_seq, 3)
  assert.deepEqual(turns[0].reason, { kind: 'completed' })
  assert.equal(turns[2].end_seq, null)
  const { child, upto } = await s.forkAfterTurn('t1', { child: 't-branch' })
  assert.equal(child, 't-branch')
  assert.equal(upto, 4)
  const c = await st.openSession('t-branch')
  assert.deepEqual(c.messages().map((m) => m.content[0].text), ['question t1', 'answer t1'])
  await assert.rejects(s.forkAfterTurn('t3'), (e) => e instanceof TurnstoneError && e.kind === 'refused')
  await st.close()
})
