'use strict'
// turnstone/langgraph: a LangGraph.js checkpointer (BaseCheckpointSaver) that
// keeps each thread in one turnstone session.
//
// One session per thread (`langgraph:<thread_id>`; after a deleteThread the
// thread's next session is `langgraph~1:<thread_id>`, then `~2`, ...: a
// deleted session keeps its name), written only through plugin events
// registered as ignorable:
//   langgraph/checkpoint  {thread_id, ns, id, parent, checkpoint, metadata, values}
//                         the checkpoint without its channel values, its
//                         metadata, and the values of the channels named in
//                         newVersions ([channel, version, blob | null]).
//   langgraph/writes      {ns, checkpoint_id, task_id, task_path, writes: [[idx, channel, blob]]}
//   langgraph/delete      {} : written by versions before 0.1 instead of deleting
//                         the session; still honoured when read (the thread
//                         starts empty again after it).
// A blob is the serializer's [type, bytes]: {t, s} when the bytes are UTF-8
// text (JSON, readable in dumps and found by search), else {t, b} (base64).
//
// Reads are answered from an in-memory index per thread, built once from the
// session's events when the thread is first used and kept up to date by the
// writes of this saver: ids, parents, metadata (for `filter`), pending writes
// and, per checkpoint, where each channel's value lies (the seq of the event
// holding it). Checkpoint and value payloads are read back from the session
// by seq when a tuple is returned. put and putWrites resolve once their event
// is durable; concurrent ones share a commit (group commit).
const {
  BaseCheckpointSaver,
  TASKS,
  WRITES_IDX_MAP,
  compareWritesSortKeys,
  copyCheckpoint,
  getCheckpointId,
  maxChannelVersion,
  writesSortKey,
} = require('@langchain/langgraph-checkpoint')
const { isDeepStrictEqual } = require('node:util')
const { Store, TurnstoneError } = require('./turnstone.js')

const KIND_CHECKPOINT = 'langgraph/checkpoint'
const KIND_WRITES = 'langgraph/writes'
const KIND_DELETE = 'langgraph/delete'
/** The plugin kinds the saver writes: pass them to a Store you open yourself. */
const PLUGINS = { [KIND_CHECKPOINT]: true, [KIND_WRITES]: true, [KIND_DELETE]: true }
const PREFIX = 'langgraph:'
const GENERATION = /^langgraph~([1-9][0-9]*):/

// The thread id a session name belongs to (null: not a thread's session).
function threadOfName(name) {
  if (name.startsWith(PREFIX)) return name.slice(PREFIX.length)
  const m = GENERATION.exec(name)
  return m ? name.slice(m[0].length) : null
}

// Session names for a thread, in generation order.
function* namesOf(threadId) {
  yield PREFIX + threadId
  for (let n = 1; ; n++) yield `langgraph~${n}:${threadId}`
}

const utf8 = new TextDecoder('utf-8', { fatal: true })

function encodeBlob([type, bytes]) {
  const buf = typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  try {
    return { t: type, s: utf8.decode(buf) }
  } catch {
    return { t: type, b: buf.toString('base64') }
  }
}

function decodeBlob(blob) {
  const bytes = blob.s !== undefined ? new TextEncoder().encode(blob.s) : new Uint8Array(Buffer.from(blob.b, 'base64'))
  return [blob.t, bytes]
}

function threadOf(config, what) {
  const id = config?.configurable?.thread_id
  if (id === undefined || id === null || id === '') {
    throw new Error(`${what}: config.configurable.thread_id is required (graph.invoke(input, { configurable: { thread_id: "..." } }))`)
  }
  return String(id)
}

const has = (o, k) => Object.prototype.hasOwnProperty.call(o, k)


