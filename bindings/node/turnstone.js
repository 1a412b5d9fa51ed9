'use strict'
// turnstone for Node.js: the session layer of an embedded, event-sourced
// store for AI-agent sessions. Event data are plain objects in the
// providers' own shapes; they are stored as they are and come back
// unchanged. Every wait for durability and every read of a session returns
// a Promise and runs off the event loop.
const crypto = require('node:crypto')
const native = require('./turnstone.node')

class TurnstoneError extends Error {
  constructor(kind, message, path, offset) {
    super(message)
    this.name = 'TurnstoneError'
    this.kind = kind
    this.path = path ?? null
    this.offset = offset ?? null
  }
}

// Native errors carry {"kind","message","path","offset"} as their message.
function rethrow(e) {
  if (e && typeof e.message === 'string' && e.message.startsWith('{')) {
    let body
    try {
      body = JSON.parse(e.message)
    } catch {
      throw e
    }
    throw new TurnstoneError(body.kind, body.message, body.path, body.offset)
  }
  throw e
}

function call(f) {
  try {
    return f()
  } catch (e) {
    rethrow(e)
  }
}

async function wait(p) {
  try {
    return await p
  } catch (e) {
    rethrow(e)
  }
}

function invalid(message) {
  return new TurnstoneError('invalid_argument', message, null, null)
}

function surfaceJson(surface) {
  if (surface === undefined || surface === null) return undefined
  if (surface === 'append') return '{"op":"append"}'
  if (typeof surface === 'object') return JSON.stringify(surface)
  throw invalid(`surface must be undefined, "append" or {op: "replace", start, end}, not ${String(surface)}`)
}

// What JSON.stringify would store silently as something else: NaN and
// +-Infinity (as null), a Map or a Set (as {}). The walk runs only when the
// text shows such a trace, so plain data pays nothing for it.
function fault(v, at) {
  if (typeof v === 'number') {
    return Number.isFinite(v) ? null : `at ${at || 'the top'}: ${v} is not JSON (NaN and Infinity have no JSON form)`
  }
  if (typeof v !== 'object' || v === null || typeof v.toJSON === 'function') return null
  if (v instanceof Map || v instanceof Set) {
    return `at ${at || 'the top'}: a ${v.constructor.name} is not JSON (use a plain object or an array)`
  }
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const f = fault(v[i], `${at}[${i}]`)
      if (f) return f
    }
    return null
  }
  for (const k of Object.keys(v)) {
    const f = fault(v[k], at ? `${at}.${k}` : k)
    if (f) return f
  }
  return null
}

// A lone surrogate (text cut inside a UTF-16 pair) is escaped by
// JSON.stringify as \udXXX, which no UTF-8 JSON can hold: it becomes
// U+FFFD, and the event is kept. An escaped backslash before it is text.
const LONE_SURROGATE = /(?<!\\)((?:\\\\)*)\\ud[89a-f][0-9a-f]{2}/g

// Event data as JSON text; anything JSON cannot hold is a TurnstoneError of
// kind invalid_argument naming the kind and where.
function json(kind, data) {
  if (data === undefined) throw invalid(`${kind} data must be a JSON value, not undefined`)
  let text
  try {
    text = JSON.stringify(data)
  } catch (e) {
    const m = String(e && e.message)
    const why = m.includes('BigInt')
      ? 'a BigInt is not JSON (send it as a string)'
      : m.includes('circular')
        ? 'it holds a circular reference'
        : m
    throw invalid(`${kind} data: ${why}`)
  }
  if (text === undefined) throw invalid(`${kind} data must be a JSON value, not a ${typeof data}`)
  if (text.includes('null') || text.includes('{}')) {
    const f = fault(data, '')
    if (f) throw invalid(`${kind} data: ${f}`)
  }
  if (text.includes('\\ud')) text = text.replace(LONE_SURROGATE, '$1\\ufffd')
  return text
}

// Event data go to the addon as UTF-8 in one reused Buffer (writing a string
// into it costs less than converting the string across N-API). Up to 3 bytes
// per UTF-16 unit, so text of n units always fits in 3n bytes; text too large
// for the reused Buffer gets a Buffer of its own.
const SCRATCH_MAX = 1 << 20
let scratch = Buffer.allocUnsafe(1 << 16)
function utf8(text) {
  const need = text.length * 3
  if (need > scratch.length) {
    if (need > SCRATCH_MAX) {
      const own = Buffer.from(text, 'utf8')
      return [own, own.length]
    }
    let size = scratch.length
    while (size < need) size *= 2
    scratch = Buffer.allocUnsafe(size)
  }
  return [scratch, scratch.write(text, 0, 'utf8')]
}

