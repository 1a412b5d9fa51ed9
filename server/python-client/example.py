"""An agent writes its session to a Durable Stream; a second client follows it live.

Usage (Python >= 3.10, `pip install -r requirements.txt`):

    turnstone serve ./store                       # http://127.0.0.1:4437
    python example.py http://127.0.0.1:4437       # writes a new stream /v1/stream/agent-session-<ms>

With `turnstone serve --token T`, set TURNSTONE_SERVE_TOKEN=T here too.

The "agent" appends one JSON event per request (user message, assistant
chunks, a tool call and its result) with the Python client `durable-streams`;
each append returns once the server has made it durable. The follower reads the
same stream over SSE (`live="sse"`) from the start and prints each event as it
arrives. The client does not reconnect by itself when the server ends an SSE
response (`turnstone serve --sse-max-ms`, 60 s by default) or restarts, so the
follower resumes at the last offset it was given. At the end the stream is read
back and compared with what was written (exit status 1 if it differs).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import httpx
from durable_streams import DurableStream, DurableStreamError, FetchError, stream


def agent_session(session: str) -> list[dict]:
    """What an agent harness would record for two turns."""
    events: list[dict] = []
    for turn, question in enumerate(["How many Rust files are in ./src?",
                                     "And how many lines?"], start=1):
        call = f"call-{turn}"
        events += [
            {"kind": "user/message", "session": session, "turn": turn, "text": question},
            {"kind": "assistant/chunk", "turn": turn, "text": "Let me "},
            {"kind": "assistant/chunk", "turn": turn, "text": "check."},
            {"kind": "tool/call", "turn": turn, "id": call, "name": "shell",
             "input": {"cmd": "ls src/*.rs | wc -l" if turn == 1 else "cat src/*.rs | wc -l"}},
            {"kind": "tool/result", "turn": turn, "id": call, "ok": True,
             "output": "14\n" if turn == 1 else "9120\n"},
            {"kind": "assistant/chunk", "turn": turn,
             "text": "There are 14." if turn == 1 else "About 9,120 lines."},
            {"kind": "turn/end", "turn": turn, "reason": "completed"},
        ]
    return events


def follow(url: str, headers: dict[str, str], want: int, seen: list[dict]) -> None:
    """Print the stream's events live (SSE) until `want` of them have arrived."""
    offset = "-1"  # from the start
    while len(seen) < want:
        try:
            with stream(url, offset=offset, live="sse", headers=headers) as res:
                for ev in res.iter_events(mode="json"):
                    for item in ev.data:
                        seen.append(item)
                        print(f"  follower  {item['kind']:<16} {json.dumps(item)[:70]}")
                    offset = ev.next_offset  # where to resume
                    if len(seen) >= want:
                        return
        except (httpx.HTTPError, FetchError, DurableStreamError) as e:
            print(f"  follower  reconnecting at {offset} ({type(e).__name__})")
            time.sleep(0.5)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    base = sys.argv[1].rstrip("/")
    session = f"agent-session-{int(time.time() * 1000)}"
    url = f"{base}/v1/stream/{session}"
    token = os.environ.get("TURNSTONE_SERVE_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    events = agent_session(session)
    writer = DurableStream.create(url, content_type="application/json", headers=headers,
                                  batching=False)
    print(f"stream {url}")

    seen: list[dict] = []
    follower = threading.Thread(target=follow, args=(url, headers, len(events), seen),
                                daemon=True)
    follower.start()

    # Stream-Seq (increasing, compared as strings) makes a retried append
    # safe: the server answers 409 to a seq it already has.
    for i, event in enumerate(events, start=1):
        res = writer.append(event, seq=f"{i:08d}")
        print(f"  agent     {event['kind']:<16} durable, next offset {res.next_offset}")
        time.sleep(0.1)  # an agent thinking
    writer.close()

    follower.join(30)
    with stream(url, live=False, headers=headers) as res:
        stored = list(res.iter_json())
    ok = stored == events and seen == events
    print(f"read back {len(stored)} events; follower saw {len(seen)}; "
          f"same as written: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
