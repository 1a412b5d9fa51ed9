'use strict'
// Small graphs shared by the LangGraph tests.
const { StateGraph, Annotation, START, END, interrupt } = require('@langchain/langgraph')

const append = { reducer: (a, b) => a.concat(b), default: () => [] }

// a -> b (asks a human: interrupt) -> c
function approvalGraph() {
  const State = Annotation.Root({ log: Annotation(append), answer: Annotation() })
  return new StateGraph(State)
    .addNode('a', (s) => ({ log: [`a saw ${s.log.length}`] }))
    .addNode('b', () => {
      const answer = interrupt({ question: 'deploy?' })
      return { log: ['b'], answer }
    })
    .addNode('c', (s) => ({ log: [`c after ${s.answer}`] }))
    .addEdge(START, 'a')
    .addEdge('a', 'b')
    .addEdge('b', 'c')
    .addEdge('c', END)
}

// inc runs until n reaches target; each step logs the value it started from.
function counterGraph(target, onStep = () => {}) {
  const State = Annotation.Root({ n: Annotation(), log: Annotation(append) })
  return new StateGraph(State)
    .addNode('inc', (s) => {
      onStep(s.n)
      return { n: s.n + 1, log: [s.n] }
    })
    .addEdge(START, 'inc')
    .addConditionalEdges('inc', (s) => (s.n >= target ? END : 'inc'))
}

// Two branches in one superstep (fan-out), then a join: several tasks'
// writes on one checkpoint.
function fanGraph() {
  const State = Annotation.Root({ log: Annotation(append) })
  return new StateGraph(State)
    .addNode('left', () => ({ log: ['left'] }))
    .addNode('right', () => ({ log: ['right'] }))
    .addNode('join', (s) => ({ log: [`join ${s.log.length}`] }))
    .addEdge(START, 'left')
    .addEdge(START, 'right')
    .addEdge('left', 'join')
    .addEdge('right', 'join')
    .addEdge('join', END)
}

// A subgraph (its checkpoints live in their own checkpoint_ns) that stops
// on an interrupt inside the subgraph.
function nestedGraph() {
  const State = Annotation.Root({ log: Annotation(append) })
  const inner = new StateGraph(State)
    .addNode('ask', () => ({ log: [`inner got ${interrupt('inner?')}`] }))
    .addNode('after', () => ({ log: ['inner done'] }))
    .addEdge(START, 'ask')
    .addEdge('ask', 'after')
    .addEdge('after', END)
    .compile()
  return new StateGraph(State)
    .addNode('outer', () => ({ log: ['outer'] }))
    .addNode('sub', inner)
    .addEdge(START, 'outer')
    .addEdge('outer', 'sub')
    .addEdge('sub', END)
}

module.exports = { approvalGraph, counterGraph, fanGraph, nestedGraph }
