// The ES-module declarations of turnstone/langgraph: the same as langgraph.d.ts,
// with LangGraph's types taken from its ES-module build (as an .mts file
// that imports TurnstoneSaver sees them), so one BaseCheckpointSaver is meant.
import type { RunnableConfig } from '@langchain/core/runnables'
import {
  BaseCheckpointSaver,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointTuple,
  type PendingWrite,
  type SerializerProtocol,
} from '@langchain/langgraph-checkpoint'
import { Store } from './turnstone.js'

/** The plugin kinds TurnstoneSaver writes (all ignorable). */
export declare const PLUGINS: Record<'langgraph/checkpoint' | 'langgraph/writes' | 'langgraph/delete', true>

/**
 * A LangGraph checkpointer over a turnstone store: one session per thread
 * (`langgraph:<thread_id>`); put and putWrites resolve once durable.
 */
export declare class TurnstoneSaver extends BaseCheckpointSaver {
  /** `store`: a directory, or a Store opened with `{ plugins: TurnstoneSaver.plugins }`. */
  constructor(store: string | Store, serde?: SerializerProtocol)
  readonly store: Store
  static readonly plugins: typeof PLUGINS
  /** The session id of a thread's first generation (before any deleteThread). */
  static sessionId(threadId: string): string
  /** The session id holding a thread now (`langgraph~N:<id>` after N deletes), or null. */
  sessionName(threadId: string): Promise<string | null>
  getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined>
  list(config: RunnableConfig, options?: CheckpointListOptions): AsyncGenerator<CheckpointTuple>
  put(config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, newVersions: ChannelVersions): Promise<RunnableConfig>
  putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath?: string): Promise<void>
  /** Deletes the thread's session (a durable tombstone; forks of it keep their history). */
  deleteThread(threadId: string): Promise<void>
  /** Make everything durable; close the store if the saver opened it. */
  close(): Promise<void>
}