// Everything the saver knows about one thread, folded from its events.
class ThreadIndex {
  constructor() {
    this.reset()
  }
  reset() {
    this.namespaces = new Map() // ns -> {ids: sorted checkpoint ids, byId: Map id -> record}
    this.writes = new Map() // `${ns}\0${checkpointId}` -> Map `${task}\0${idx}` -> write (where its value lies)
    this.latestValue = new Map() // `${ns}\0${channel}\0${version}` -> value ref (any branch)
  }
  ns(ns) {
    let n = this.namespaces.get(ns)
    if (!n) this.namespaces.set(ns, (n = { ids: [], byId: new Map() }))
    return n
  }
  // Fold one langgraph/checkpoint event (seq, data, metadata deserialized).
  addCheckpoint(seq, d, metadata, versions) {
    const n = this.ns(d.ns)
    const parent = d.parent != null ? n.byId.get(d.parent) : undefined
    const refs = new Map() // channel -> {seq, i} | null (the channel is empty)
    d.values.forEach(([ch, ver, blob], i) => {
      const ref = blob === null ? null : { seq, i }
      refs.set(ch, ref)
      if (ver !== null) this.latestValue.set(`${d.ns}\0${ch}\0${ver}`, ref)
    })
    // Channels not written by this checkpoint: the value its parent holds at
    // the same version, else the value stored for that version on any branch.
    for (const [ch, ver] of Object.entries(versions)) {
      if (refs.has(ch)) continue
      if (parent && parent.refs.has(ch) && parent.versions[ch] === ver) refs.set(ch, parent.refs.get(ch))
      else {
        const ref = this.latestValue.get(`${d.ns}\0${ch}\0${ver}`)
        if (ref !== undefined) refs.set(ch, ref)
      }
    }
    if (!n.byId.has(d.id)) insertSorted(n.ids, d.id)
    n.byId.set(d.id, { id: d.id, ns: d.ns, parent: d.parent ?? undefined, seq, metadata, versions, refs })
  }
  // Fold one langgraph/writes event. A regular write (idx >= 0) already
  // stored for (task, idx) is kept; special writes (errors, interrupts) are
  // replaced.
  addWrites(seq, d) {
    const key = `${d.ns}\0${d.checkpoint_id}`
    let m = this.writes.get(key)
    if (!m) this.writes.set(key, (m = new Map()))
    d.writes.forEach(([idx, ch], j) => {
      const k = `${d.task_id}\0${idx}`
      if (idx >= 0 && m.has(k)) return
      m.set(k, { task: d.task_id, idx, ch, path: d.task_path ?? '', seq, j })
    })
  }
  has(ns, checkpointId, taskId, idx) {
    return this.writes.get(`${ns}\0${checkpointId}`)?.has(`${taskId}\0${idx}`) ?? false
  }
  // Pending writes of one checkpoint in writesSortKey order.
  orderedWrites(ns, checkpointId) {
    const m = this.writes.get(`${ns}\0${checkpointId}`)
    if (!m) return []
    return [...m.values()]
      .map((w) => ({ w, key: writesSortKey(w.path, w.task, w.idx) }))
      .sort((a, b) => compareWritesSortKeys(a.key, b.key))
      .map(({ w }) => w)
  }
}

function insertSorted(arr, id) {
  let lo = 0
  let hi = arr.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (arr[mid] < id) lo = mid + 1
    else hi = mid
  }
  arr.splice(lo, 0, id)
}

class TurnstoneSaver extends BaseCheckpointSaver {
  /**
   * A checkpointer over the turnstone store in `store` (a path, or a Store
   * opened with `{plugins: TurnstoneSaver.plugins}`).
   */
  constructor(store, serde) {
    super(serde)
    if (store instanceof Store) {
      this.store = store
      this._owned = false
    } else {
      this.store = new Store(String(store), { plugins: PLUGINS })
      this._owned = true
    }
    this._threads = new Map() // thread_id -> Promise<{threadId, name, session, index} | null>
    this._catalog = null // Promise<Map thread_id -> session name> (the live generation)
    this._cache = new Map() // `${thread}\0${seq}` -> Promise of event data (a few recent ones)
  }

  static get plugins() {
    return { ...PLUGINS }
  }

  /** The store's session id of a thread's first generation (before any deleteThread). */
  static sessionId(threadId) {
    return PREFIX + threadId
  }

  /** The store's session id holding a thread now (null: the thread has none). */
  async sessionName(threadId) {
    return (await this._names()).get(String(threadId)) ?? null
  }

