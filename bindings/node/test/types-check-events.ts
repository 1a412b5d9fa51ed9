// Not a test file: checked by `tsc --strict` in run.sh (issue 39 §1). A
// harness written against turnstone.d.ts gets each core kind's data typed;
// each `@ts-expect-error` below fails the check if the types stop refusing it.
import { Store, type Message, type SessionEvent, type TurnEnd } from '../turnstone'

export async function harness(dir: string): Promise<number> {
  const store = new Store(dir)
  const s = store.createSession('typed')
  s.append('turn/start', { turn_id: 't1' })
  s.append('user/message', { content: [{ type: 'text', text: 'hi' }] }, { surface: 'append' })
  s.append('assistant/message', { content: [{ type: 'text', text: 'Hello.' }], stop_reason: 'end_turn', id: 'msg_1' }, { surface: 'append' })
  s.append('harness/note', { anything: [1, 2] }) // a plugin kind: any object
  // @ts-expect-error: turn/end needs a reason
  s.append('turn/end', { turn_id: 't1' })
  // @ts-expect-error: 'done' is not a turn end reason
  s.append('turn/end', { turn_id: 't1', reason: { kind: 'done' } })
  // @ts-expect-error: an error reason needs its message
  const bad: TurnEnd = { turn_id: 't1', reason: { kind: 'error' } }
  s.append('turn/end', { turn_id: 't1', reason: { kind: 'completed' } })
  s.startTurn('t2')
  s.startStep('t2', 's1')
  s.endStep('t2', 's1', 'tool_use')
  // @ts-expect-error: an error end needs a message
  s.endTurn('t2', 'error')
  s.endTurn('t2', 'error', { message: 'the model timed out' })
  s.prepareRequest({ provider: 'anthropic', model: 'm', tools: [{ name: 'ls', input_schema: { type: 'object' } }] })
  const messages: Message[] = s.messages()
  const roles: Array<'user' | 'assistant'> = messages.map((m) => m.role)
  const body: Record<string, any> = s.messages('anthropic')
  const events: SessionEvent[] = await s.events()
  await store.close()
  return roles.length + Object.keys(body).length + events.length + (bad ? 0 : 1)
}