function endReason(kind, message) {
  if (kind === 'error') {
    if (typeof message !== 'string') throw invalid('an error reason needs a message')
    return { kind, message }
  }
  if (message !== undefined) throw invalid(`a '${kind}' reason takes no message`)
  return { kind }
}

class Store {
  /**
   * Open (or create, unless readOnly) the store in `path`, or a PostgreSQL
   * database given by its URL (`postgres://…`): sessions opened for writing
   * are then leased to `owner` (default `node:<pid>`; another owner gets
   * kind 'fenced'), and a dead worker's session is taken over once its
   * lease (`leaseTtlMs`, default 30 s) expires and repaired by openSession.
   * A directory only (refused with a database URL): `segmentBytes`, the
   * size of its segment files (default 64 MiB), and `recycleSegments`, how
   * many segment files that `collect` frees are kept and made into new
   * segments instead of new files (up to that many segment files of disk
   * beyond the live data; 0, the default: freed files are removed), and
   * `prepareSegments`, whether a background thread writes the next segment's
   * file of zeros ahead of need while batches are small (default true), and
   * `directWrites`, whether batches written into recycled and prepared
   * segments go around the page cache with direct I/O (default false).
   */
  constructor(path, { readOnly = false, plugins, owner, leaseTtlMs, segmentBytes, recycleSegments, prepareSegments, directWrites } = {}) {
    // plugins: the harness's own event kinds, {name: ignorable}.
    for (const [name, v] of [['prepareSegments', prepareSegments], ['directWrites', directWrites]]) {
      if (v != null && typeof v !== 'boolean') {
        throw new TurnstoneError('invalid_argument', `${name} must be true or false, not ${typeof v}`)
      }
    }
    this._n = call(() => new native.NativeStore(String(path), readOnly, plugins ? JSON.stringify(plugins) : null,
      owner ?? null, leaseTtlMs ?? null, segmentBytes ?? null, recycleSegments ?? null,
      prepareSegments ?? null, directWrites ?? null))
  }
  /** 'embedded' (a store directory) or 'postgres'. */
  get backend() {
    return call(() => this._n.backend())
  }
  createSession(id) {
    return new Session(call(() => this._n.createSession(id)))
  }
  /** Load a session for writing, repairing what a crash left open (durably). */
  async openSession(id) {
    const n = await wait(call(() => this._n.openSession(id)))
    return new Session(n, JSON.parse(n.repairReport()))
  }
  async openReadOnly(id) {
    return new Session(await wait(call(() => this._n.openReadOnly(id))))
  }
  async sessions() {
    return JSON.parse(await wait(call(() => this._n.sessions())))
  }
  /** Fork at a turn boundary (default: the end of the last closed turn). */
  /** One page of the sessions the filters select (the CLI's: tags, where
   * fields, updatedSinceMs, openTurn, parent, newestFirst), durable ones
   * only, each with title, tags and fields: {sessions, nextCursor}. Pass
   * nextCursor back as `cursor`; pages are stable. */
  async listSessions({ tags, where, updatedSinceMs, openTurn, parent, newestFirst, limit, cursor } = {}) {
    const query = JSON.stringify({ tags, where, updatedSinceMs, openTurn, parent, newestFirst, limit, cursor })
    return JSON.parse(await wait(call(() => this._n.listSessions(query))))
  }
  async fork(source, { at, child } = {}) {
    return wait(call(() => this._n.fork(source, at ?? null, child ?? null)))
  }
  async replay(id, { start, end } = {}) {
    return JSON.parse(await wait(call(() => this._n.replay(id, start ?? null, end ?? null))))
  }
  async search(query, { limit, session } = {}) {
    return JSON.parse(await wait(call(() => this._n.search(query, limit ?? null, session ?? null))))
  }
  async delete(id) {
    return wait(call(() => this._n.delete(id)))
  }
  /**
   * Reclaim disk while the store stays open (a directory only): the bytes
   * of deleted sessions and of those the store's retention expires, then
   * blob files no event references. A sealed segment is rewritten when its
   * live bytes are below `threshold` (0..1, default 0.5) of its data;
   * `dryRun` decides and reports, changing nothing. Writers keep appending
   * meanwhile. Resolves to the report, keys as the engine and the CLI's
   * `turnstone gc --json` name them (`sessions_reclaimed`, `bytes_reclaimed`, ...).
   */
  async collect({ threshold, dryRun } = {}) {
    return JSON.parse(await wait(call(() => this._n.collect(threshold ?? null, dryRun ?? null))))
  }
  /** Follow a session live: `for await (const ev of store.subscribe(id))`. */
  subscribe(id, fromSeq = 0) {
    return new Subscription(call(() => this._n.subscribe(id, fromSeq)))
  }
  async close() {
    return wait(call(() => this._n.close()))
  }
}

