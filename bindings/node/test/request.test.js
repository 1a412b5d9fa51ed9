'use strict'
// The request builder in the package (issue 39 §2): the header of each
// request (prepareRequest, beginLoop), the body rebuilt from the log
// (requestBody), the check against what a harness sends (checkRequestBody),
// and compaction and pruning.
const test = require('node:test')
const assert = require('node:assert/strict')
const { Store, TurnstoneError } = require('../turnstone.js')
const tmp = require('./tmp.js')

const TOOLS = [{
  name: 'read_file', description: 'Read a file.',
  input_schema: { type: 'object', properties: { path: { type: 'string' } } },
}]

async function headerReasons(s) {
  return (await s.events()).filter((e) => e.kind === 'request/header').map((e) => e.data.reason)
}

function kindOf(f) {
  try {
    f()
  } catch (e) {
    assert.ok(e instanceof TurnstoneError, String(e))
    return [e.kind, e.message]
  }
  assert.fail('expected a TurnstoneError')
}

test('each request writes a header only when one is needed', async () => {
  const st = new Store(tmp())
  const s = st.createSession('s')
  s.user('Read README.md')
  const spec = { provider: 'anthropic', model: 'claude-sonnet-4-5', params: { max_tokens: 1024 }, system: 'Be brief.', tools: TOOLS }
  assert.equal(s.prepareRequest(spec), 'initial')
  assert.equal(s.prepareRequest(spec), null)
  assert.equal(s.prepareRequest({ ...spec, params: { max_tokens: 2048 } }), 'change')
  s.beginLoop()
  assert.equal(s.prepareRequest({ ...spec, params: { max_tokens: 2048 } }), 'resume')
  assert.deepEqual(await headerReasons(s), ['initial', 'change', 'resume'])
  const body = s.requestBody('anthropic')
  assert.deepEqual(body, {
    model: 'claude-sonnet-4-5', max_tokens: 2048, system: 'Be brief.', tools: TOOLS,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Read README.md' }] }],
  })
  assert.deepEqual(s.messages('anthropic'), body)
  const chat = s.requestBody('openai-chat')
  assert.deepEqual(chat.messages[0], { role: 'system', content: 'Be brief.' })
  st.close()
})

test('a bad spec is refused naming the field, and writes nothing', () => {
  const st = new Store(tmp())
  const s = st.createSession('s')
  let [kind, message] = kindOf(() => s.prepareRequest({ provider: 'anthropic', model: 'm', tools: [{ name: 3 }] }))
  assert.equal(kind, 'invalid_argument')
  assert.match(message, /tools\[0\]/)
  ;[kind, message] = kindOf(() => s.prepareRequest({ provider: 'anthropic', model: 'm', params: { t: NaN } }))
  assert.equal(kind, 'invalid_argument')
  ;[kind] = kindOf(() => s.prepareRequest({ model: 'm' }))
  assert.equal(kind, 'invalid_argument')
  assert.equal(s.length, 0)
  st.close()
})

test('checkRequestBody names the first difference', () => {
  const st = new Store(tmp())
  const s = st.createSession('s')
  s.prepareRequest({ provider: 'anthropic', model: 'm', params: { max_tokens: 10 } })
  s.user('hello')
  s.assistant({ content: [{ type: 'thinking', thinking: 'hm', signature: 'EqQB' }, { type: 'text', text: 'Hi.' }] })
  s.user('again')
  const body = s.requestBody('anthropic')
  s.checkRequestBody('anthropic', body)
  const sent = structuredClone(body)
  delete sent.messages[1].content[0].signature
  const [kind, message] = kindOf(() => s.checkRequestBody('anthropic', sent))
  assert.equal(kind, 'request_mismatch')
  assert.match(message, /\/messages\/1\/content\/0/)
  assert.equal(kindOf(() => s.checkRequestBody('gemini', body))[0], 'invalid_argument')
  st.close()
})

