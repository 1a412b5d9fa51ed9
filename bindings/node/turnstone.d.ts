export type Surface = 'append' | { op: 'replace'; start: number; end: number }
export interface SessionEvent { seq: number; kind: string; ignorable: boolean; data: any; surface?: any; ts?: number }
export interface SessionInfo { id: string; events: number; createdMs: number | null; updatedMs: number | null; openTurn: boolean; parent: { session: string; upto: number } | null }
/** Something a request body left out: `what` is `param reasoning`, `tool web_search (type web_search_20250305)`, `block thinking`, `tool field cache_control`; `count` how many times. */
export interface Dropped { what: string; why: string; count: number }
export interface Hit { session: string; seq: number; snippet: string }
export type Format = 'anthropic' | 'openai-responses' | 'openai-chat'

// ---- Event data of every core kind (docs/EVENTS.md; `turnstone schema`
// prints their JSON Schema, and test/events.test.js checks these against it).

/** A content block in the provider's shape (text, thinking with its signature, tool_use, an OpenAI Responses item, ...). */
export type ContentBlock = { type?: string; [k: string]: any }
export type TurnEndReason = { kind: 'completed' } | { kind: 'cancelled' } | { kind: 'error'; message: string } | { kind: 'interrupted' }
export type StepEndReason = { kind: 'completed' } | { kind: 'tool_use' } | { kind: 'cancelled' } | { kind: 'error'; message: string } | { kind: 'interrupted' }
export type ToolStatus = 'TOOL_OUTCOME_UNKNOWN' | 'TOOL_NOT_STARTED' | 'ABORTED_BEFORE_DISPATCH'
export interface TurnStart { turn_id: string }
export interface TurnEnd { turn_id: string; reason: TurnEndReason }
export interface StepStart { turn_id: string; step_id: string }
export interface StepEnd { turn_id: string; step_id: string; reason: StepEndReason }
export interface UserMessage { content: ContentBlock[] }
export interface AssistantChunk { index: number; text: string }
/** Any other field of the response (its id, model, ...) is kept too. */
export interface AssistantMessage { content: ContentBlock[]; usage?: Record<string, any> | null; stop_reason?: string | null; [k: string]: any }
export interface ToolCall { call_id: string; name: string; input: any }
export interface ToolResult { call_id: string; content: ContentBlock[]; is_error?: boolean; status?: ToolStatus | null }
export interface ToolSchema { name?: string; description?: string; input_schema?: any; [k: string]: any }
export interface CallConfig { provider: string; model: string; params?: Record<string, any> }
export interface EpochHeader { config: CallConfig; adapter_defaults?: string[]; system?: string | ContentBlock[] | null; tools?: ToolSchema[] }
export interface RequestHeader { reason: 'initial' | 'resume' | 'change'; header: EpochHeader }
export interface RequestContext { provider: string; model: string; context_window: number }
export interface SessionEndSeed {}
export interface CompactionStart { compaction_id: string }
export interface CompactionSummary { compaction_id: string; text: string }
export interface CompactionEnd { compaction_id: string }
export interface CompactionPrune { replaced_seqs: number[]; tokens_saved: number }
export interface SessionMeta { title?: string | null; add_tags?: string[]; remove_tags?: string[]; fields?: Record<string, string | null> }
export interface SessionDelete {}
/** Each core kind's name and the type of its data. */
export interface CoreEvents {
  'turn/start': TurnStart
  'turn/end': TurnEnd
  'step/start': StepStart
  'step/end': StepEnd
  'user/message': UserMessage
  'assistant/chunk': AssistantChunk
  'assistant/message': AssistantMessage
  'tool/call': ToolCall
  'tool/result': ToolResult
  'request/header': RequestHeader
  'request/context': RequestContext
  'session/end-seed': SessionEndSeed
  'compaction/start': CompactionStart
  'compaction/summary': CompactionSummary
  'compaction/end': CompactionEnd
  'compaction/prune': CompactionPrune
  'session/meta': SessionMeta
  'session/delete': SessionDelete
}
/** The data `append(kind, ...)` takes: a core kind's type, or any object for a plugin kind. */
export type EventData<K extends string> = K extends keyof CoreEvents ? CoreEvents[K] : Record<string, unknown>
/** One message the model sees (`messages()`); a tool result is a user message holding one tool_result block. */
export interface Message { role: 'user' | 'assistant'; source_seq: number; kind: 'user/message' | 'assistant/message' | 'tool/result'; content: ContentBlock[] }

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
/**
 * The JSON Schema (draft 2020-12) of one core kind's data, or with no kind
 * every core kind's keyed by name (what `turnstone schema` prints). An
 * unknown kind throws TurnstoneError `invalid_argument` listing the core kinds.
 */