class ToolRefused extends Error {
  constructor(reason) {
    super(`refused by policy: ${reason}`)
    this.name = 'ToolRefused'
    this.reason = reason
  }
}

class ToolAborted extends Error {
  constructor(callId) {
    super(`tool call ${callId} was cancelled before dispatch`)
    this.name = 'ToolAborted'
  }
}

class Session {
  constructor(n, repairReport = null) {
    this._n = n
    this.repairReport = repairReport
  }
  get id() {
    return call(() => this._n.id)
  }
  get length() {
    return call(() => this._n.length)
  }
  /** Release this handle (the session is no longer held for writing here:
   * another handle may open it, `store.delete` may delete it). What it
   * appended stays appended (await `flush()` first for durability); later
   * calls on it throw. Also `using s = ...` (Symbol.dispose). */
  close() {
    this._n.close()
  }
  [Symbol.dispose ?? Symbol.for('Symbol.dispose')]() {
    this.close()
  }
  /** Append one event; surface kinds need `{surface: "append"}`. Returns its seq. */
  append(kind, data, { surface } = {}) {
    const [buf, len] = utf8(json(kind, data))
    return call(() => this._n.appendUtf8(kind, buf, len, surfaceJson(surface)))
  }
  /** turn/start: a turn begins. Returns its seq. */
  startTurn(turnId) {
    return this.append('turn/start', { turn_id: turnId })
  }
  /** turn/end with its reason ('completed' by default; 'error' takes {message}). */
  endTurn(turnId, reason = 'completed', { message } = {}) {
    return this.append('turn/end', { turn_id: turnId, reason: endReason(reason, message) })
  }
  /** step/start: one model request of the turn, its response and its tools. */
  startStep(turnId, stepId) {
    return this.append('step/start', { turn_id: turnId, step_id: stepId })
  }
  /** step/end with its reason ('tool_use' when the step ends to run tools). */
  endStep(turnId, stepId, reason = 'completed', { message } = {}) {
    return this.append('step/end', { turn_id: turnId, step_id: stepId, reason: endReason(reason, message) })
  }
  user(content) {
    const blocks = typeof content === 'string' ? [{ type: 'text', text: content }] : content
    return this.append('user/message', { content: blocks }, { surface: 'append' })
  }
  /** An assistant message; with `{provider}` ("anthropic", "openai-responses",
   * "openai-chat") `message` is that API's whole response body, logged as it came. */
  assistant(message, { provider } = {}) {
    if (provider !== undefined) {
      const [buf, len] = utf8(json('assistant/message', message))
      return call(() => this._n.appendResponse(provider, buf, len))
    }
    return this.append('assistant/message', message, { surface: 'append' })
  }
  /** Several core events as one atomic group: `[[kind, data, {surface}], ...]`
   * (surface kinds may only append). After a crash all of them exist or none. */
  appendGroup(events) {
    const parts = events.map(([kind, data, options]) => {
      const surface = surfaceJson(options && options.surface)
      return `{"kind":${JSON.stringify(kind)},"data":${json(kind, data)},"surface":${surface ?? 'null'}}`
    })
    return call(() => this._n.appendGroup(`[${parts.join(',')}]`))
  }
  /** Every turn, in order: {turn_id, start_seq, end_seq (null while it runs), reason}. */
  turns() {
    return JSON.parse(call(() => this._n.turns()))
  }
  /** Fork after the end of turn `turnId`: the child holds every event up to and
   * including that turn/end. Durable events only (flush first); a running turn
   * is refused. `store.fork(source, {at})` forks at a seq: the child holds
   * seqs 0..at, `at` excluded. Resolves to {child, upto}. */
  async forkAfterTurn(turnId, { child } = {}) {
    return JSON.parse(call(() => this._n.forkAfterTurn(turnId, child ?? null)))
  }
  /** Resolves once everything this handle appended is durable. */
  async flush() {
    return wait(call(() => this._n.flush()))
  }
  /** Messages, or a provider request body ("anthropic", "openai-responses", "openai-chat"). */
  messages(format) {
    return JSON.parse(call(() => this._n.messages(format ?? null)))
  }
  /** Before each model request: record what it is made with (`{provider,
   * model, params, system, tools, adapterDefaults}`). Writes a
   * request/header when one is needed and returns why ('initial', 'resume',
   * 'change'), or null when nothing changed. `requestBody(format)` then
   * rebuilds the whole body from the log. */
  prepareRequest({ provider, model, params, system, tools, adapterDefaults } = {}) {
    const spec = { provider, model, params: params ?? {}, tools: tools ?? [] }
    if (system !== undefined && system !== null) spec.system = system
    if (adapterDefaults) spec.adapter_defaults = adapterDefaults
    const text = json('request spec', spec)
    return call(() => this._n.prepareRequest(text))
  }
  /** A new agent loop takes over this session: the next header is 'resume'. */
  beginLoop() {
    call(() => this._n.beginLoop())
  }
  /** The request body the log rebuilds for `format`: the latest header's
   * model, params, system prompt and tools, and the messages. */
  requestBody(format) {
    if (format === undefined || format === null) throw invalid('requestBody needs a format')
    return this.messages(format)
  }
  /** What `requestBody(format)` leaves out because the header was written
   * for another API: [{what, why, count}], empty when nothing was. */
  dropped(format) {
    return JSON.parse(call(() => this._n.dropped(format)))
  }
  /** Throws TurnstoneError (kind 'request_mismatch') naming the first JSON
   * path where `body` differs from the body the log rebuilds for `format`. */
  checkRequestBody(format, body) {
    const text = json('request body', body)
    call(() => this._n.checkRequestBody(format, text))
  }
  /** Replace surface positions start..end (end excluded; a position is a
   * message's index in messages()) by one user message holding `summary`,
   * atomically; the originals stay in the log. Returns the summary's seq. */
  compact(start, end, summary, { compactionId } = {}) {
    const id = compactionId ?? crypto.randomUUID()
    return call(() => this._n.compact(id, start, end, summary))
  }
  /** compact() over the messages of ended turn `turnId`: one summary message. Its seq. */
  compactTurn(turnId, summary, { compactionId } = {}) {
    const id = compactionId ?? crypto.randomUUID()
    return call(() => this._n.compactTurn(id, turnId, summary))
  }
  /** Replace the tool result at surface position `at` by `replacement`
   * (same call id), atomically; the original stays in the log. Its seq. */
  pruneToolResult(at, replacement, { tokensSaved } = {}) {
    return call(() => this._n.pruneToolResult(at, replacement, tokensSaved ?? 0))
  }
  /** This handle's events start..end (its own appends included). */
  async events(start, end) {
    return JSON.parse(await wait(call(() => this._n.events(start ?? null, end ?? null))))
  }
  get metadata() {
    return JSON.parse(call(() => this._n.metadata()))
  }
  setTitle(title) {
    return this.append('session/meta', { title })
  }
  addTag(tag) {
    return this.append('session/meta', { add_tags: [tag] })
  }
  setMeta(key, value) {
    return this.append('session/meta', { fields: { [key]: value } })
  }
  _result(callId, content, isError) {
    return this.append('tool/result', { call_id: callId, content, is_error: isError }, { surface: 'append' })
  }
  _refuse(callId, reason) {
    this._result(callId, [{ type: 'text', text: `refused by policy: ${reason}` }], true)
  }
  _abort(callId) {
    this.append('tool/result', { call_id: callId, content: [], is_error: true, status: 'ABORTED_BEFORE_DISPATCH' }, { surface: 'append' })
  }
  _failed(callId, e) {
    return this._result(callId, [{ type: 'text', text: `tool failed: ${e && e.message}` }], true)
  }
  // Record a body's value as the call's result (text, content blocks, or any
  // other JSON value as its JSON text; null or undefined: an empty result);
  // a result the log cannot take is replaced by an error result saying why
  // (notRecorded).
  _recordValue(callId, value) {
    const blocks =
      typeof value === 'string'
        ? [{ type: 'text', text: value }]
        : Array.isArray(value)
          ? value
          : value === null || value === undefined
            ? []
            : [{ type: 'text', text: JSON.stringify(value) ?? String(value) }]
    try {
      return { resultSeq: this._result(callId, blocks, false) }
    } catch (e) {
      if (!(e instanceof TurnstoneError) || !['too_large', 'invalid_argument', 'refused'].includes(e.kind)) throw e
      const notRecorded = `tool result not recorded: ${e.message}`
      return { resultSeq: this._result(callId, [{ type: 'text', text: notRecorded }], true), notRecorded }
    }
  }

