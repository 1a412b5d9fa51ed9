"""An OpenAI Agents SDK run on TurnstoneSession, killed with SIGKILL in the
middle and resumed.

    python examples/agents_crash_resume.py [store-dir] [--json]

The model is scripted (no network): each response is a reasoning item
with encrypted content plus one call of the `add` tool, until STEPS tool
outputs are in its input; then it answers with the total. The parent runs
the agent in a child process, kills it with SIGKILL once a few tool calls
have run, then opens the same store and runs the agent again on the same
session: the history the killed run made durable is the model's input, so
the run goes on from there instead of starting over."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)

from turnstone.agents import TurnstoneSession

STEPS = 10
SESSION = "crash-demo"
LEDGER = os.environ.get("LEDGER", os.devnull)
set_tracing_disabled(True)


@function_tool
async def add(a: int, b: int) -> int:
    """Add two numbers (slowly; each call is written to the ledger)."""
    await asyncio.sleep(0.05)
    with open(LEDGER, "a") as f:
        f.write(f"{a}+{b}\n")
    return a + b


def _encrypted(n: int) -> str:
    return f"gAAAAAB-step-{n}-" + "Zm9vYmFy" * 8


class ScriptedModel(Model):
    """Looks at the tool outputs in its input and asks for the next one."""

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, **kwargs) -> ModelResponse:
        items = [] if isinstance(input, str) else input
        outs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        n = len(outs)
        if n >= STEPS:
            msg = ResponseOutputMessage(
                id=f"msg_{n}", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=f"total {outs[-1]['output']}",
                                            annotations=[])])
            return ModelResponse(output=[msg], usage=Usage(), response_id=None)
        total = int(outs[-1]["output"]) if outs else 0
        reasoning = ResponseReasoningItem(id=f"rs_{n}", type="reasoning", summary=[],
                                          encrypted_content=_encrypted(n))
        call = ResponseFunctionToolCall(
            id=f"fc_{n}", type="function_call", call_id=f"call_{n}", name="add",
            arguments=json.dumps({"a": total, "b": n + 1}), status="completed")
        return ModelResponse(output=[reasoning, call], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


AGENT = Agent(name="adder", instructions="add", model=ScriptedModel(), tools=[add])


async def run_once(store: str, prompt: str) -> str:
    session = TurnstoneSession(SESSION, store)
    try:
        result = await Runner.run(AGENT, prompt, session=session, max_turns=100)
        return result.final_output
    finally:
        session.close()


async def items_of(store: str) -> list:
    session = TurnstoneSession(SESSION, store)
    try:
        return await session.get_items()
    finally:
        session.close()


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--child" in sys.argv:
        asyncio.run(run_once(args[0], "add 1 to 10"))
        return
    store = args[0] if args else tempfile.mkdtemp(prefix="agents-crash-")
    ledger = store + "-ledger"
    env = dict(os.environ, LEDGER=ledger)
    proc = subprocess.Popen([sys.executable, __file__, store, "--child"], env=env)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(ledger) and len(open(ledger).read().split()) >= 4:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    code = proc.wait()
    before = asyncio.run(items_of(store))
    global LEDGER
    LEDGER = ledger
    final = asyncio.run(run_once(store, "go on"))
    items = asyncio.run(items_of(store))
    reasoning = [i for i in items if i.get("type") == "reasoning"]
    report = {
        "exit_code": code,
        "items_before_resume": len(before),
        "final_output": final,
        "expected_output": f"total {sum(range(1, STEPS + 1))}",
        "items": items,
        "tool_calls_run": len(open(ledger).read().split()),
        "reasoning_intact": all(r["encrypted_content"] == _encrypted(int(r["id"][3:]))
                                for r in reasoning) and len(reasoning) >= STEPS,
    }
    if "--json" in sys.argv:
        print(json.dumps(report))
    else:
        print(f"child killed (exit {code}); {len(before)} items were durable")
        print(f"resumed: {final!r}; tool calls run in total: {report['tool_calls_run']}")


if __name__ == "__main__":
    main()