export function schema(kind: keyof CoreEvents): Record<string, any>
export function schema(): Record<keyof CoreEvents, Record<string, any>>

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
  readonly backend: 'embedded' | 'shared' | 'postgres'
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
  tools?: ToolSchema[]
}

export interface ToolCallInfo { callId: string; name: string; input: any; session: Session }

export class Session {
  readonly id: string
  readonly length: number
  readonly metadata: { title: string | null; tags: string[]; fields: Record<string, string> }
  repairReport: any | null
  /** Release this handle's claim on the session; later calls throw. */
  close(): void
  /** Append one event: a core kind's data is typed (CoreEvents), a plugin kind's is any object. */
  append<K extends string>(kind: K, data: EventData<K>, options?: { surface?: Surface }): number
  /** turn/start: a turn begins. */
  startTurn(turnId: string): number
  /** turn/end with its reason ('error' takes a message). */
  endTurn(turnId: string, reason?: 'completed' | 'cancelled', options?: {}): number
  endTurn(turnId: string, reason: 'error', options: { message: string }): number
  /** step/start: one model request of the turn, its response and the tools it calls. */
  startStep(turnId: string, stepId: string): number
  /** step/end with its reason ('tool_use' when the step ends to run tools; 'error' takes a message). */
  endStep(turnId: string, stepId: string, reason?: 'completed' | 'tool_use' | 'cancelled', options?: {}): number
  endStep(turnId: string, stepId: string, reason: 'error', options: { message: string }): number
  user(content: string | ContentBlock[]): number
  /** An assistant message; with `{provider}`, `message` is that API's whole response body, logged as it came. */
  assistant(message: AssistantMessage): number
  assistant(response: { [k: string]: any }, options: { provider: Format }): number
  /** Several core events as one atomic group (surface kinds may only append); their seqs. */
  appendGroup(events: Array<[kind: string, data: any, options?: { surface?: 'append' }]>): number[]
  /** Every turn, in order. */
  turns(): Array<{ turn_id: string; start_seq: number; end_seq: number | null; reason: { kind: string; [k: string]: any } | null }>
  /** Fork after the end of a turn (durable events only); the child holds seqs 0..upto. */
  forkAfterTurn(turnId: string, options?: { child?: string }): Promise<{ child: string; upto: number }>
  flush(): Promise<void>
  messages(): Message[]
  messages(format: Format): Record<string, any>
  events(start?: number, end?: number): Promise<SessionEvent[]>
  /** Record what the next request is made with; writes a request/header when needed and says why. */
  prepareRequest(spec: RequestSpec): 'initial' | 'resume' | 'change' | null
  /** A new agent loop takes over this session: the next header is 'resume'. */
  beginLoop(): void
  /** The request body the log rebuilds for a provider. */
  requestBody(format: Format): Record<string, any>
  /**
   * What `requestBody(format)` leaves out because the header was written for
   * another API (an OpenAI session sent to Anthropic: its hosted tools,
   * `reasoning` items, unknown parameters); empty when nothing was.
   */
  dropped(format: Format): Dropped[]
  /** Throws (kind 'request_mismatch') naming the first path where `body` differs from the log's. */
  checkRequestBody(format: Format, body: Record<string, any>): void
  /** Replace surface positions start..end by a summary, atomically; the summary's seq. */
  compact(start: number, end: number, summary: string, options?: { compactionId?: string }): number
  /** Replace the messages of an ended turn by a summary, atomically; the summary's seq. */
  compactTurn(turnId: string, summary: string, options?: { compactionId?: string }): number
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
