"""Voters that are Sentinel-managed masters, and a failover under a held, auto-extended lock:
the holder keeps its lock or is told it lost it, and no second client gets it meanwhile."""

from __future__ import annotations

import time

import pytest

import ironlock

from conftest import Cluster

MAX_TTL = 2.0  # restart and failover quarantine: about 3 s


@pytest.fixture()
def group():
    g = Cluster(0, sentinel="1,3")
    try:
        time.sleep(MAX_TTL * 1.01 + 1.2)  # the data nodes out of the uptime quarantine
        yield g
    finally:
        g.close()


def manager(url: str) -> ironlock.LockManager:
    return ironlock.LockManager(
        [url], max_ttl=MAX_TTL, connect_timeout=5.0, node_timeout=0.5, retry_count=0
    )


def test_a_sentinel_voter_keeps_exclusion_through_a_failover(group: Cluster, name: str) -> None:
    holder = manager(group.sentinel_url)
    contender = manager(group.sentinel_url)
    key = name
    first = group.master()
    # `using` raises LockLostError at its end when the lock was lost during the work.
    with pytest.raises(ironlock.LockLostError), holder.using(key, ttl=MAX_TTL) as lock:
        assert group.cmd(first, "GET", key) == lock.token
        second = group.failover()
        assert second != first
        # Until the holder is told, nobody else may get the lock; once told, it is gone.
        deadline = time.monotonic() + 3 * MAX_TTL
        told_at = None
        while time.monotonic() < deadline:
            if lock.lost.is_set():
                told_at = time.monotonic()
                break
            with pytest.raises((ironlock.LockContendedError, ironlock.QuorumUnavailableError)):
                contender.acquire(key, MAX_TTL).release()
            time.sleep(0.1)
        # The new master serves a failover quarantine, so the holder cannot extend there: it is
        # told before its validity ran out, and not valid any more.
        assert told_at is not None, "the holder was never told"
        assert not lock.valid
    # Once the quarantine is over the voter counts on its new master.
    deadline = time.monotonic() + 10
    while True:
        try:
            got = contender.acquire(key, MAX_TTL)
            break
        except ironlock.QuorumUnavailableError as e:
            assert "failover quarantine" in str(e) or "not connected" in str(e), str(e)
            assert time.monotonic() < deadline, str(e)
            time.sleep(0.2)
    assert group.cmd(second, "GET", key) == got.token
    assert got.release()
    holder.close()
    contender.close()


def test_sentinel_urls_name_the_argument_and_hide_the_sentinel_password(name: str) -> None:
    with pytest.raises(ironlock.InvalidArgumentError, match=r"nodes\[0\].*after '#'"):
        ironlock.LockManager(["redis-sentinel://127.0.0.1:26379"])
    m = ironlock.LockManager(
        "redis-sentinel://127.0.0.1:1,127.0.0.1:2#m",
        sentinel_password="hunter2pw",
        connect_timeout=0.3,
        retry_count=0,
    )
    assert "hunter2pw" not in repr(m)
    with pytest.raises(ironlock.QuorumUnavailableError) as e:
        m.acquire(name, 1.0)
    assert "hunter2pw" not in str(e.value) and "sentinels" in str(e.value)
    m.close()


def test_a_redis_cluster_is_one_voter(name: str) -> None:
    c = Cluster(0, cluster="3,1")
    try:
        m = ironlock.LockManager(c.cluster_url, restart_quarantine=False, connect_timeout=5.0)
        assert m.quorum == 1
        for i in range(20):
            lock = m.acquire(f"{name}:{i}", 2.0, fencing=True)
            assert lock.fence is not None and lock.valid
            assert lock.release()
        # One request's resources must share a hash slot on a cluster.
        with pytest.raises(ironlock.QuorumUnavailableError, match="different hash slots"):
            m.acquire([f"{name}:a", f"{name}:b"], 2.0, retry_count=0)
        both = m.acquire([f"{{{name}}}:a", f"{{{name}}}:b"], 2.0)
        assert both.release()
        m.close()
    finally:
        c.close()