  /**
   * Run a tool in the order the log requires: record tool/call, run `guard`
   * (a non-empty string refuses: recorded, then ToolRefused is thrown), wait
   * until the call is durable (not when `nested`), check `cancelled()`
   * (ABORTED_BEFORE_DISPATCH recorded, ToolAborted thrown), then await
   * `body(call)`. Its return value (a string or content blocks) is the
   * result; a thrown error is recorded as an error result and rethrown. A
   * result the log cannot take is replaced by an error result saying why.
   */
  async toolCall(callId, name, input, body, { guard, cancelled, nested = false } = {}) {
    this.append('tool/call', { call_id: callId, name, input })
    if (guard) {
      const reason = await guard({ callId, name, input })
      if (reason) {
        this._refuse(callId, reason)
        throw new ToolRefused(reason)
      }
    }
    if (!nested) await this.flush()
    if (cancelled && cancelled()) {
      this._abort(callId)
      throw new ToolAborted(callId)
    }
    let out
    try {
      out = await body({ callId, name, input, session: this })
    } catch (e) {
      this._failed(callId, e)
      throw e
    }
    return { ...this._recordValue(callId, out), value: out }
  }
}

Session.prototype.runTools = async function runTools(calls, body, { guard, cancelled } = {}) {
  // Record every tool/call in one atomic group, guard each, wait once, then
  // run the bodies concurrently and record each result as it finishes, durable
  // before the next (a crash while a sibling still runs keeps it).
  call(() => this._n.recordToolCalls(JSON.stringify(calls.map((c) => ({ call_id: c.callId, name: c.name, input: c.input ?? {} })))))
  const outcomes = new Array(calls.length)
  const runnable = []
  for (let i = 0; i < calls.length; i++) {
    const reason = guard ? await guard(calls[i]) : null
    if (reason) {
      this._refuse(calls[i].callId, reason)
      outcomes[i] = { callId: calls[i].callId, outcome: 'refused', reason }
    } else runnable.push(i)
  }
  await this.flush()
  if (cancelled && cancelled()) {
    for (const i of runnable) {
      this._abort(calls[i].callId)
      outcomes[i] = { callId: calls[i].callId, outcome: 'aborted' }
    }
    return outcomes
  }
  await Promise.all(
    runnable.map(async (i) => {
      const c = calls[i]
      let value
      try {
        value = await body(c)
      } catch (e) {
        outcomes[i] = { callId: c.callId, outcome: 'failed', error: e, resultSeq: this._failed(c.callId, e) }
        await this.flush() // durable as it finishes: a sibling cannot take it down
        return
      }
      const { resultSeq, notRecorded } = this._recordValue(c.callId, value)
      outcomes[i] = notRecorded
        ? { callId: c.callId, outcome: 'result_not_recorded', value, resultSeq, reason: notRecorded }
        : { callId: c.callId, outcome: 'ran', value, resultSeq }
      await this.flush() // durable as it finishes: a sibling cannot take it down
    }),
  )
  return outcomes
}

class Subscription {
  constructor(n) {
    this._n = n
  }
  /** The next durable event (null when the store closes). */
  async next() {
    const e = await wait(call(() => this._n.next()))
    return e === null ? null : JSON.parse(e)
  }
  tryNext() {
    const e = call(() => this._n.tryNext())
    return e === null ? null : JSON.parse(e)
  }
  async *[Symbol.asyncIterator]() {
    for (;;) {
      const e = await this.next()
      if (e === null) return
      yield e
    }
  }
}

/**
 * The JSON Schema (draft 2020-12) of one core kind's data (`schema('turn/end')`),
 * or with no kind every core kind's keyed by name: what `turnstone schema`
 * prints, generated from the engine's types.
 */
function schema(kind) {
  return JSON.parse(call(() => native.schemaJson(kind ?? null)))
}

module.exports = { Store, Session, Subscription, TurnstoneError, ToolRefused, ToolAborted, schema }
