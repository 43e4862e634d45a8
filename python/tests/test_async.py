"""The asyncio API: coroutines, async with, 64 concurrent tasks, cancel-safety."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

import ironlock
from conftest import FAST, Cluster, keys_left, wait_until


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_acquire_extend_release(cluster3: Cluster, name: str) -> None:
    async def main() -> None:
        async with ironlock.AsyncLockManager(cluster3.urls, **FAST) as m:
            lock = await m.acquire(name, 5.0, fencing=True)
            assert isinstance(lock, ironlock.AsyncLock)
            assert lock.valid and lock.fence is not None
            await lock.extend(6.0)
            assert lock.ttl == 6.0 and lock.extensions == 1
            with pytest.raises(ironlock.LockContendedError) as info:
                await m.acquire(name, 5.0, retry_count=0)
            assert info.value.report
            assert await lock.release() is True
            assert await lock.release() is False
        assert m.closed

    run(main())
    assert keys_left(cluster3, name) == 0


def test_64_concurrent_tasks_exclude_each_other(cluster3: Cluster, name: str) -> None:
    inside = 0
    peak = 0
    done = 0

    async def worker(m: ironlock.AsyncLockManager) -> None:
        nonlocal inside, peak, done
        async with m.lock(name, ttl=5.0, wait=60.0):
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.001)
            inside -= 1
            done += 1

    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        await asyncio.wait_for(asyncio.gather(*(worker(m) for _ in range(64))), 60)

    run(main())
    assert done == 64 and peak == 1
    assert keys_left(cluster3, name) == 0


def test_64_tasks_on_distinct_resources_run_concurrently(cluster3: Cluster, name: str) -> None:
    async def main() -> list:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        locks = await asyncio.gather(*(m.acquire(f"{name}:{i}", 5.0) for i in range(64)))
        held = await asyncio.gather(*(lock.release() for lock in locks))
        return list(held)

    assert run(main()) == [True] * 64


def test_one_manager_on_successive_and_concurrent_event_loops(cluster3: Cluster, name: str) -> None:
    # Results are delivered per event loop: each loop gets its own, even one after another on
    # one thread or side by side on several threads.
    import threading

    m = ironlock.AsyncLockManager(cluster3.urls, **FAST)

    async def cycles(tag: str) -> list:
        locks = await asyncio.gather(*(m.acquire(f"{name}:{tag}:{i}", 5.0) for i in range(16)))
        return list(await asyncio.gather(*(lock.release() for lock in locks)))

    assert run(cycles("a")) == [True] * 16
    assert run(cycles("b")) == [True] * 16
    results: dict = {}

    def in_thread(tag: str) -> None:
        results[tag] = asyncio.run(cycles(tag))

    threads = [threading.Thread(target=in_thread, args=(f"t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {f"t{i}": [True] * 16 for i in range(3)}
    m.close()


def test_cancelled_acquire_leaves_no_key(cluster3: Cluster, name: str) -> None:
    for i in (0, 1):
        assert cluster3.cmd(i, "SET", name, "foreign", "PX", "30000") == "OK"

    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        task = asyncio.ensure_future(m.acquire(name, 10.0, wait=30.0))
        await asyncio.sleep(0.3)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert wait_until(lambda: cluster3.cmd(2, "EXISTS", name) == 0)
    assert cluster3.cmd(0, "GET", name) == "foreign"
    for i in (0, 1):
        cluster3.cmd(i, "DEL", name)


def test_cancel_racing_a_grant_leaves_no_key(cluster3: Cluster, name: str) -> None:
    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        for i in range(20):
            task = asyncio.ensure_future(m.acquire(f"{name}:{i}", 10.0))
            await asyncio.sleep(0.0005 * i)
            task.cancel()
            try:
                lock = await task
            except asyncio.CancelledError:
                continue
            assert await lock.release()

    run(main())
    assert wait_until(
        lambda: sum(keys_left(cluster3, f"{name}:{i}") for i in range(20)) == 0, timeout=3.0
    )


def test_async_using_and_lost(cluster3: Cluster, name: str) -> None:
    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        async with m.using(name, ttl=0.5) as lock:
            await asyncio.sleep(1.6)
            assert lock.valid and lock.extensions >= 3 and not lock.lost.is_set()
        with pytest.raises(ironlock.LockLostError):
            async with m.using(name, ttl=0.6) as lock:
                for i in range(3):
                    cluster3.cmd(i, "DEL", name)
                start = time.monotonic()
                assert await asyncio.wait_for(lock.lost.wait(), 3.0) is True
                assert time.monotonic() - start < 1.0

    run(main())
    assert keys_left(cluster3, name) == 0


def test_async_lock_object(cluster3: Cluster, name: str) -> None:
    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        dl = m.lock(name, ttl=5.0)
        other = m.lock(name, ttl=5.0)
        assert await dl.acquire() is True
        assert dl.owned() and await other.locked()
        assert await other.acquire(blocking=False) is False
        await dl.release()
        assert not await other.locked()
        with pytest.raises(RuntimeError):
            await dl.release()

    run(main())


def test_synchronize_async(cluster3: Cluster, name: str) -> None:
    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        order = []

        @ironlock.synchronize(m, name, ttl=2.0, wait=10.0)
        async def critical(i: int) -> int:
            order.append(("in", i))
            await asyncio.sleep(0.01)
            order.append(("out", i))
            return i

        assert sorted(await asyncio.gather(*(critical(i) for i in range(5)))) == list(range(5))
        # Never two "in" in a row: the calls did not overlap.
        assert all(a[0] != b[0] for a, b in zip(order, order[1:]))
        with pytest.raises(TypeError):

            @ironlock.synchronize(m, name, ttl=1.0)
            def wrong() -> None: ...

    run(main())


def test_calls_cancelled_while_queued_leave_no_key(cluster3: Cluster, name: str) -> None:
    # Calls made while others are in flight wait for the loop's next drive of the runtime;
    # cancelling one before then stops it there, and the rest run. The nodes hold every write
    # for 200 ms, so the first call is still in flight when the others are made.
    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, node_timeout=2.0, **FAST)
        await (await m.acquire(f"{name}:warm", 5.0)).release()
        for i in range(3):
            assert cluster3.cmd(i, "CLIENT", "PAUSE", "200", "WRITE") == "OK"
        calls = [m.acquire(f"{name}:{i}", 10.0) for i in range(32)]
        assert not any(c.done() for c in calls)
        for c in calls[1::2]:
            assert c.cancel()
        done = await asyncio.gather(*calls, return_exceptions=True)
        kept = [lock for lock in done if isinstance(lock, ironlock.AsyncLock)]
        assert len(kept) == 16 and all(isinstance(x, asyncio.CancelledError) for x in done[1::2])
        # The cancelled ones never started a round: the warm-up's and the 16 kept ones only.
        assert m.stats()["rounds"] == 17
        assert all(await asyncio.gather(*(lock.release() for lock in kept)))

    run(main())
    assert wait_until(
        lambda: sum(keys_left(cluster3, f"{name}:{i}") for i in range(32)) == 0, timeout=3.0
    )


def test_an_awaited_call_on_an_idle_loop_finishes_without_a_turn_of_the_loop(
    cluster3: Cluster, name: str
) -> None:
    # With nothing else to do, an awaited call waits on the runtime itself (as the loop would,
    # less its turns): 100 acquire+release cycles take a handful of the loop's selects, not the
    # two per await (400) that completing each through the loop costs.
    async def main() -> int:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        await (await m.acquire(f"{name}:warm", 5.0)).release()
        selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        real = selector.select
        turns = 0

        def counting(timeout: object = None) -> object:
            nonlocal turns
            turns += 1
            return real(timeout)

        selector.select = counting
        try:
            for i in range(100):
                assert await (await m.acquire(f"{name}:{i}", 5.0)).release() is True
        finally:
            del selector.select
        return turns

    turns = run(main())
    assert isinstance(turns, int) and turns < 100, turns
    assert sum(keys_left(cluster3, f"{name}:{i}") for i in range(100)) == 0


def test_a_call_not_awaited_at_once_still_runs_in_the_loops_next_turn(
    cluster3: Cluster, name: str
) -> None:
    # A call starts when its future is awaited on an idle loop; one that is not awaited (kept
    # for later, or waited on through callbacks as `asyncio.wait_for` does on Python 3.11, or
    # `asyncio.wait`) starts in the loop's next turn all the same.
    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        await (await m.acquire(f"{name}:warm", 5.0)).release()
        kept = m.acquire(f"{name}:kept", 10.0)
        await asyncio.sleep(0.2)
        assert kept.done() and keys_left(cluster3, f"{name}:kept") == 3
        assert await kept.result().release()
        done, _ = await asyncio.wait([m.acquire(f"{name}:waited", 10.0)], timeout=5.0)
        assert len(done) == 1
        assert await done.pop().result().release()
        lock = await asyncio.wait_for(m.acquire(f"{name}:wait_for", 10.0), 5.0)
        assert await lock.release()

    run(main())
    assert keys_left(cluster3, f"{name}:kept") + keys_left(cluster3, f"{name}:waited") == 0


def test_an_awaited_call_never_holds_up_the_loops_ready_callbacks_or_due_timers(
    cluster3: Cluster, name: str
) -> None:
    # A callback ready, or a timer due, when a call is awaited: the task yields and they run
    # before the call's result is taken (waiting for the reply first would reverse the order).
    # Only a call still in flight when awaited shows it (one node: a call rarely finishes
    # while it starts, which a debug build of three nodes often does).
    async def main() -> list[list[str]]:
        m = ironlock.AsyncLockManager(cluster3.urls[:1], **FAST)
        await (await m.acquire(f"{name}:warm", 5.0)).release()
        loop = asyncio.get_running_loop()
        orders = []
        for first in ("callback", "timer"):
            for i in range(50):
                order: list[str] = []
                if first == "callback":
                    loop.call_soon(order.append, first)
                else:
                    loop.call_later(0, order.append, first)
                call = m.acquire(f"{name}:{first}:{i}", 5.0)
                in_flight = not call.done()
                lock = await call
                order.append("acquired")
                assert await lock.release()
                await asyncio.sleep(0)
                if in_flight:
                    orders.append(order)
                    break
        return orders

    assert run(main()) == [["callback", "acquired"], ["timer", "acquired"]]


def test_a_signal_handler_raising_while_an_awaited_call_settles_cancels_the_call(
    cluster3: Cluster, name: str
) -> None:
    # Without an asyncio runner turning Ctrl-C into a cancellation (Python < 3.11, or a loop run
    # by hand), a signal handler raises wherever Python runs. Raised while an awaited call waits
    # for its reply on the spot, it must stop the call, as a cancellation of the waiting task
    # would: the nodes hold every write for 300 ms, and no key may appear after that.
    class Interrupted(Exception):
        pass

    def on_alarm(*_: object) -> None:
        raise Interrupted()

    async def main() -> int:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        await (await m.acquire(f"{name}:warm", 5.0)).release()
        hits = 0
        for i in range(10):
            for n in range(3):
                assert cluster3.cmd(n, "CLIENT", "PAUSE", "300", "WRITE") == "OK"
            call = m.acquire(f"{name}:{i}", 10.0)
            signal.setitimer(signal.ITIMER_REAL, 0.0005)
            try:
                await call
                raise AssertionError("granted while every node held its writes")
            except Interrupted as e:
                frames = []
                tb = e.__traceback__
                while tb is not None:
                    frames.append(tb.tb_frame.f_code.co_name)
                    tb = tb.tb_next
            if "__await__" in frames:
                # Raised inside the wait: the call was stopped with it.
                assert call.cancelled()
                hits += 1
            else:
                call.cancel()  # raised before the await began: not what this test is about
            await asyncio.sleep(0.4)
            if hits >= 3:
                break
        return hits

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        hits = run(main())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert isinstance(hits, int) and hits >= 1
    assert sum(keys_left(cluster3, f"{name}:{i}") for i in range(10)) == 0


class NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop that cannot watch descriptors for others (as some custom loops)."""

    def add_reader(self, fd, callback, *args):  # type: ignore[no-untyped-def]
        raise NotImplementedError("add_reader")


