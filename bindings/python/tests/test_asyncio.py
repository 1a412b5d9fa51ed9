"""Native async (issue 39 §5): ``aflush`` and ``Subscription.anext`` hold no
thread while they wait. With ``asyncio.to_thread`` six idle followers took
every thread of the default executor on a 2-core machine, and an ``aflush``
behind them never returned; here hundreds of idle followers and many
writers share one event loop and no thread is started per wait."""

import asyncio
import os

import pytest

from turnstone import Store, TurnstoneError, error_kind


@pytest.fixture
def store(tmp_path):
    with Store(str(tmp_path / "store")) as st:
        yield st


def test_idle_followers_hold_no_thread_and_writers_flush(store):
    followers = [store.create_session(f"f{i}") for i in range(300)]
    for s in followers:
        s.user("hello")
    writers = [store.create_session(f"w{i}") for i in range(64)]
    store.create_session("sync").flush()

    async def main():
        subs = [store.subscribe(s.id, 1) for s in followers]   # past their one event: idle
        waiting = [asyncio.ensure_future(sub.anext()) for sub in subs]
        await asyncio.sleep(0.05)
        threads_while_idle = len(os.listdir("/proc/self/task"))  # OS threads, the engine's included

        async def write(s):
            for i in range(20):
                s.user(f"event {i}")
                await s.aflush()
            return len(s)

        lens = await asyncio.wait_for(asyncio.gather(*(write(s) for s in writers)), 60)
        assert lens == [20] * 64
        assert len(os.listdir("/proc/self/task")) <= threads_while_idle + 2, "a thread per wait"
        assert not any(t.done() for t in waiting), "an idle follower woke with nothing to read"
        # Each follower gets its event once it is written.
        for s in followers:
            s.user("second")
        await asyncio.gather(*(s.aflush() for s in followers))
        got = await asyncio.wait_for(asyncio.gather(*waiting), 60)
        assert [e["seq"] for e in got] == [1] * len(followers)
        assert [e["data"]["content"][0]["text"] for e in got] == ["second"] * len(followers)

    asyncio.run(main())


def test_a_cancelled_anext_loses_no_event(store):
    s = store.create_session("s")
    s.user("zero")
    s.flush()

    async def main():
        sub = store.subscribe("s", 1)
        t = asyncio.ensure_future(sub.anext())
        await asyncio.sleep(0.01)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert sub.next_seq == 1
        s.user("one")
        await s.aflush()
        e = await asyncio.wait_for(sub.anext(), 30)
        assert (e["seq"], e["data"]["content"][0]["text"]) == (1, "one")
        assert sub.next_seq == 2

    asyncio.run(main())


def test_one_anext_at_a_time(store):
    s = store.create_session("s")
    s.flush()

    async def main():
        sub = store.subscribe("s", 0)
        t = asyncio.ensure_future(sub.anext())
        await asyncio.sleep(0.01)
        with pytest.raises(TurnstoneError) as e:
            await sub.anext()
        assert error_kind(e.value) == "invalid_argument"
        with pytest.raises(TurnstoneError):
            sub.try_next()
        s.user("x")
        await s.aflush()
        assert (await asyncio.wait_for(t, 30))["seq"] == 0

    asyncio.run(main())


def test_anext_ends_with_none_when_the_store_closes(tmp_path):
    st = Store(str(tmp_path / "st"))
    st.create_session("s").flush()

    async def main():
        sub = st.subscribe("s", 0)
        t = asyncio.ensure_future(sub.anext())
        await asyncio.sleep(0.01)
        await asyncio.to_thread(st.close)
        assert await asyncio.wait_for(t, 30) is None
        assert await sub.anext() is None

    asyncio.run(main())
