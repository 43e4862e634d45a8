"""Counting semaphores (SPEC §11) from Python: at most ``limit`` permits, each a Lock; the
context managers; wake-ups; bad input naming the argument; no holder left behind."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List

import pytest

import ironlock
from conftest import FAST, Cluster, wait_until


def test_at_most_limit_permits_and_the_block_releases(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST, retry_count=0)
    a = m.acquire_permit(name, 2, 5.0, fencing=True)
    b = m.acquire_permit(name, 2, 5.0, fencing=True)
    assert a.fence is not None and b.fence is not None and b.fence > a.fence
    with pytest.raises(ironlock.LockContendedError, match=r"\(limit 2\): all 2 permits are held elsewhere"):
        m.acquire_permit(name, 2, 5.0)
    # A lock on the same name is another key.
    m.acquire(name, 1.0).release()
    a.finish()
    sem = m.semaphore(name, 2, ttl=5.0)
    assert "limit=2" in repr(sem)
    with sem as permit:
        assert permit.valid and permit.resources == [name]
    assert permit.released
    b.release()
    key = f"{name}{{{name}}}:ironlock:semaphore"
    assert wait_until(lambda: all(cluster3.cmd(i, "EXISTS", key) == 0 for i in range(3)))


def test_a_release_wakes_a_waiter(cluster3: Cluster, name: str) -> None:
    # A 10 s retry delay: a waiter served quickly was woken by the release.
    m = ironlock.LockManager(cluster3.urls, restart_quarantine=False, retry_delay=10.0, retry_count=0)
    held = m.acquire_permit(name, 1, 5.0)
    threading.Timer(0.3, held.release).start()
    started = time.monotonic()
    permit = m.acquire_permit(name, 1, 5.0, wait=8.0)
    assert time.monotonic() - started < 5.0
    permit.release()


def test_bad_limits_name_the_argument(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST)
    for limit in (0, 10001):
        with pytest.raises(ironlock.InvalidArgumentError, match=f"limit: must be between 1 and 10000, got {limit}"):
            m.acquire_permit(name, limit, 1.0)
    with pytest.raises(ironlock.ArgumentTypeError, match="limit: expected an int"):
        m.acquire_permit(name, "3", 1.0)  # type: ignore[arg-type]
    for limit in (-1, 2**32, 10**40):
        with pytest.raises(ironlock.InvalidArgumentError, match="limit: must be between 1 and 10000, got "):
            m.acquire_permit(name, limit, 1.0)
    for bad in ("", "job:ironlock:fence"):
        with pytest.raises(ironlock.InvalidArgumentError, match="^resource: "):
            m.acquire_permit(bad, 2, 1.0)


def test_eight_threads_never_exceed_two_holders(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST)
    holders, most, grants = [0], [0], [0]
    guard = threading.Lock()

    def worker() -> None:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                with m.semaphore(name, 2, ttl=5.0, wait=1.0):
                    with guard:
                        holders[0] += 1
                        grants[0] += 1
                        most[0] = max(most[0], holders[0])
                    time.sleep(0.005)
                    with guard:
                        holders[0] -= 1
            except ironlock.LockContendedError:
                pass

    threads: List[threading.Thread] = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert grants[0] >= 20, grants
    assert most[0] == 2, most


def test_async_semaphore(cluster3: Cluster, name: str) -> None:
    async def main() -> None:
        m = await ironlock.AsyncLockManager.connect(cluster3.urls, **FAST, retry_count=0)
        async with m.semaphore(name, 1, ttl=5.0) as permit:
            assert permit.valid
            with pytest.raises(ironlock.LockContendedError):
                await m.acquire_permit(name, 1, 5.0)
        assert permit.released
        p = await m.semaphore(name, 1, ttl=5.0).acquire()
        await p.release()
        m.close()

    asyncio.run(main())
