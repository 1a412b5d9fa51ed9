export type Surface = 'append' | { op: 'replace'; start: number; end: number }
export interface SessionEvent { seq: number; kind: string; ignorable: boolean; data: any; surface?: any; ts?: number }
export interface SessionInfo { id: string; events: number; createdMs: number | null; updatedMs: number | null; openTurn: boolean; parent: { session: string; upto: number } | null }
export interface Hit { session: string; seq: number; snippet: string }
export type Format = 'anthropic' | 'openai-responses' | 'openai-chat'

/** What `Store.collect` did (or, with `dryRun`, would do); keys as the engine and `turnstone gc --json` name them. */
export interface CollectReport {
  /** The collection only decided and reported; nothing changed. */
  dry_run: boolean
  /** Sealed segment files looked at (the last segment is never touched). */
  segments_examined: number
  /** Compacted files written (one per range of rewritten segments). */
  ranges_rewritten: number
  /** Segment files removed (or kept as free files, with `recycleSegments`). */
  segment_files_removed: number
  /** Sessions dead at this collection (deleted or expired) that were not reclaimed before. */
  sessions_reclaimed: number
  /** Of those, the ones evicted by the retention policy's `max_bytes`. */
  sessions_evicted: number
  /** Bytes of the sealed segment files before. */
  bytes_before: number
  /** Bytes of live frames in them, padding included. */
  bytes_live: number
  /** Bytes of the sealed segment files after. */
  bytes_after: number
  /** `bytes_before - bytes_after` (0 if a rewrite grew the files). */
  bytes_reclaimed: number
  /** Blob files looked at. */
  blobs_examined: number
  /** Blob files no live event references, removed (or, dry, that would be). */
  blobs_removed: number
  /** Their bytes. */
  blob_bytes_reclaimed: number
  /** How long the collection took, in microseconds. */
  duration_us: number
  /** Bytes of segment files read and written by this collection. */
  bytes_io: number
  /** A session decided dead was written to (or forked) before it could be reclaimed: nothing changed, the next collection decides again. */
  retry: boolean
}

export class TurnstoneError extends Error {
  kind: string
  path: string | null
  offset: number | null
}
export class ToolRefused extends Error { reason: string }
export class ToolAborted extends Error {}

export class Store {
  /**
   * `segmentBytes` (size of a segment file, default 64 MiB) and `recycleSegments` (segment files
   * that `collect` frees kept and made into new segments, costing up to that many segment files of
   * disk beyond the live data; default 0: off) and `prepareSegments` (a background thread writes the
   * next segment's file of zeros ahead of need while batches are small; default true) and
   * `directWrites` (batches written into recycled and prepared segments go around the page cache
   * with direct I/O; default false) are for a store directory only.
   */
  constructor(path: string, options?: { readOnly?: boolean; plugins?: Record<string, boolean>; owner?: string; leaseTtlMs?: number; segmentBytes?: number; recycleSegments?: number; prepareSegments?: boolean; directWrites?: boolean })
  readonly backend: 'embedded' | 'postgres'
  createSession(id: string): Session
  openSession(id: string): Promise<Session>
  openReadOnly(id: string): Promise<Session>
  sessions(): Promise<SessionInfo[]>
  /** One page of the sessions the filters select (durable ones), with title, tags and fields. */
  listSessions(options?: {
    tags?: string[]; where?: Record<string, string>; updatedSinceMs?: number; openTurn?: boolean
    parent?: string; newestFirst?: boolean; limit?: number; cursor?: string | null
  }): Promise<{
    sessions: Array<{
      id: string; events: number; createdMs: number | null; updatedMs: number | null; openTurn: boolean
      parent: { session: string; upto: number } | null; title: string | null; tags: string[]; fields: Record<string, string>
    }>
    nextCursor: string | null
  }>
  fork(source: string, options?: { at?: number; child?: string }): Promise<string>
  replay(id: string, options?: { start?: number; end?: number }): Promise<SessionEvent[]>
  search(query: string, options?: { limit?: number; session?: string }): Promise<Hit[]>
  delete(id: string): Promise<number>
  /** Reclaim disk while the store stays open (a directory only; `threshold` 0..1, default 0.5). */
  collect(options?: { threshold?: number; dryRun?: boolean }): Promise<CollectReport>
  subscribe(id: string, fromSeq?: number): Subscription
  close(): Promise<void>
}