def test_a_loop_that_cannot_watch_the_runtime_still_completes_every_call(
    cluster3: Cluster, name: str
) -> None:
    # Then the runtime's own thread drives it and hands results over with
    # call_soon_threadsafe: sequential and concurrent calls, cancellation included.
    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        for i in range(50):
            assert await (await m.acquire(f"{name}:s{i}", 5.0)).release() is True
        locks = await asyncio.gather(*(m.acquire(f"{name}:c{i}", 5.0) for i in range(32)))
        assert all(await asyncio.gather(*(lock.release() for lock in locks)))
        async with m.using(name, ttl=0.4) as lock:
            await asyncio.sleep(1.0)
            assert lock.valid and lock.extensions >= 2

    loop = NoReaderLoop()
    try:
        loop.run_until_complete(asyncio.wait_for(main(), 30))
    finally:
        loop.close()
    assert keys_left(cluster3, name) == 0


def test_a_blocked_event_loop_does_not_lose_an_auto_extended_lock(
    cluster3: Cluster, name: str
) -> None:
    # The loop drives the runtime while it runs; blocked (CPU work, a blocking call) for three
    # ttls, the runtime's own thread takes over and keeps extending.
    async def main() -> None:
        m = ironlock.AsyncLockManager(cluster3.urls, **FAST)
        async with m.using(name, ttl=0.3) as lock:
            time.sleep(1.0)  # blocks the loop
            assert lock.valid and not lock.lost.is_set()
            assert lock.extensions >= 2
        assert keys_left(cluster3, name) == 0

    run(main())
