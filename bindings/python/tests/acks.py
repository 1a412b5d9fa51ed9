"""Helpers shared by the crash tests of the framework backends."""

import time


def wait_for_acks(acks, child, n=1, timeout=60):
    """Until the child has acknowledged something more (it takes a while
    to import the framework), so the kill lands while it is writing."""
    start = len(open(acks).read().splitlines())
    deadline = time.time() + timeout
    while time.time() < deadline and child.poll() is None:
        if len(open(acks).read().splitlines()) >= start + n:
            return
        time.sleep(0.01)
