"""The blocking API against real nodes: acquire/extend/release, lock(), using(), synchronize,
the GIL released while waiting, and Ctrl-C during a wait."""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import timedelta

import pytest

import ironlock
from conftest import FAST, Cluster, keys_left, wait_until


@pytest.fixture(scope="module")
def manager(cluster3: Cluster) -> ironlock.LockManager:
    return ironlock.LockManager(cluster3.urls, **FAST)


def test_acquire_extend_release(manager: ironlock.LockManager, cluster3: Cluster, name: str) -> None:
    lock = manager.acquire(name, 5.0)
    assert isinstance(lock, ironlock.Lock)
    assert lock.valid and 4.5 < lock.remaining <= 5.0
    assert lock.resources == [name] and len(lock.token) == 40 and lock.fence is None
    assert lock.ttl == 5.0 and lock.pid == os.getpid()
    assert [n.vote for n in lock.report].count("for") >= 2
    assert all(isinstance(n, ironlock.NodeReport) for n in lock.report)
    assert cluster3.cmd(0, "GET", name) in (lock.token, None)
    lock.extend(timedelta(seconds=8))
    assert lock.ttl == 8.0 and lock.remaining > 7.5 and lock.extensions == 1
    lock.extend()
    assert lock.extensions == 2
    assert lock.release() is True
    assert lock.released and not lock.valid and lock.remaining == 0.0
    assert keys_left(cluster3, name) == 0
    assert lock.release() is False


def test_contended_carries_report(manager: ironlock.LockManager, name: str) -> None:
    lock = manager.acquire([name, name + ":b"], 5.0, fencing=True)
    assert lock.fence is not None and lock.fence > 0
    with pytest.raises(ironlock.LockContendedError) as info:
        manager.acquire(name + ":b", 5.0, retry_count=0)
    e = info.value
    assert e.code == "CONTENDED" and "held elsewhere" in str(e)
    assert any(n.vote == "against" for n in e.report) and e.rounds == 1 and e.elapsed >= 0
    assert lock.release()


def test_wait_then_granted_after_release(manager: ironlock.LockManager, name: str) -> None:
    first = manager.acquire(name, 5.0)
    threading.Timer(0.3, first.release).start()
    start = time.monotonic()
    second = manager.acquire(name, 5.0, wait=5.0)
    assert 0.2 < time.monotonic() - start < 3.0
    assert second.release()


def test_lock_context_and_threading_api(manager: ironlock.LockManager, name: str) -> None:
    dl = manager.lock(name, ttl=5.0, wait=2.0)
    assert not dl.owned() and not dl.locked()
    with dl as lock:
        assert dl.owned() and dl.locked() and dl.lock is lock
        other = manager.lock(name, ttl=5.0)
        assert other.locked() and not other.owned()
        assert other.acquire(blocking=False) is False
        assert other.acquire(timeout=0.1) is False
    assert not dl.owned() and not other.locked()
    assert other.acquire() is True
    assert other.owned()
    other.release()
    with pytest.raises(RuntimeError):
        other.release()
    with pytest.raises(ValueError):
        other.acquire(blocking=False, timeout=1.0)


def test_lock_shared_by_threads_excludes(manager: ironlock.LockManager, name: str) -> None:
    dl = manager.lock(name, ttl=5.0, wait=10.0)
    inside = []
    overlaps = []

    def work() -> None:
        for _ in range(3):
            with dl:
                inside.append(1)
                if len(inside) > 1:
                    overlaps.append(1)
                time.sleep(0.01)
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not overlaps and not any(t.is_alive() for t in threads)


def test_with_lock_raises_lost_when_keys_deleted(
    manager: ironlock.LockManager, cluster3: Cluster, name: str
) -> None:
    with pytest.raises(ironlock.LockLostError) as info:
        with manager.lock(name, ttl=5.0):
            for i in range(3):
                cluster3.cmd(i, "DEL", name)
    assert info.value.code == "LOST"


def test_using_keeps_lock_alive_across_three_ttls(
    manager: ironlock.LockManager, cluster3: Cluster, name: str
) -> None:
    with manager.using(name, ttl=0.5) as lock:
        time.sleep(1.6)
        assert lock.valid and not lock.lost.is_set()
        assert lock.extensions >= 3
        assert keys_left(cluster3, name) >= 2
    assert keys_left(cluster3, name) == 0