  // thread id -> session name, from the store's live sessions (the newest
  // generation of each thread), read once and kept up to date.
  _names() {
    if (!this._catalog) {
      this._catalog = this.store.sessions().then((all) => {
        const newest = new Map()
        for (const s of all) {
          const tid = threadOfName(s.id)
          if (tid === null) continue
          const prev = newest.get(tid)
          if (!prev || (s.createdMs ?? 0) >= (prev.createdMs ?? 0)) newest.set(tid, s)
        }
        return new Map([...newest].map(([tid, s]) => [tid, s.id]))
      })
      this._catalog.catch(() => (this._catalog = null))
    }
    return this._catalog
  }

  // The thread's session and index; `create`: create the session if missing.
  async _thread(threadId, create) {
    let p = this._threads.get(threadId)
    if (p) {
      const t = await p
      if (t || !create) return t
      if (this._threads.get(threadId) === p) this._threads.delete(threadId)
      return this._thread(threadId, create)
    }
    p = this._load(threadId, create)
    this._threads.set(threadId, p)
    try {
      return await p
    } catch (e) {
      if (this._threads.get(threadId) === p) this._threads.delete(threadId)
      throw e
    }
  }

  async _load(threadId, create) {
    const names = await this._names()
    // Not known to this saver: a first generation made since (a store.fork
    // into `langgraph:<id>`, another process) is found by its name.
    let name = names.get(threadId) ?? TurnstoneSaver.sessionId(threadId)
    let session
    try {
      session = await this.store.openSession(name)
      names.set(threadId, name)
    } catch (e) {
      if (!(e instanceof TurnstoneError) || !GONE.has(e.kind)) throw e
      names.delete(threadId) // never made, or deleted through another handle
    }
    if (!session) {
      if (!create) return null
      for (const candidate of namesOf(threadId)) {
        try {
          session = this.store.createSession(candidate)
          name = candidate
          break
        } catch (e) {
          if (!(e instanceof TurnstoneError) || !TAKEN.has(e.kind)) throw e
        }
      }
      names.set(threadId, name)
      session.setMeta('langgraph.thread_id', threadId)
      return { threadId, name, session, index: new ThreadIndex() }
    }
    const index = new ThreadIndex()
    for (const ev of await session.events()) {
      if (ev.kind === KIND_CHECKPOINT) {
        const d = ev.data
        const [metadata, checkpoint] = await Promise.all([
          this.serde.loadsTyped(...decodeBlob(d.metadata)),
          this.serde.loadsTyped(...decodeBlob(d.checkpoint)),
        ])
        index.addCheckpoint(ev.seq, d, metadata, checkpoint.channel_versions ?? {})
      } else if (ev.kind === KIND_WRITES) index.addWrites(ev.seq, ev.data)
      else if (ev.kind === KIND_DELETE) index.reset()
    }
    return { threadId, name, session, index }
  }

  // The data of event `seq` of a thread's session (one read for concurrent askers).
  _event(t, seq) {
    const key = `${t.name}\0${seq}`
    let p = this._cache.get(key)
    if (!p) {
      p = t.session.events(seq, seq + 1).then(([ev]) => ev.data)
      this._remember(key, p)
      p.catch(() => this._cache.get(key) === p && this._cache.delete(key))
    }
    return p
  }

  // Keep a few recent events (promises of their data).
  _remember(key, p) {
    this._cache.set(key, p)
    if (this._cache.size > 32) this._cache.delete(this._cache.keys().next().value)
  }

  async _writeValue(t, w) {
    const d = await this._event(t, w.seq)
    return this.serde.loadsTyped(...decodeBlob(d.writes[w.j][2]))
  }

  // The CheckpointTuple of one index record.
  async _tuple(t, rec) {
    const d = await this._event(t, rec.seq)
    const checkpoint = await this.serde.loadsTyped(...decodeBlob(d.checkpoint))
    const values = {}
    await Promise.all(
      [...rec.refs].map(async ([ch, ref]) => {
        if (ref === null) return
        const holder = ref.seq === rec.seq ? d : await this._event(t, ref.seq)
        values[ch] = await this.serde.loadsTyped(...decodeBlob(holder.values[ref.i][2]))
      }),
    )
    checkpoint.channel_values = values
    const pendingWrites = await Promise.all(
      t.index.orderedWrites(rec.ns, rec.id).map(async (w) => [w.task, w.ch, await this._writeValue(t, w)]),
    )
    if (checkpoint.v < 4 && rec.parent !== undefined) await this._migrateSends(t, checkpoint, rec)
    const tuple = {
      config: { configurable: { thread_id: t.threadId, checkpoint_ns: rec.ns, checkpoint_id: rec.id } },
      checkpoint,
      metadata: await this.serde.loadsTyped(...decodeBlob(d.metadata)),
      pendingWrites,
    }
    if (rec.parent !== undefined) {
      tuple.parentConfig = { configurable: { thread_id: t.threadId, checkpoint_ns: rec.ns, checkpoint_id: rec.parent } }
    }
    return tuple
  }

