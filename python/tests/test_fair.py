"""Fair (FIFO) locks (SPEC §10) from Python: grants in queue order, a head killed with SIGKILL
holds the line up for no longer than the queue timeout, the context managers and asyncio take
``fair``, a waiter that gives up leaves no entry, and bad input names the argument."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from typing import List

import pytest

import ironlock
from conftest import Cluster, wait_until


def queued(cluster: Cluster, name: str, n: int) -> bool:
    return all(cluster.cmd(i, "ZCARD", f"{name}{{{name}}}:ironlock:queue") == n for i in range(3))


def settings() -> dict:
    return dict(restart_quarantine=False, retry_delay=0.05, retry_jitter=0.01, connect_timeout=5.0)


def test_eight_threads_are_served_in_the_order_they_queued(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **settings())
    holder = m.acquire(name, 10.0)
    order: List[int] = []

    def wait_in_line(i: int) -> None:
        # Each thread has its own manager: the order comes from the nodes' queue.
        own = ironlock.LockManager(cluster3.urls, **settings())
        with own.lock(name, 5.0, wait=20.0, fair=True):
            order.append(i)
            time.sleep(0.01)

    threads = []
    for i in range(8):
        t = threading.Thread(target=wait_in_line, args=(i,))
        t.start()
        threads.append(t)
        assert wait_until(lambda: queued(cluster3, name, i + 1), 5.0), f"waiter {i} never in line"
    holder.release()
    for t in threads:
        t.join(30.0)
    assert order == list(range(8))
    assert wait_until(lambda: queued(cluster3, name, 0))


HEAD = """
import sys, ironlock
m = ironlock.LockManager(sys.argv[1].split(","), restart_quarantine=False, retry_delay=0.05,
                         connect_timeout=5.0)
m.acquire(sys.argv[2], 5.0, wait=60.0, fair=True)
print("acquired", flush=True)
"""


def test_a_head_killed_with_sigkill_delays_the_queue_by_at_most_the_queue_timeout(
    cluster3: Cluster, name: str
) -> None:
    timeout = 0.5
    m = ironlock.LockManager(cluster3.urls, **settings(), queue_timeout=timeout)
    holder = m.acquire(name, 10.0)
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD, ",".join(cluster3.urls), name], stdout=subprocess.PIPE
    )
    try:
        assert wait_until(lambda: queued(cluster3, name, 1), 10.0), "the head never got in line"
        got: List[float] = []

        def second() -> None:
            lock = m.acquire(name, 5.0, wait=20.0, fair=True)
            got.append(time.monotonic())
            lock.release()

        t = threading.Thread(target=second)
        t.start()
        assert wait_until(lambda: queued(cluster3, name, 2), 5.0)
        os.kill(head.pid, signal.SIGKILL)
        killed = time.monotonic()
        holder.release()
        t.join(20.0)
        assert got, "the waiter behind the dead head was never served"
        delay = got[0] - killed
        # The queue timeout, one retry pause of a fair waiter (at most half of it) and slack.
        assert delay < timeout + 1.0, f"the dead head held the queue for {delay:.3f} s"
    finally:
        head.kill()
        head.wait()
    assert head.stdout is not None and head.stdout.read() == b""
    assert wait_until(lambda: queued(cluster3, name, 0))


def test_a_waiter_that_gives_up_leaves_no_entry_and_bad_input_names_fair(
    cluster3: Cluster, name: str
) -> None:
    m = ironlock.LockManager(cluster3.urls, **settings(), fair=True)
    holder = m.acquire(name, 10.0)
    with pytest.raises(ironlock.LockContendedError, match="held elsewhere"):
        m.acquire(name, 1.0, wait=0.2)
    assert queued(cluster3, name, 0)
    with pytest.raises(ironlock.ArgumentTypeError, match="fair"):
        m.acquire(name, 1.0, fair="yes")  # type: ignore[arg-type]
    with pytest.raises(ironlock.InvalidArgumentError, match="queue_timeout"):
        ironlock.LockManager(cluster3.urls, queue_timeout=0.0)
    holder.release()


def test_asyncio_fair_lock_and_semaphore(cluster3: Cluster, name: str) -> None:
    async def in_line(n: int) -> bool:
        """Polls (bounded, without blocking the loop) until `n` waiters are in line."""
        for _ in range(400):
            if queued(cluster3, name, n):
                return True
            await asyncio.sleep(0.005)
        return False

    async def main() -> None:
        m = await ironlock.AsyncLockManager.connect(cluster3.urls, **settings())
        holder = await m.acquire(name, 10.0)
        waiter = asyncio.ensure_future(m.acquire(name, 5.0, wait=10.0, fair=True))
        assert await in_line(1)
        await holder.release()
        lock = await asyncio.wait_for(waiter, 10.0)
        await lock.release()
        # A cancelled fair waiter leaves the line.
        holder = await m.acquire(name, 10.0)
        waiter = asyncio.ensure_future(m.acquire(name, 5.0, wait=10.0, fair=True))
        assert await in_line(1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await in_line(0)
        await holder.release()
        async with m.semaphore(name, 2, ttl=5.0, fair=True) as permit:
            assert permit.valid and permit.resources == [name]

    asyncio.run(main())