def test_using_sets_lost_at_once_when_keys_deleted(
    manager: ironlock.LockManager, cluster3: Cluster, name: str
) -> None:
    with pytest.raises(ironlock.LockLostError):
        with manager.using(name, ttl=0.6) as lock:
            assert lock.lost.wait(0.05) is False
            for i in range(3):
                cluster3.cmd(i, "DEL", name)
            # The next background extension (at ttl - ttl/3) finds the keys gone.
            start = time.monotonic()
            assert lock.lost.wait(timeout=3.0) is True
            assert time.monotonic() - start < 1.0
            assert lock.lost.is_set() and not lock.valid


def test_lost_flag_reads_set_once_validity_runs_out_with_nobody_waiting(
    manager: ironlock.LockManager, cluster3: Cluster, name: str
) -> None:
    # Reading the flag looks at the lock itself: no waiter (hence no watching task) is needed
    # for it to turn set when the validity deadline passes unextended, nor when a kept lock's
    # extension finds its keys gone.
    lock = manager.acquire(name, 0.3)
    flag = lock.lost
    assert not flag.is_set()
    time.sleep(0.4)
    assert flag.is_set() and not lock.valid and "set=True" in repr(flag)
    lock.release()

    kept = manager.acquire(f"{name}:kept", 0.6)
    keeper = kept.keep_alive()
    flag = kept.lost
    for i in range(3):
        cluster3.cmd(i, "DEL", f"{name}:kept")
    deadline = time.monotonic() + 3.0
    while not flag.is_set() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert flag.is_set() and not kept.valid
    keeper.stop()
    assert keys_left(cluster3, f"{name}:kept") == 0


def test_synchronize_sync(manager: ironlock.LockManager, cluster3: Cluster, name: str) -> None:
    @ironlock.synchronize(manager, name, ttl=2.0, wait=5.0)
    def critical(x: int) -> int:
        assert keys_left(cluster3, name) >= 2
        return x * 2

    assert critical(21) == 42
    assert critical.__name__ == "critical"
    assert keys_left(cluster3, name) == 0
    with pytest.raises(TypeError):

        @ironlock.synchronize(manager, name, ttl=1.0)
        async def wrong() -> None: ...


def test_gil_released_while_waiting(new_cluster: object, name: str) -> None:
    cluster = new_cluster(3)  # type: ignore[operator]
    manager = ironlock.LockManager(
        cluster.urls, restart_quarantine=False, node_timeout=0.2, retry_count=4,
        retry_delay=0.05, retry_jitter=0.0,
    )
    cluster.control("pause", 0)
    cluster.control("pause", 1)
    count = 0
    stop = threading.Event()

    def counter() -> None:
        nonlocal count
        while not stop.is_set():
            count += 1

    t = threading.Thread(target=counter)
    t.start()
    try:
        time.sleep(0.05)
        before = count
        start = time.monotonic()
        with pytest.raises(ironlock.QuorumUnavailableError) as info:
            manager.acquire(name, 5.0)
        waited = time.monotonic() - start
        during = count - before
    finally:
        stop.set()
        t.join()
        cluster.control("resume", 0)
        cluster.control("resume", 1)
    assert 0.8 < waited < 5.0
    assert [n.vote for n in info.value.report].count("timeout") == 2
    # The counting thread ran throughout the wait: the GIL was released.
    assert during > 100_000, during


def test_ctrl_c_interrupts_a_blocking_wait(cluster3: Cluster, name: str) -> None:
    manager = ironlock.LockManager(cluster3.urls, **FAST)
    # Another owner holds the key on two nodes: every round wins node 2, is refused by the
    # others, and rolls back. An interrupted acquire must leave nothing on node 2 either.
    for i in (0, 1):
        assert cluster3.cmd(i, "SET", name, "foreign", "PX", "30000") == "OK"
    sent = []

    def interrupt() -> None:
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Timer(0.4, interrupt).start()
    with pytest.raises(KeyboardInterrupt):
        manager.acquire(name, 10.0, wait=30.0)
    latency = time.monotonic() - sent[0]
    assert latency < 0.3, latency
    assert wait_until(lambda: cluster3.cmd(2, "EXISTS", name) == 0, timeout=2.0)
    assert cluster3.cmd(0, "GET", name) == "foreign"
    for i in (0, 1):
        cluster3.cmd(i, "DEL", name)