  // Checkpoints before format 4 kept pending sends as writes to TASKS on
  // their parent: move them into the channel, as LangGraph expects.
  async _migrateSends(t, checkpoint, rec) {
    const sends = await Promise.all(
      t.index
        .orderedWrites(rec.ns, rec.parent)
        .filter((w) => w.ch === TASKS)
        .map((w) => this._writeValue(t, w)),
    )
    checkpoint.channel_values[TASKS] = sends
    const versions = Object.values(checkpoint.channel_versions ?? {})
    checkpoint.channel_versions = checkpoint.channel_versions ?? {}
    checkpoint.channel_versions[TASKS] = versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined)
  }

  async getTuple(config) {
    const tid = config?.configurable?.thread_id
    if (tid === undefined || tid === null || tid === '') return undefined
    const threadId = String(tid)
    const ns = config.configurable.checkpoint_ns ?? ''
    const t = await this._thread(threadId, false)
    if (!t) return undefined
    const n = t.index.namespaces.get(ns)
    if (!n || n.ids.length === 0) return undefined
    const id = getCheckpointId(config)
    const rec = id ? n.byId.get(id) : n.byId.get(n.ids[n.ids.length - 1])
    if (!rec) return undefined
    const tuple = await this._tuple(t, rec)
    // Asked for by id: the config as given (as SqliteSaver and MemorySaver do).
    if (id) tuple.config = config
    return tuple
  }

  // Newest first across the threads and namespaces asked for (checkpoint ids
  // are time-ordered uuid6), like SqliteSaver's ORDER BY checkpoint_id DESC.
  // A limit of 0 or undefined is no limit (as in SqliteSaver); filter values
  // that are undefined are ignored, the others must equal the metadata's.
  async *list(config, options = {}) {
    const { before, limit } = options
    const filter = Object.entries(options.filter ?? {}).filter(([, v]) => v !== undefined)
    const threadId = config?.configurable?.thread_id
    const wantNs = config?.configurable?.checkpoint_ns
    const wantId = config?.configurable?.checkpoint_id
    const beforeId = before?.configurable?.checkpoint_id
    let threadIds
    if (threadId !== undefined && threadId !== null && threadId !== '') threadIds = [String(threadId)]
    else {
      this._catalog = null // every thread: read the store's list again
      threadIds = [...(await this._names()).keys()]
    }
    const found = []
    for (const tid of threadIds) {
      const t = await this._thread(tid, false)
      if (!t) continue
      for (const [ns, n] of t.index.namespaces) {
        if (wantNs !== undefined && wantNs !== null && ns !== wantNs) continue
        for (const id of n.ids) {
          if (wantId && id !== wantId) continue
          if (beforeId !== undefined && !(id < beforeId)) continue
          const rec = n.byId.get(id)
          if (!filter.every(([k, v]) => isDeepStrictEqual(rec.metadata?.[k], v))) continue
          found.push({ t, rec })
        }
      }
    }
    found.sort((a, b) => (a.rec.id < b.rec.id ? 1 : a.rec.id > b.rec.id ? -1 : 0))
    const n = limit ? Math.max(0, Math.floor(limit)) : found.length
    for (const { t, rec } of found.slice(0, n)) yield await this._tuple(t, rec)
  }

  async put(config, checkpoint, metadata, newVersions) {
    const threadId = threadOf(config, 'put')
    const ns = config.configurable?.checkpoint_ns ?? ''
    const parent = config.configurable?.checkpoint_id
    const prepared = copyCheckpoint(checkpoint)
    const channelValues = prepared.channel_values ?? {}
    delete prepared.channel_values
    // The values of the channels in newVersions (null: the channel is
    // empty), and of channels without a version (LangGraph keeps a few, such
    // as empty topics). A versioned channel not in newVersions is unchanged:
    // its value is the one already stored for its version.
    const versions = prepared.channel_versions ?? {}
    const own = Object.entries(newVersions ?? {})
    for (const ch of Object.keys(channelValues)) {
      if (!has(versions, ch) && !has(newVersions ?? {}, ch)) own.push([ch, null])
    }
    const values = await Promise.all(
      own.map(async ([ch, ver]) => [ch, ver, has(channelValues, ch) ? encodeBlob(await this.serde.dumpsTyped(channelValues[ch])) : null]),
    )
    const [cp, md] = await Promise.all([this.serde.dumpsTyped(prepared), this.serde.dumpsTyped(metadata)])
    const data = {
      thread_id: threadId,
      ns,
      id: checkpoint.id,
      parent: parent ?? null,
      checkpoint: encodeBlob(cp),
      metadata: encodeBlob(md),
      values,
    }
    const t = await this._thread(threadId, true)
    const seq = t.session.append(KIND_CHECKPOINT, data)
    this._remember(`${t.name}\0${seq}`, Promise.resolve(data))
    // The index holds metadata as it reads back from the log.
    t.index.addCheckpoint(seq, data, await this.serde.loadsTyped(...decodeBlob(data.metadata)), prepared.channel_versions ?? {})
    await t.session.flush()
    return { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: checkpoint.id } }
  }

  async putWrites(config, writes, taskId, taskPath) {
    const threadId = threadOf(config, 'putWrites')
    const ns = config.configurable?.checkpoint_ns ?? ''
    const checkpointId = config.configurable?.checkpoint_id
    if (checkpointId === undefined || checkpointId === null || checkpointId === '') {
      throw new Error('putWrites: config.configurable.checkpoint_id is required')
    }
    const t = await this._thread(threadId, true)
    const rows = await Promise.all(
      writes.map(async ([ch, value], i) => {
        const idx = WRITES_IDX_MAP[ch] ?? i
        if (idx >= 0 && t.index.has(ns, checkpointId, taskId, idx)) return null
        return [idx, ch, encodeBlob(await this.serde.dumpsTyped(value))]
      }),
    )
    const fresh = rows.filter((r) => r !== null)
    if (fresh.length > 0) {
      const data = { ns, checkpoint_id: checkpointId, task_id: taskId, task_path: taskPath ?? '', writes: fresh }
      const seq = t.session.append(KIND_WRITES, data)
      this._remember(`${t.name}\0${seq}`, Promise.resolve(data))
      t.index.addWrites(seq, data)
    }
    // Resolves once durable, and not before earlier writes of the thread.
    await t.session.flush()
  }

  /** `store.delete` of the thread's session: a durable tombstone, after
   * which the thread is empty and its events are no longer read (forks made
   * from it keep theirs). Used again, the thread gets a new session. */
  async deleteThread(threadId) {
    const tid = String(threadId)
    const t = await this._thread(tid, false)
    const names = await this._names()
    const name = names.get(tid)
    if (this._threads.has(tid)) this._threads.delete(tid)
    names.delete(tid)
    if (t) {
      await t.session.flush()
      t.session.close() // a session is deleted only once no handle holds it
    }
    if (name !== undefined) await deleteWhenReleased(this.store, name)
  }

  /** Make everything durable and close the store, if the saver opened it. */
  async close() {
    await Promise.all([...this._threads.values()].map(async (p) => (await p.catch(() => null))?.session.flush()))
    this._threads.clear()
    if (this._owned) await this.store.close()
  }
}

// Error kinds: a session name that cannot be opened any more, or created again.
const GONE = new Set(['unknown_session', 'session_deleted'])
const TAKEN = new Set(['session_exists', 'session_deleted'])

// store.delete, which is refused while a handle is alive: the durability
// waiter may still hold the closed handle for the instant it takes to
// finish a round, so wait for that (briefly) instead of failing.
async function deleteWhenReleased(store, name) {
  for (let i = 0; ; i++) {
    try {
      await store.delete(name)
      return
    } catch (e) {
      if (i >= 200 || !(e instanceof TurnstoneError) || e.kind !== 'session_live') throw e
      await new Promise((r) => setTimeout(r, 5))
    }
  }
}

module.exports = { TurnstoneSaver, PLUGINS }