test('compaction replaces a range and keeps the originals', async () => {
  const st = new Store(tmp())
  const s = st.createSession('s')
  for (const t of ['a', 'b', 'c']) s.user(t)
  const seq = s.compact(0, 2, 'a and b', { compactionId: 'k1' })
  assert.deepEqual(s.messages().map((m) => m.content[0].text), ['a and b', 'c'])
  const events = await s.events()
  assert.deepEqual(events.slice(3).map((e) => e.kind), ['compaction/start', 'compaction/summary', 'user/message', 'compaction/end'])
  assert.equal(events[seq].data.content[0].text, 'a and b')
  assert.deepEqual(events.slice(0, 3).map((e) => e.data.content[0].text), ['a', 'b', 'c'])
  assert.equal(kindOf(() => s.compact(1, 9, 'past the end'))[0], 'surface_range')
  assert.equal(kindOf(() => s.compact(-1, 1, 'negative'))[0], 'invalid_argument')
  st.close()
})

test('prune replaces one tool result', async () => {
  const st = new Store(tmp())
  const s = st.createSession('s')
  s.user('list')
  s.assistant({ content: [{ type: 'tool_use', id: 'c1', name: 'ls', input: {} }] })
  await s.toolCall('c1', 'ls', {}, () => 'x'.repeat(5000))
  const seq = s.pruneToolResult(2, '[5000 bytes pruned]', { tokensSaved: 1200 })
  assert.equal(s.messages()[2].content[0].content, '[5000 bytes pruned]')
  const events = await s.events()
  assert.equal(events[seq - 1].kind, 'compaction/prune')
  assert.equal(events[seq - 1].data.tokens_saved, 1200)
  const original = events.find((e) => e.kind === 'tool/result')
  assert.equal(original.data.content[0].text, 'x'.repeat(5000))
  assert.equal(kindOf(() => s.pruneToolResult(0, 'not a tool result'))[0], 'invalid_argument')
  st.close()
})

test('compactTurn replaces an ended turn', () => {
  const st = new Store(tmp())
  const s = st.createSession('s')
  s.startTurn('t1')
  s.user('first question')
  s.assistant({ content: [{ type: 'text', text: 'first answer' }] })
  s.endTurn('t1')
  s.startTurn('t2')
  s.user('second question')
  assert.equal(kindOf(() => s.compactTurn('t2', 'not ended yet'))[0], 'refused')
  s.compactTurn('t1', 'Turn 1 in short.')
  assert.deepEqual(s.messages().map((m) => m.content[0].text), ['Turn 1 in short.', 'second question'])
  st.close()
})

test('a session switched to another provider sends only what it takes (issue 39 §7)', () => {
  const st = new Store(tmp())
  try {
    const s = st.createSession('s')
    s.prepareRequest({
      provider: 'openai', model: 'gpt-5',
      params: { max_output_tokens: 500, reasoning: { effort: 'high' } },
      tools: [{ type: 'function', name: 'ls', parameters: { type: 'object' } }, { type: 'web_search_preview' }],
    })
    s.user([{ type: 'input_text', text: 'list' }])
    s.assistant({ content: [
      { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'gAAA' },
      { type: 'function_call', call_id: 'c1', name: 'ls', arguments: '{}' },
    ] })
    const own = s.requestBody('openai-responses')
    assert.deepEqual(own.reasoning, { effort: 'high' })
    assert.ok(own.input.some((i) => i.type === 'reasoning'))
    assert.deepEqual(s.dropped('openai-responses'), [])

    const body = s.requestBody('anthropic')
    assert.equal(body.max_tokens, 500)
    assert.equal(body.reasoning, undefined)
    assert.deepEqual(body.tools, [{ name: 'ls', input_schema: { type: 'object' } }])
    assert.deepEqual(body.messages[1].content, [{ type: 'tool_use', id: 'c1', name: 'ls', input: {} }])
    const what = s.dropped('anthropic').map((d) => d.what).sort()
    assert.deepEqual(what, ['block reasoning', 'param reasoning', 'tool (type web_search_preview)'])
    s.checkRequestBody('anthropic', body)
  } finally {
    st.close()
  }
})
