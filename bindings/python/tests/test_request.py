"""The request builder in the package (issue 39 §2): the header of each
request (`prepare_request`, `begin_loop`), the body rebuilt from the log
(`request_body`), the check against what a harness sends
(`check_request_body`), and compaction and pruning."""

import copy

import pytest

from turnstone import Store, TurnstoneError, error_kind

TOOLS = [{"name": "read_file", "description": "Read a file.",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


@pytest.fixture
def store(tmp_path):
    with Store(str(tmp_path / "store")) as st:
        yield st


def header_reasons(s):
    return [e["data"]["reason"] for e in s.events() if e["kind"] == "request/header"]


def test_each_request_writes_a_header_only_when_one_is_needed(store):
    s = store.create_session("s")
    s.user("Read README.md")
    spec = dict(provider="anthropic", model="claude-sonnet-4-5",
                params={"max_tokens": 1024}, system="Be brief.", tools=TOOLS)
    assert s.prepare_request(**spec) == "initial"
    assert s.prepare_request(**spec) is None
    assert s.prepare_request(**{**spec, "params": {"max_tokens": 2048}}) == "change"
    s.begin_loop()
    assert s.prepare_request(**{**spec, "params": {"max_tokens": 2048}}) == "resume"
    assert header_reasons(s) == ["initial", "change", "resume"]

    body = s.request_body("anthropic")
    assert body == {
        "model": "claude-sonnet-4-5", "max_tokens": 2048, "system": "Be brief.", "tools": TOOLS,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Read README.md"}]}],
    }
    assert s.messages(format="anthropic") == body
    # The same header rebuilds a body for the other APIs too.
    chat = s.request_body("openai-chat")
    assert chat["model"] == "claude-sonnet-4-5"
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}


def test_a_header_survives_reopening(tmp_path):
    with Store(str(tmp_path / "st")) as st:
        s = st.create_session("s")
        s.prepare_request(provider="openai", model="gpt-5", params={"temperature": 0})
        s.user("hi")
        s.flush()
        s.close()
        again = st.open_session("s")
        # A new handle is a new agent loop: the unchanged header is a resume.
        assert again.prepare_request(provider="openai", model="gpt-5", params={"temperature": 0}) == "resume"
        assert again.request_body("openai-responses")["temperature"] == 0


def test_a_bad_spec_is_refused_naming_the_field_and_writes_nothing(store):
    s = store.create_session("s")
    with pytest.raises(TurnstoneError) as e:
        s.prepare_request(provider="anthropic", model="m", tools=[{"name": 3}])
    assert error_kind(e.value) == "invalid_argument"
    assert "tools[0]" in str(e.value) and "name" in str(e.value)
    with pytest.raises(TurnstoneError) as e:
        s.prepare_request(provider="anthropic", model="m", params={"x": float("nan")})
    assert error_kind(e.value) == "invalid_argument"
    assert len(s) == 0


def test_check_request_body_names_the_first_difference(store):
    s = store.create_session("s")
    s.prepare_request(provider="anthropic", model="m", params={"max_tokens": 10})
    s.user("hello")
    s.assistant({"content": [{"type": "thinking", "thinking": "hm", "signature": "EqQB"},
                             {"type": "text", "text": "Hi."}]})
    s.user("again")
    body = s.request_body("anthropic")
    s.check_request_body("anthropic", body)  # what the log rebuilds passes
    sent = copy.deepcopy(body)
    del sent["messages"][1]["content"][0]["signature"]  # a harness that drops a signature
    with pytest.raises(TurnstoneError) as e:
        s.check_request_body("anthropic", sent)
    assert error_kind(e.value) == "request_mismatch"
    assert "/messages/1/content/0" in str(e.value)
    with pytest.raises(TurnstoneError) as e:
        s.check_request_body("gemini", body)
    assert error_kind(e.value) == "invalid_argument"


def test_compaction_replaces_a_range_and_keeps_the_originals(store):
    s = store.create_session("s")
    for text in ["a", "b", "c"]:
        s.user(text)
    seq = s.compact(0, 2, "a and b", compaction_id="k1")
    assert [m["content"][0]["text"] for m in s.messages()] == ["a and b", "c"]
    kinds = [e["kind"] for e in s.events()]
    assert kinds[3:] == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    assert s.events()[seq]["data"]["content"][0]["text"] == "a and b"
    assert [e["data"]["content"][0]["text"] for e in s.events()[:3]] == ["a", "b", "c"]
    with pytest.raises(TurnstoneError) as e:
        s.compact(1, 9, "past the end")
    assert error_kind(e.value) == "surface_range"


def test_prune_replaces_one_tool_result(store):
    s = store.create_session("s")
    s.user("list")
    s.assistant({"content": [{"type": "tool_use", "id": "c1", "name": "ls", "input": {}}]})
    with s.tool_call("c1", "ls", {}) as call:
        call.result("x" * 5000)
    seq = s.prune_tool_result(2, "[5000 bytes pruned]", tokens_saved=1200)
    msgs = s.messages()
    assert msgs[2]["content"][0]["content"] == "[5000 bytes pruned]"
    original = [e for e in s.events() if e["kind"] == "tool/result"][0]
    assert original["data"]["content"][0]["text"] == "x" * 5000  # the original stays
    assert s.events()[seq - 1]["kind"] == "compaction/prune"
    assert s.events()[seq - 1]["data"]["tokens_saved"] == 1200
    with pytest.raises(TurnstoneError) as e:
        s.prune_tool_result(0, "not a tool result")
    assert error_kind(e.value) == "invalid_argument"


def test_compact_turn_replaces_an_ended_turn(store):
    s = store.create_session("s")
    s.start_turn("t1")
    s.user("first question")
    s.assistant({"content": [{"type": "text", "text": "first answer"}]})
    s.end_turn("t1")
    s.start_turn("t2")
    s.user("second question")
    with pytest.raises(TurnstoneError) as e:
        s.compact_turn("t2", "not ended yet")
    assert error_kind(e.value) == "refused"
    s.compact_turn("t1", "Turn 1 in short.")
    assert [m["content"][0]["text"] for m in s.messages()] == ["Turn 1 in short.", "second question"]


def test_a_session_switched_to_another_provider_sends_only_what_it_takes(store):
    """Issue 39 §7: an OpenAI Responses session rendered for Anthropic
    renames what Anthropic has under another name, leaves out what it
    cannot take, and says what it left out."""
    s = store.create_session("s")
    s.prepare_request(provider="openai", model="gpt-5",
                      params={"max_output_tokens": 500, "reasoning": {"effort": "high"}},
                      tools=[{"type": "function", "name": "ls", "parameters": {"type": "object"}},
                             {"type": "web_search_preview"}])
    s.user([{"type": "input_text", "text": "list"}])
    s.assistant({"content": [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}]})
    own = s.request_body("openai-responses")
    assert own["reasoning"] == {"effort": "high"}
    assert any(i.get("type") == "reasoning" for i in own["input"])
    assert s.dropped("openai-responses") == []

    body = s.request_body("anthropic")
    assert body["max_tokens"] == 500 and "reasoning" not in body
    assert body["tools"] == [{"name": "ls", "input_schema": {"type": "object"}}]
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}]
    what = sorted(d["what"] for d in s.dropped("anthropic"))
    assert what == ["block reasoning", "param reasoning", "tool (type web_search_preview)"]
    assert all(d["why"] and d["count"] == 1 for d in s.dropped("anthropic"))
    s.check_request_body("anthropic", body)
