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


def _addresses(url: str) -> tuple[list[tuple[str, int]], str]:
    """The (host, port) pairs and the master name of a redis-sentinel:// or redis-cluster://
    URL as the harness prints it (no credentials, no database)."""
    rest = url.split("://", 1)[1]
    rest, _, master = rest.partition("#")
    pairs = []
    for hp in rest.split(","):
        host, _, port = hp.rpartition(":")
        pairs.append((host, int(port)))
    return pairs, master


def test_sentinel_voters_as_mappings_and_redis_py_clients(name: str) -> None:
    import redis
    import redis.sentinel

    g = Cluster(0, sentinel="1,3")
    try:
        sentinels, master = _addresses(g.sentinel_url)
        fast = dict(restart_quarantine=False, connect_timeout=5.0, node_timeout=0.5)
        forms = [
            {"sentinels": sentinels, "service_name": master},
            {"sentinels": [f"{h}:{p}" for h, p in sentinels], "master_name": master, "db": 0},
            redis.sentinel.Sentinel(sentinels).master_for(master),
        ]
        for form in forms:
            with ironlock.LockManager([form], **fast) as m:
                assert m.nodes == [g.sentinel_url], form
                lock = m.acquire(name, 2.0)
                assert g.cmd(g.master(), "GET", name) == lock.token
                assert lock.release()
        # Credentials and a database: percent-encoded into the URL, shown masked.
        shown = ironlock.LockManager(
            [{"sentinels": sentinels[:1], "service_name": master, "username": "app",
              "password": "p@ss#w/rd%", "db": 2, "sentinel_password": "s3cret#"}],
            connect_timeout=0.2,
        )
        h, p = sentinels[0]
        assert shown.nodes == [f"redis-sentinel://app:***@{h}:{p}/2#{master}"]
        assert "p@ss" not in repr(shown) and "s3cret" not in repr(shown)
        shown.close()
        # The manager has one sentinel login: a node's must agree with the setting.
        with pytest.raises(ironlock.InvalidArgumentError, match=r"nodes\[0\]\.sentinel_password") as e:
            ironlock.LockManager(
                [{"sentinels": sentinels, "service_name": master, "sentinel_password": "one1"}],
                sentinel_password="two2",
            )
        assert "one1" not in str(e.value) and "two2" not in str(e.value)
        client = redis.sentinel.Sentinel(
            sentinels, sentinel_kwargs={"password": "one1"}
        ).master_for(master)
        with pytest.raises(ironlock.InvalidArgumentError, match=r"nodes\[1\]\.sentinel_password"):
            ironlock.LockManager(
                [{"sentinels": sentinels, "service_name": master, "sentinel_password": "two2"},
                 client],
            )
        ironlock.LockManager(
            [{"sentinels": sentinels, "service_name": master, "sentinel_password": "same"}],
            sentinel_password="same", connect_timeout=0.2,
        ).close()
        # A Sentinel object names no master; a replica's client is not a voter.
        with pytest.raises(ironlock.InvalidArgumentError, match=r"master_for"):
            ironlock.LockManager([redis.sentinel.Sentinel(sentinels)])
        with pytest.raises(ironlock.InvalidArgumentError, match=r"master_for"):
            ironlock.LockManager([redis.sentinel.Sentinel(sentinels).slave_for(master)])
    finally:
        g.close()


def test_cluster_voters_as_mappings_and_redis_py_clients(name: str) -> None:
    import redis.asyncio.cluster
    import redis.cluster

    c = Cluster(0, cluster="3,1")
    try:
        seeds, _ = _addresses(c.cluster_url)
        fast = dict(restart_quarantine=False, connect_timeout=5.0)
        first_two = "redis-cluster://" + ",".join(f"{h}:{p}" for h, p in seeds[:2])
        client = redis.cluster.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in seeds[:2]]
        )
        forms = [
            ({"cluster": seeds}, c.cluster_url),
            ({"cluster": [f"{h}:{p}" for h, p in seeds[:2]]}, first_two),
            (client, first_two),
        ]
        for form, url in forms:
            with ironlock.LockManager([form], **fast) as m:
                assert m.nodes == [url]
                for i in range(5):
                    lock = m.acquire(f"{name}:{i}", 2.0, fencing=True)
                    assert lock.valid and lock.release()
        client.close()
        h, p = seeds[0]
        lazy = redis.asyncio.cluster.RedisCluster(host=h, port=p)
        m = ironlock.LockManager([lazy], connect_timeout=0.2, **FAST_OFF)
        assert m.nodes == [f"redis-cluster://{h}:{p}"]
        m.close()
        shown = ironlock.LockManager(
            [{"cluster": seeds[:1], "username": "app", "password": "p@ss#w/rd%", "ssl": True}],
            connect_timeout=0.2,
        )
        assert shown.nodes == [f"rediss-cluster://app:***@{h}:{p}"]
        shown.close()
    finally:
        c.close()


FAST_OFF = dict(restart_quarantine=False)


@pytest.mark.parametrize(
    "node, pattern",
    [
        ({"sentinels": [("h", 1)]}, r"nodes\[0\]\.service_name: a Sentinel-managed master needs"),
        ({"sentinels": [("h", 1)], "master_name": ""}, r"nodes\[0\]\.master_name:"),
        ({"sentinels": [("h", 1)], "service_name": "a b"}, r"nodes\[0\]\.service_name: must be a plain"),
        ({"sentinels": [("h", 1)], "service_name": "m", "master_name": "n"}, r"nodes\[0\]\.master_name: differs"),
        ({"sentinels": [("h", 1)], "service_name": "m", "host": "x"}, r"nodes\[0\]\.host: .* in sentinels"),
        ({"sentinels": [("h", 1)], "service_name": "m", "cluster": ["c:1"]}, r"nodes\[0\]\.cluster: give"),
        ({"sentinels": [], "service_name": "m"}, r"nodes\[0\]\.sentinels: empty"),
        ({"sentinels": ["h:x"], "service_name": "m"}, r"nodes\[0\]\.sentinels\[0\]:"),
        ({"sentinels": [("h", 70000)], "service_name": "m"}, r"nodes\[0\]\.sentinels\[0\]\[1\]:"),
        ({"cluster": ["c:1"], "db": 1}, r"nodes\[0\]\.db: a Redis Cluster has only database 0"),
        ({"cluster": ["c:1"], "port": 1}, r"nodes\[0\]\.port: .* in cluster"),
        ({"cluster": ["c:1"], "sentinel_password": "x"}, r"nodes\[0\]\.sentinel_password: only"),
        ({"service_name": "m", "host": "h"}, r"nodes\[0\]\.service_name: names a Sentinel"),
    ],
)
def test_sentinel_and_cluster_mappings_name_the_bad_part(node: dict, pattern: str) -> None:
    with pytest.raises(ironlock.InvalidArgumentError, match=pattern):
        ironlock.LockManager([node])


def test_sentinel_and_cluster_address_lists_of_a_wrong_type_are_named() -> None:
    with pytest.raises(ironlock.ArgumentTypeError, match=r"nodes\[0\]\.sentinels: expected a list"):
        ironlock.LockManager([{"sentinels": "h:1", "service_name": "m"}])
    with pytest.raises(ironlock.ArgumentTypeError, match=r"nodes\[0\]\.cluster\[0\]: expected"):
        ironlock.LockManager([{"cluster": [1]}])
