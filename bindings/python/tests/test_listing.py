"""Listing sessions (``Store.list_sessions``) with the CLI's filters (issue 39 §3): tags, fields,
updated since, open turn, parent, newest first; title, tags and fields in
each entry; stable pages with a cursor. No session is opened to filter."""

import pytest

from turnstone import Store, TurnstoneError, error_kind


@pytest.fixture
def store(tmp_path):
    with Store(str(tmp_path / "store")) as st:
        for i in range(7):
            s = st.create_session(f"s{i}")
            s.user(f"hello {i}")
            if i % 2 == 0:
                s.add_tag("even")
            if i < 3:
                s.set_meta("user", "alice")
            if i == 4:
                s.set_title("the fourth")
                s.append("turn/start", {"turn_id": "t"})
            s.flush()
            s.close()
            if i == 5:
                # A fork's child is listed once durable (views read durable
                # events only): the next session's flush covers it.
                st.fork("s1", child="s1-child")
        yield st


def ids(entries):
    return [e["id"] for e in entries]


def listed(store, **filters):
    out, cursor = [], None
    while True:
        page = store.list_sessions(limit=2, cursor=cursor, **filters)
        out += page["sessions"]
        cursor = page["next_cursor"]
        if cursor is None:
            return out


def test_filters_and_what_each_entry_says(store):
    assert ids(listed(store)) == ["s0", "s1", "s2", "s3", "s4", "s5", "s1-child", "s6"]
    assert ids(listed(store, tags=["even"])) == ["s0", "s2", "s4", "s6"]
    # A fork child starts from its parent's metadata.
    assert ids(listed(store, where={"user": "alice"})) == ["s0", "s1", "s2", "s1-child"]
    assert ids(listed(store, tags=["even"], where={"user": "alice"})) == ["s0", "s2"]
    assert ids(listed(store, open_turn=True)) == ["s4"]
    assert ids(listed(store, parent="s1")) == ["s1-child"]
    assert ids(listed(store, newest_first=True))[:2] == ["s6", "s1-child"]
    assert listed(store, updated_since_ms=2**62) == []
    four = listed(store, open_turn=True)[0]
    assert four["title"] == "the fourth" and four["tags"] == ["even"] and four["open_turn"] is True
    child = listed(store, parent="s1")[0]
    assert child["parent"] == {"session": "s1", "upto": 2}  # s1: user/message, session/meta
    assert listed(store, where={"user": "alice"})[0]["fields"] == {"user": "alice"}


def test_pages_with_a_cursor_are_stable(store):
    seen, cursor = [], None
    while True:
        page = store.list_sessions(limit=3, cursor=cursor)
        assert len(page["sessions"]) <= 3
        seen += ids(page["sessions"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
        # A session created between pages comes after the ones already listed.
        if len(seen) == 3:
            s = store.create_session("late")
            s.user("late")
            s.flush()
            s.close()
    assert seen == ["s0", "s1", "s2", "s3", "s4", "s5", "s1-child", "s6", "late"]
    with pytest.raises(TurnstoneError) as e:
        store.list_sessions(cursor="not a cursor")
    assert error_kind(e.value) == "invalid_argument"
