"""Safety after fork: children get their own runtime and connections, contend correctly, and a
lock inherited from the parent refuses to extend or release in the child."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

import ironlock
from conftest import FAST, Cluster, keys_left

CHILDREN = 4
ROUNDS = 10


def child(manager: ironlock.LockManager, inherited: ironlock.Lock, name: str, counter: str) -> None:
    # The parent's lock is not this process's to release or extend.
    for op in (inherited.release, inherited.extend, inherited.keep_alive):
        try:
            op()
        except ironlock.ForkedLockError as e:
            assert str(os.getpid()) in str(e)
        else:
            raise SystemExit(3)
    # Plain reads still work.
    assert inherited.token and inherited.pid != os.getpid()
    path = Path(counter)
    for _ in range(ROUNDS):
        with manager.lock(name, ttl=5.0, wait=30.0):
            value = int(path.read_text())
            path.write_text(str(value + 1))
    # Returning (not os._exit) lets multiprocessing run ironlock's exit hook, which waits for the
    # last release's deletes still in flight on a minority of nodes: os._exit here would leave
    # that key until its ttl, and the parent's keys_left check below would see it.


def test_fork_children_contend_with_exact_counter(
    cluster3: Cluster, name: str, tmp_path: Path
) -> None:
    ctx = multiprocessing.get_context("fork")
    manager = ironlock.LockManager(cluster3.urls, **FAST)
    inherited = manager.acquire(name + ":parent", 10.0)
    counter = tmp_path / "counter"
    counter.write_text("0")
    procs = [
        ctx.Process(target=child, args=(manager, inherited, name, str(counter)))
        for _ in range(CHILDREN)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * CHILDREN
    assert int(counter.read_text()) == CHILDREN * ROUNDS
    # The parent's lock survived its children and is still the parent's to release.
    assert inherited.valid
    assert inherited.release() is True
    assert keys_left(cluster3, name) == 0 and keys_left(cluster3, name + ":parent") == 0
    # The parent's manager still works after forking.
    manager.acquire(name, 1.0).release()


def test_child_can_use_async_manager_after_fork(cluster3: Cluster, name: str) -> None:
    import asyncio

    ctx = multiprocessing.get_context("fork")
    manager = ironlock.AsyncLockManager(cluster3.urls, **FAST)

    async def use() -> bool:
        lock = await manager.acquire(name, 2.0)
        return await lock.release()

    assert asyncio.run(use())

    def run_child() -> None:
        os._exit(0 if asyncio.run(use()) else 1)

    p = ctx.Process(target=run_child)
    p.start()
    p.join(30)
    assert p.exitcode == 0


@pytest.mark.parametrize("method", ["spawn"])
def test_spawned_children_import_cleanly(method: str) -> None:
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(1) as pool:
        assert pool.apply(_version) == ironlock.__version__


def _version() -> str:
    import ironlock as again

    return again.__version__