/** What a request is made with (`prepareRequest`). */
export interface RequestSpec {
  provider: string
  model: string
  /** The API's other fields (max_tokens, temperature, ...), sent as given. */
  params?: Record<string, any>
  /** Apply only where `params` sets nothing; dropped before the next request. */
  adapterDefaults?: Record<string, any>
  system?: string | any[]
  tools?: Array<{ name: string; description?: string; input_schema?: any; [k: string]: any }>
}

export interface ToolCallInfo { callId: string; name: string; input: any; session: Session }

export class Session {
  readonly id: string
  readonly length: number
  readonly metadata: { title: string | null; tags: string[]; fields: Record<string, string> }
  repairReport: any | null
  /** Release this handle's claim on the session; later calls throw. */
  close(): void
  append(kind: string, data: any, options?: { surface?: Surface }): number
  user(content: string | any[]): number
  /** An assistant message; with `{provider}`, `message` is that API's whole response body, logged as it came. */
  assistant(message: { content: any[]; usage?: any; stop_reason?: string; [k: string]: any }): number
  assistant(response: { [k: string]: any }, options: { provider: Format }): number
  /** Several core events as one atomic group (surface kinds may only append); their seqs. */
  appendGroup(events: Array<[kind: string, data: any, options?: { surface?: 'append' }]>): number[]
  /** Every turn, in order. */
  turns(): Array<{ turn_id: string; start_seq: number; end_seq: number | null; reason: { kind: string; [k: string]: any } | null }>
  /** Fork after the end of a turn (durable events only); the child holds seqs 0..upto. */
  forkAfterTurn(turnId: string, options?: { child?: string }): Promise<{ child: string; upto: number }>
  flush(): Promise<void>
  messages(): any[]
  messages(format: Format): any
  events(start?: number, end?: number): Promise<SessionEvent[]>
  /** Record what the next request is made with; writes a request/header when needed and says why. */
  prepareRequest(spec: RequestSpec): 'initial' | 'resume' | 'change' | null
  /** A new agent loop takes over this session: the next header is 'resume'. */
  beginLoop(): void
  /** The request body the log rebuilds for a provider. */
  requestBody(format: Format): Record<string, any>
  /** Throws (kind 'request_mismatch') naming the first path where `body` differs from the log's. */
  checkRequestBody(format: Format, body: Record<string, any>): void
  /** Replace surface positions start..end by a summary, atomically; the summary's seq. */
  compact(start: number, end: number, summary: string, options?: { compactionId?: string }): number
  /** Replace the tool result at surface position `at`, atomically; the replacement's seq. */
  pruneToolResult(at: number, replacement: string, options?: { tokensSaved?: number }): number
  setTitle(title: string): number
  addTag(tag: string): number
  setMeta(key: string, value: string | null): number
  toolCall<T>(
    callId: string, name: string, input: any,
    body: (call: ToolCallInfo) => Promise<T> | T,
    options?: { guard?: (call: { callId: string; name: string; input: any }) => string | null | undefined | Promise<string | null | undefined>; cancelled?: () => boolean; nested?: boolean },
  ): Promise<{ resultSeq: number; value: T; notRecorded?: string }>
  runTools<T>(
    calls: { callId: string; name: string; input?: any }[],
    body: (call: { callId: string; name: string; input?: any }) => Promise<T> | T,
    options?: { guard?: (call: { callId: string; name: string; input?: any }) => string | null | undefined | Promise<string | null | undefined>; cancelled?: () => boolean },
  ): Promise<Array<{ callId: string; outcome: 'ran' | 'refused' | 'aborted' | 'failed' | 'result_not_recorded'; value?: T; resultSeq?: number; reason?: string; error?: unknown }>>
}

export class Subscription implements AsyncIterable<SessionEvent> {
  next(): Promise<SessionEvent | null>
  tryNext(): SessionEvent | null
  [Symbol.asyncIterator](): AsyncIterator<SessionEvent>
}
