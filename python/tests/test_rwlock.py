"""Read-write locks from Python: readers share, a writer excludes readers, writers and plain locks
of the name (and they exclude it), a waiting writer holds back new readers and a release wakes
it, ``Lock.access``, the context managers (sync and asyncio) leave no key behind, and bad input
names the argument."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List

import pytest

import ironlock
from conftest import FAST, Cluster, wait_until


def readers_key(name: str) -> str:
    return f"{name}{{{name}}}:ironlock:readers"


def writer_key(name: str) -> str:
    return f"{name}{{{name}}}:ironlock:writer"


def nothing_left(cluster: Cluster, name: str) -> bool:
    """No lock key, readers set or writer mark of `name` on any node."""
    return all(
        cluster.cmd(i, "EXISTS", name, readers_key(name), writer_key(name)) == 0
        for i in range(len(cluster.urls))
    )


def on_quorum(cluster: Cluster, pred: Any) -> bool:
    return sum(1 for i in range(len(cluster.urls)) if pred(i)) >= len(cluster.urls) // 2 + 1


def test_readers_share_a_writer_is_refused_and_a_plain_lock_excludes_both(
    cluster3: Cluster, name: str
) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST, retry_count=0)
    r1 = m.acquire_read(name, 5.0, fencing=True)
    r2 = m.acquire_read(name, 5.0, fencing=True)
    assert r1.access == "read" and r2.access == "read"
    assert r1.resources == [name] and r1.valid and r2.valid
    assert r1.fence is not None and r2.fence is not None and r2.fence > r1.fence
    assert "access='read'" in repr(r1), repr(r1)
    assert on_quorum(cluster3, lambda i: cluster3.cmd(i, "GET", name) == "ironlock readers")
    assert on_quorum(cluster3, lambda i: cluster3.cmd(i, "ZCARD", readers_key(name)) == 2)

    with pytest.raises(ironlock.LockContendedError) as writer_refused:
        m.acquire_write(name, 5.0)
    msg = str(writer_refused.value)
    assert f'could not acquire the write lock of ["{name}"]' in msg, msg
    assert "readers, another writer or a plain lock of the same name hold it" in msg, msg
    with pytest.raises(ironlock.LockContendedError):
        m.acquire(name, 5.0)
    # The refused writer tried once and did not wait: it left no mark, readers still come in.
    assert wait_until(lambda: all(cluster3.cmd(i, "EXISTS", writer_key(name)) == 0 for i in range(3)))
    r3 = m.acquire_read(name, 5.0)
    r3.extend(5.0)
    for r in (r1, r2, r3):
        assert r.release() is True

    w = m.acquire_write(name, 5.0, fencing=True)
    assert w.access == "write" and "access='write'" in repr(w)
    assert w.fence is not None and w.fence > r2.fence > r1.fence
    # The writer's key is the lock's own key, holding its token.
    assert on_quorum(cluster3, lambda i: cluster3.cmd(i, "GET", name) == w.token)
    with pytest.raises(ironlock.LockContendedError) as reader_refused:
        m.acquire_read(name, 5.0)
    msg = str(reader_refused.value)
    assert f'could not acquire a read lock of ["{name}"]' in msg and "a writer" in msg, msg
    with pytest.raises(ironlock.LockContendedError):
        m.acquire_write(name, 5.0)
    with pytest.raises(ironlock.LockContendedError):
        m.acquire(name, 5.0)
    w.extend(5.0)
    assert w.release() is True

    plain = m.acquire(name, 5.0)
    assert plain.access is None and "access=" not in repr(plain)
    with pytest.raises(ironlock.LockContendedError):
        m.acquire_read(name, 5.0)
    with pytest.raises(ironlock.LockContendedError):
        m.acquire_write(name, 5.0)
    assert plain.release() is True
    permit = m.acquire_permit(name, 2, 5.0)
    assert permit.access is None
    permit.release()
    assert wait_until(lambda: nothing_left(cluster3, name))
    m.close()


def test_a_waiting_writer_holds_back_new_readers_and_a_release_wakes_it(
    cluster3: Cluster, name: str
) -> None:
    # A 10 s retry delay: a writer granted soon after the last reader left was woken by the
    # release (its mark is renewed every half queue timeout meanwhile).
    m = ironlock.LockManager(
        cluster3.urls, restart_quarantine=False, retry_delay=10.0, queue_timeout=1.0
    )
    reader = m.acquire_read(name, 10.0)
    got: Dict[str, Any] = {}

    def write() -> None:
        try:
            got["lock"] = m.acquire_write(name, 5.0, wait=8.0)
            got["at"] = time.monotonic()
        except BaseException as e:  # reported by the assertions below
            got["error"] = e

    writer = threading.Thread(target=write)
    writer.start()
    # The waiting writer marks the name on a quorum...
    assert wait_until(
        lambda: on_quorum(cluster3, lambda i: cluster3.cmd(i, "EXISTS", writer_key(name)) == 1),
        5.0,
    ), "the waiting writer left no mark"
    # ...and while it waits, try-once readers are refused though only a reader holds.
    for _ in range(3):
        reader.extend(10.0)
        with pytest.raises(ironlock.LockContendedError, match="a writer is waiting for it"):
            m.acquire_read(name, 5.0, retry_count=0)
        time.sleep(0.3)
    assert writer.is_alive() and "lock" not in got, got
    released_at = time.monotonic()
    assert reader.release() is True
    writer.join(10.0)
    assert not writer.is_alive()
    assert "error" not in got, got
    w = got["lock"]
    assert w.access == "write" and w.valid
    assert got["at"] - released_at < 5.0, "woken by the release, not a 10 s retry"
    # Its release takes its mark away everywhere, and readers come in.
    assert w.release() is True
    assert wait_until(lambda: all(cluster3.cmd(i, "EXISTS", writer_key(name)) == 0 for i in range(3)))
    m.acquire_read(name, 5.0, retry_count=0).release()
    assert wait_until(lambda: nothing_left(cluster3, name))
    m.close()


def test_a_writer_that_gives_up_takes_its_mark_away(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST, queue_timeout=10.0)
    reader = m.acquire_read(name, 10.0)
    started = time.monotonic()
    with pytest.raises(ironlock.LockContendedError):
        m.acquire_write(name, 1.0, wait=0.3)
    assert time.monotonic() - started < 5.0
    # A 10 s mark would hold readers back for 10 s: it left with the writer.
    m.acquire_read(name, 1.0, retry_count=0).release()
    reader.release()
    assert wait_until(lambda: nothing_left(cluster3, name))


def test_fair_readers_and_writers_are_served_in_the_order_they_queued(
    cluster3: Cluster, name: str
) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST, retry_count=0)
    rw = m.rw_lock(name)
    holder = m.acquire_write(name, 10.0)
    order: List[str] = []

    def wait_in_line(who: str, side: Any) -> None:
        with side(ttl=5.0, wait=10.0, fair=True):
            order.append(who)
            time.sleep(0.2)
            order.append(f"{who} out")

    queue = f"{name}{{{name}}}:ironlock:queue"
    threads = []
    for n, (who, side) in enumerate((("R1", rw.read), ("W2", rw.write), ("R3", rw.read)), 1):
        t = threading.Thread(target=wait_in_line, args=(who, side))
        t.start()
        threads.append(t)
        assert wait_until(lambda: all(cluster3.cmd(i, "ZCARD", queue) == n for i in range(3)))
    # A new fair reader waits behind the writer in line (and leaves the line when it gives up).
    with pytest.raises(ironlock.LockContendedError, match="earlier fair waiters are in line"):
        m.acquire_read(name, 1.0, fair=True)
    assert all(cluster3.cmd(i, "ZCARD", queue) == 3 for i in range(3))
    assert order == []
    holder.release()
    for t in threads:
        t.join(30.0)
    assert order == ["R1", "R1 out", "W2", "W2 out", "R3", "R3 out"]
    assert wait_until(lambda: nothing_left(cluster3, name))
    assert wait_until(lambda: all(cluster3.cmd(i, "EXISTS", queue) == 0 for i in range(3)))


def test_bad_input_names_the_argument(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST, retry_count=0)
    for take in (m.acquire_read, m.acquire_write):
        # fair=True is no bad input: it waits in the lock's line (nobody is in it here).
        lock = take(name, 1.0, fair=True)
        assert lock.access in ("read", "write")
        lock.release()
        with pytest.raises(
            ironlock.InvalidArgumentError,
            match="^min_hold: applies to locks, not to read-write locks",
        ):
            take(name, 1.0, min_hold=0.5)
        with pytest.raises(ironlock.InvalidArgumentError, match="^resource: "):
            take("", 1.0)
        with pytest.raises(ironlock.InvalidArgumentError, match="^ttl: "):
            take(name, 0)
        with pytest.raises(ironlock.ArgumentTypeError, match="^ttl: "):
            take(name, "10")  # type: ignore[arg-type]
        with pytest.raises(ironlock.ArgumentTypeError, match="^fencing: "):
            take(name, 1.0, fencing="yes")  # type: ignore[arg-type]
        # fair=False acquires outside the line, as by default: accepted.
        lock = take(name, 1.0, fair=False)
        assert lock.access in ("read", "write")
        lock.release()
    with pytest.raises(ValueError, match="access: expected 'read' or 'write'"):
        ironlock.RwLockSide(m, name, "both", 1.0)  # type: ignore[arg-type]
    # Nothing was taken by the refusals.
    assert wait_until(lambda: nothing_left(cluster3, name))


def test_context_managers_release_and_leave_no_key(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST, retry_count=0)
    rw = m.rw_lock(name)
    assert isinstance(rw, ironlock.RwLock) and rw.resource == name
    assert repr(rw) == f"<ironlock.RwLock {name!r}>"
    side = rw.read(ttl=5.0)
    assert side.access == "read" and repr(side) == f"<ironlock.RwLockSide {name!r} access='read'>"
    with side as r1:
        assert isinstance(r1, ironlock.Lock) and r1.access == "read" and r1.valid
        with rw.read(ttl=5.0, fencing=True) as r2:  # readers share
            assert r2.fence is not None
            assert on_quorum(cluster3, lambda i: cluster3.cmd(i, "ZCARD", readers_key(name)) == 2)
            with pytest.raises(ironlock.LockContendedError):
                with rw.write(ttl=5.0):
                    pass
        assert r2.released
        assert on_quorum(cluster3, lambda i: cluster3.cmd(i, "GET", name) == "ironlock readers")
    assert r1.released
    assert wait_until(lambda: nothing_left(cluster3, name))

    with rw.write(ttl=5.0, wait=2.0, fencing=True) as w:
        assert w.access == "write" and w.fence is not None
        assert on_quorum(cluster3, lambda i: cluster3.cmd(i, "GET", name) == w.token)
        with pytest.raises(ironlock.LockContendedError, match="a writer"):
            with rw.read(ttl=5.0):
                pass
        with pytest.raises(ironlock.LockContendedError):
            with m.lock(name, 5.0, wait=0.1):
                pass
    assert w.released
    assert wait_until(lambda: nothing_left(cluster3, name))

    # An exception in the block releases too, and propagates.
    with pytest.raises(KeyError):
        with rw.write(ttl=5.0) as w2:
            raise KeyError("boom")
    assert w2.released
    assert wait_until(lambda: nothing_left(cluster3, name))

    # acquire() hands the lock over: the caller releases it.
    held = rw.read(ttl=5.0).acquire()
    assert held.access == "read" and not held.released
    assert held.release() is True

    # A read that expired inside the block: leaving it raises LockLostError.
    with pytest.raises(ironlock.LockLostError):
        with rw.read(ttl=0.2) as short:
            time.sleep(0.4)
    assert not short.valid
    assert wait_until(lambda: nothing_left(cluster3, name))
    m.close()


def test_keep_alive_and_lost_work_on_both_sides(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST, retry_count=0)
    r = m.acquire_read(name, 0.5)
    with r.keep_alive():
        time.sleep(1.0)
        assert r.valid and not r.lost.is_set() and r.extensions >= 1
    # Readers kept alive past their first ttl still hold back a writer.
    with pytest.raises(ironlock.LockContendedError):
        m.acquire_write(name, 1.0)
    r.finish()
    w = m.acquire_write(name, 0.3)
    assert w.lost.wait(2.0), "the expired writer is reported lost"
    with pytest.raises(ironlock.LockLostError):
        w.finish()
    assert wait_until(lambda: nothing_left(cluster3, name))


def test_asyncio_read_write(cluster3: Cluster, name: str) -> None:
    async def main() -> List[str]:
        seen: List[str] = []
        m = await ironlock.AsyncLockManager.connect(cluster3.urls, **FAST, retry_count=0)
        rw = m.rw_lock(name)
        assert isinstance(rw, ironlock.AsyncRwLock) and rw.resource == name
        assert repr(rw.write(ttl=1.0)) == f"<ironlock.AsyncRwLockSide {name!r} access='write'>"
        async with rw.read(ttl=5.0) as r1:
            assert isinstance(r1, ironlock.AsyncLock) and r1.access == "read"
            assert "access='read'" in repr(r1)
            r2 = await m.acquire_read(name, 5.0)  # readers share
            with pytest.raises(ironlock.LockContendedError, match="readers, another writer"):
                await m.acquire_write(name, 5.0)
            with pytest.raises(ironlock.LockContendedError, match="readers, another writer"):
                await m.acquire_write(name, 5.0, fair=True)  # in line, behind the readers
            with pytest.raises(ironlock.InvalidArgumentError, match="^min_hold: "):
                await m.acquire_read(name, 5.0, min_hold=1.0)

            async def write() -> ironlock.AsyncLock:
                return await m.acquire_write(name, 5.0, wait=8.0)

            writer = asyncio.create_task(write())
            for _ in range(200):
                if on_quorum(cluster3, lambda i: cluster3.cmd(i, "EXISTS", writer_key(name)) == 1):
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the waiting writer left no mark")
            # A waiting writer holds back new try-once readers.
            with pytest.raises(ironlock.LockContendedError, match="a writer is waiting for it"):
                await m.acquire_read(name, 5.0)
            assert not writer.done()
            assert await r2.release() is True
            seen.append("r2 released")
        assert r1.released
        w = await asyncio.wait_for(writer, 10.0)
        seen.append(f"writer {w.access}")
        assert "access='write'" in repr(w)
        await w.release()
        async with rw.write(ttl=5.0) as w2:
            assert w2.access == "write"
            with pytest.raises(ironlock.LockContendedError):
                await rw.read(ttl=5.0).acquire()
        assert w2.released
        m.close()
        return seen

    assert asyncio.run(main()) == ["r2 released", "writer write"]
    assert wait_until(lambda: nothing_left(cluster3, name))


def test_asyncio_cancelled_writer_takes_its_mark_away(cluster3: Cluster, name: str) -> None:
    async def main() -> None:
        m = await ironlock.AsyncLockManager.connect(cluster3.urls, **FAST, queue_timeout=10.0)
        reader = await m.acquire_read(name, 10.0)

        async def write() -> ironlock.AsyncLock:
            return await m.acquire_write(name, 5.0, wait=8.0)

        writer = asyncio.create_task(write())
        for _ in range(200):
            if on_quorum(cluster3, lambda i: cluster3.cmd(i, "EXISTS", writer_key(name)) == 1):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the waiting writer left no mark")
        assert not writer.done()
        writer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writer
        # The mark is taken away in the background, right after the cancel.
        for _ in range(40):
            try:
                r = await m.acquire_read(name, 1.0, retry_count=0)
            except ironlock.LockContendedError:
                await asyncio.sleep(0.025)
                continue
            await r.release()
            break
        else:
            raise AssertionError("a cancelled writer's mark still holds readers back")
        await reader.release()
        m.close()

    asyncio.run(main())
    assert wait_until(lambda: nothing_left(cluster3, name))


def test_read_write_names_are_exported() -> None:
    for cls in ("RwLock", "RwLockSide", "AsyncRwLock", "AsyncRwLockSide"):
        assert cls in ironlock.__all__ and getattr(ironlock, cls).__doc__
    # The docstring states the rules itself.
    doc = ironlock.RwLock.__doc__ or ""
    for rule in ("shared", "exclusive", "plain lock", "waiting", "min_hold"):
        assert rule in doc, rule
