export type Surface = 'append' | { op: 'replace'; start: number; end: number }
export interface SessionEvent { seq: number; kind: string; ignorable: boolean; data: any; surface?: any; ts?: number }
export interface SessionInfo { id: string; events: number; createdMs: number | null; updatedMs: number | null; openTurn: boolean; parent: { session: string; upto: number } | null }
export interface Hit { session: string; seq: number; snippet: string }
export type Format = 'anthropic' | 'openai-responses' | 'openai-chat'

export class TurnstoneError extends Error {
  kind: string
  path: string | null
  offset: number | null
}
export class ToolRefused extends Error { reason: string }
export class ToolAborted extends Error {}

export class Store {
  constructor(path: string, options?: { readOnly?: boolean; plugins?: Record<string, boolean>; owner?: string; leaseTtlMs?: number })
  readonly backend: 'embedded' | 'postgres'
  createSession(id: string): Session
  openSession(id: string): Promise<Session>
  openReadOnly(id: string): Promise<Session>
  sessions(): Promise<SessionInfo[]>
  fork(source: string, options?: { at?: number; child?: string }): Promise<string>
  replay(id: string, options?: { start?: number; end?: number }): Promise<SessionEvent[]>
  search(query: string, options?: { limit?: number; session?: string }): Promise<Hit[]>
  delete(id: string): Promise<number>
  subscribe(id: string, fromSeq?: number): Subscription
  close(): Promise<void>
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
  assistant(message: { content: any[]; usage?: any; stop_reason?: string; [k: string]: any }): number
  flush(): Promise<void>
  messages(): any[]
  messages(format: Format): any
  events(start?: number, end?: number): Promise<SessionEvent[]>
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
