"""Online collection (`Store.collect`) and recycled segments from Python."""

import glob
import os

import pytest

from turnstone import Store, TurnstoneError, error_kind

SEGMENT = 64 * 1024
TEXT = "y" * 4000


def segment_files(path):
    """The store's segment files (not free ones) and their total size."""
    files = sorted(glob.glob(os.path.join(path, "*.tseg")))
    return files, sum(os.path.getsize(f) for f in files)


# The segment file the store writes ahead of need (Options::prepare_segments,
# a background thread, so it may appear at any moment) and its temporary name.
PREPARED = "0000000000.tseg.free"


def free_files(path):
    """Free files a collection kept (not the prepared one)."""
    return sorted(
        f for f in glob.glob(os.path.join(path, "*.tseg.free"))
        if os.path.basename(f) != PREPARED
    )


def listing_of(path):
    """The store directory's names, without the preparer's files."""
    return sorted(n for n in os.listdir(path) if not n.startswith(PREPARED))


def fill(store, ids, events=20):
    """Sessions of `events` user messages of 4 KB each, flushed and closed."""
    for i in ids:
        s = store.create_session(i)
        for _ in range(events):
            s.user(TEXT)
        s.flush()
        s.close()


def kept_and_deleted(path, **opts):
    """A kept session, then four that fill several segments and are deleted."""
    st = Store(path, segment_bytes=SEGMENT, **opts)
    keep = st.create_session("keep")
    keep.user("hello")
    keep.flush()
    keep.close()
    fill(st, [f"d{i}" for i in range(4)])
    for i in range(4):
        st.delete(f"d{i}")
    return st


def test_collect_reclaims_deleted_sessions_online(tmp_path):
    path = str(tmp_path / "s")
    st = kept_and_deleted(path)
    before_events = st.replay("keep")
    files, before = segment_files(path)
    assert len(files) >= 4
    report = st.collect()
    assert report["sessions_reclaimed"] == 4
    assert report["bytes_reclaimed"] > 0
    assert report["segment_files_removed"] > 0
    after_files, after = segment_files(path)
    assert after < before and len(after_files) < len(files)
    # The store stays open: the kept session reads back and takes appends.
    assert st.replay("keep") == before_events
    s = st.open_session("keep")
    s.user("after")
    s.flush()
    s.close()
    # Nothing is left to reclaim.
    again = st.collect()
    assert again["sessions_reclaimed"] == 0 and again["segment_files_removed"] == 0
    st.close()
    with Store(path) as st:
        assert [e["data"] for e in st.replay("keep")][-1]["content"][0]["text"] == "after"
        assert {x["id"] for x in st.sessions()} == {"keep"}


def test_dry_run_changes_nothing(tmp_path):
    path = str(tmp_path / "s")
    st = kept_and_deleted(path)
    listing = listing_of(path)
    _, before = segment_files(path)
    report = st.collect(dry_run=True)
    assert report["dry_run"] is True
    assert report["sessions_reclaimed"] == 4 and report["bytes_reclaimed"] > 0
    assert listing_of(path) == listing
    assert segment_files(path)[1] == before
    st.close()


def test_recycled_segments_are_made_from_collected_files(tmp_path):
    path = str(tmp_path / "s")
    st = kept_and_deleted(path, recycle_segments=4)
    st.collect()
    free = free_files(path)
    assert free, "the collection kept no free file"
    # New segments are made from the free files instead of new files.
    fill(st, ["n0", "n1"], events=30)
    assert len(free_files(path)) < len(free)
    expected = {i: st.replay(i) for i in ("keep", "n0", "n1")}
    st.close()
    with Store(path, segment_bytes=SEGMENT, recycle_segments=4) as st:
        assert {i: st.replay(i) for i in expected} == expected
        assert {x["id"] for x in st.sessions()} == {"keep", "n0", "n1"}


def test_direct_writes_into_recycled_segments_read_back(tmp_path):
    # direct_writes=True: batches written into recycled segments go around
    # the page cache, each rewriting the block before it (the engine's
    # tests check the bytes; here the data must come back unchanged).
    path = str(tmp_path / "s")
    st = kept_and_deleted(path, recycle_segments=4, direct_writes=True)
    st.collect()
    free = free_files(path)
    assert free, "the collection kept no free file"
    fill(st, ["n0", "n1"], events=30)
    assert len(free_files(path)) < len(free)
    s = st.create_session("small")
    for i in range(50):
        s.user("x" * (i * 37 % 700 + 1))  # batch ends all over a block
        s.flush()
    s.close()
    expected = {i: st.replay(i) for i in ("keep", "n0", "n1", "small")}
    assert len(expected["small"]) == 50
    st.close()
    with Store(path, segment_bytes=SEGMENT, recycle_segments=4, direct_writes=True) as st:
        assert {i: st.replay(i) for i in expected} == expected
    with Store(path) as st:
        assert {i: st.replay(i) for i in expected} == expected


def test_without_recycling_collected_files_are_removed(tmp_path):
    path = str(tmp_path / "s")
    st = kept_and_deleted(path)
    st.collect()
    assert free_files(path) == []
    st.close()


def test_prepare_segments_turns_the_preparer_on_and_off(tmp_path):
    import time

    off = str(tmp_path / "off")
    with Store(off, segment_bytes=SEGMENT, prepare_segments=False) as st:
        fill(st, [f"s{i}" for i in range(4)])
        assert len(segment_files(off)[0]) > 2
        time.sleep(0.3)
        assert not os.path.exists(os.path.join(off, PREPARED))
        assert not os.path.exists(os.path.join(off, PREPARED + ".tmp"))
    on = str(tmp_path / "on")
    with Store(on, segment_bytes=SEGMENT) as st:
        fill(st, [f"s{i}" for i in range(4)])
        # The writer asked at its rolls; the thread writes the file soon.
        deadline = time.monotonic() + 10
        while not os.path.exists(os.path.join(on, PREPARED)):
            assert time.monotonic() < deadline, os.listdir(on)
            time.sleep(0.02)
        assert os.path.getsize(os.path.join(on, PREPARED)) == SEGMENT


def test_bad_options_are_refused(tmp_path):
    with pytest.raises(TurnstoneError) as e:
        Store(str(tmp_path / "a"), segment_bytes=100)
    assert error_kind(e.value) == "invalid_argument"
    with Store(str(tmp_path / "b")) as st:
        for bad in (2.0, -0.1, float("nan")):
            with pytest.raises(TurnstoneError) as e:
                st.collect(threshold=bad)
            assert error_kind(e.value) == "invalid_argument"
    with pytest.raises(TurnstoneError) as e:
        Store("postgres://127.0.0.1:1/none", recycle_segments=2)
    assert error_kind(e.value) == "invalid_argument"
    with pytest.raises(TurnstoneError) as e:
        Store("postgres://127.0.0.1:1/none", prepare_segments=False)
    assert error_kind(e.value) == "invalid_argument"
    with pytest.raises(TurnstoneError) as e:
        Store("postgres://127.0.0.1:1/none", direct_writes=True)
    assert error_kind(e.value) == "invalid_argument"