def test_lost_flag_wait_is_interruptible(manager: ironlock.LockManager, name: str) -> None:
    lock = manager.acquire(name, 30.0)
    threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        lock.lost.wait()
    assert time.monotonic() - start < 1.0
    assert lock.release()


def test_manager_context_closes(cluster3: Cluster, name: str) -> None:
    with ironlock.LockManager(cluster3.urls, **FAST) as m:
        assert not m.closed and m.quorum == 2 and len(m.nodes) == 3
        m.acquire(name, 1.0).release()
    assert m.closed
    with pytest.raises(ironlock.QuorumUnavailableError):
        m.acquire(name, 1.0)


def test_release_token_and_inspect(manager: ironlock.LockManager, name: str) -> None:
    lock = manager.acquire(name, 5.0)
    holders = manager.inspect(name)
    assert len(holders) == 3
    assert sum(1 for h in holders if h["token"] == lock.token) >= 2
    assert all(h["ttl"] is None or 0 < h["ttl"] <= 5.0 for h in holders)
    assert manager.release_token(name, lock.token) is True
    assert lock.release() is False


def test_max_extensions(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, max_extensions=1, **FAST)
    lock = m.acquire(name, 5.0)
    lock.extend()
    with pytest.raises(ironlock.InvalidArgumentError, match="max_extensions"):
        lock.extend()
    assert lock.release()


def test_with_lock_raises_lost_when_validity_ran_out(
    manager: ironlock.LockManager, cluster3: Cluster, name: str
) -> None:
    with pytest.raises(ironlock.LockLostError):
        with manager.lock(name, ttl=0.3) as lock:
            time.sleep(0.45)
            assert not lock.valid and lock.remaining == 0.0
    # A body's own exception is not masked by the loss.
    with pytest.raises(KeyError):
        with manager.lock(name, ttl=0.3):
            time.sleep(0.45)
            raise KeyError("body")
    assert wait_until(lambda: keys_left(cluster3, name) == 0)


def test_stats_count_grants_contention_and_releases(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST)
    try:
        before = m.stats()
        assert before["granted"] == 0 and before["acquire_latency"]["count"] == 0
        lock = m.acquire(name, 5.0)
        with pytest.raises(ironlock.LockContendedError):
            m.acquire(name, 5.0, retry_count=0)
        lock.extend(5.0)
        assert lock.release() is True
        s = m.stats()
        assert (s["granted"], s["contended"], s["unavailable"]) == (1, 1, 0), s
        assert (s["rounds"], s["extensions"], s["releases"], s["lost"]) == (2, 1, 1, 0), s
        assert s["votes_for"] >= 2 and s["votes_against"] >= 1, s
        h = s["acquire_latency"]
        assert h["count"] == 2 and sum(h["counts"]) == 2 and h["sum_seconds"] > 0, h
        assert len(h["counts"]) == len(h["buckets"]) + 1
    finally:
        m.close()


def test_async_stats_are_zero_before_the_first_connection(cluster3: Cluster, name: str) -> None:
    import asyncio

    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        assert m.stats()["rounds"] == 0
        lock = await m.acquire(name, 5.0)
        await lock.release()
        s = m.stats()
        assert (s["granted"], s["releases"], s["round_latency"]["count"]) == (1, 1, 1), s
        m.close()

    asyncio.run(main())


def test_min_hold_keeps_the_lock_taken_until_it_is_over(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST)
    lock = m.acquire(name, 5.0, min_hold=0.6)
    granted = time.monotonic()
    assert lock.release() is True
    with pytest.raises(ironlock.LockContendedError):
        m.acquire(name, 5.0, retry_count=0)
    assert 0 < int(cluster3.cmd(0, "PTTL", name)) <= 600
    # `with manager.lock(..., min_hold=)`: the same through the lock object, once free again.
    with m.lock(name, 5.0, wait=3.0, min_hold=0.3):
        assert time.monotonic() - granted >= 0.55
    with pytest.raises(ironlock.LockContendedError):
        m.acquire(name, 5.0, retry_count=0)
    with pytest.raises(ironlock.InvalidArgumentError, match="min_hold"):
        m.acquire(name + ":bad", 1.0, min_hold=2.0)
    with pytest.raises(ironlock.InvalidArgumentError, match="min_hold"):
        m.acquire(name + ":bad", 1.0, min_hold=-1)
    m.close()
