"""Parity with the Rust session layer (issue 39 §2): a provider's response
body logged as it came (Anthropic, OpenAI Responses, Chat Completions), the
turns of a session, and fork after a turn."""

import pytest

from turnstone import Store, TurnstoneError, error_kind


@pytest.fixture
def store(tmp_path):
    with Store(str(tmp_path / "store")) as st:
        yield st


ANTHROPIC = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "thinking", "thinking": "hm", "signature": "EqQB"}, {"type": "text", "text": "Hello."}],
    "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 2},
}
RESPONSES = {
    "id": "resp_1", "object": "response", "model": "gpt-5",
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Hello.", "annotations": []}]},
    ],
    "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
}
CHAT = {
    "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Hello."}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}


def test_a_response_body_of_each_provider_is_logged_as_it_came(store):
    for provider, body in [("anthropic", ANTHROPIC), ("openai-responses", RESPONSES), ("openai-chat", CHAT)]:
        s = store.create_session(provider)
        s.user("hi")
        s.assistant(body, provider=provider)
        s.flush()
        data = s.events()[-1]["data"]
        # The model's own blocks are there (thinking and its signature,
        # reasoning and its encrypted content), and the next request
        # carries them.
        assert "Hello." in str(data["content"]), (provider, data)
        body_next = s.messages(format=provider)
        assert "Hello." in str(body_next), (provider, body_next)
    thinking = store.open_read_only("anthropic").events()[-1]["data"]["content"][0]
    assert thinking == ANTHROPIC["content"][0]
    reasoning = store.open_read_only("openai-responses").events()[-1]["data"]["content"][0]
    assert reasoning["encrypted_content"] == "gAAA"
    with pytest.raises(TurnstoneError) as e:
        store.open_session("anthropic").assistant(ANTHROPIC, provider="gemini")
    assert error_kind(e.value) == "invalid_argument"


def test_turns_and_fork_after_a_turn(store):
    s = store.create_session("t")
    for t in ("t1", "t2"):
        s.append("turn/start", {"turn_id": t})
        s.user(f"question {t}")
        s.assistant({"content": [{"type": "text", "text": f"answer {t}"}]})
        s.append("turn/end", {"turn_id": t, "reason": {"kind": "completed"}})
    s.append("turn/start", {"turn_id": "t3"})
    s.flush()
    turns = s.turns()
    assert [t["turn_id"] for t in turns] == ["t1", "t2", "t3"]
    assert turns[0]["start_seq"] == 0 and turns[0]["end_seq"] == 3
    assert turns[0]["reason"] == {"kind": "completed"}
    assert turns[2]["end_seq"] is None
    child, upto = s.fork_after_turn("t1", child="t-branch")
    assert child == "t-branch" and upto == 4  # seqs 0..4: turn t1, its turn/end included
    c = store.open_session("t-branch")
    assert [m["content"][0]["text"] for m in c.messages()] == ["question t1", "answer t1"]
    with pytest.raises(TurnstoneError) as e:
        s.fork_after_turn("t3")  # still running: it has no end to fork after
    assert error_kind(e.value) == "refused"
    with pytest.raises(TurnstoneError) as e:
        s.fork_after_turn("t9")
    assert error_kind(e.value) == "invalid_argument"
