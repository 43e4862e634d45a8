"""The habits of threading.Lock and redis-py's Lock, node forms, and start-up without blocking
(issue "Drop-in for what people already use", Python items), against real nodes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from datetime import timedelta
from typing import Any, Dict, Iterator

import pytest

import ironlock
from conftest import FAST, Cluster, keys_left


@pytest.fixture(scope="module")
def manager(cluster3: Cluster) -> ironlock.LockManager:
    return ironlock.LockManager(cluster3.urls, **FAST)


@pytest.fixture
def silent_node() -> Iterator[str]:
    """A TCP listener that accepts connections and never answers (a blackholed node)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"redis://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_acquire_without_timeout_waits_until_acquired(manager: ironlock.LockManager, name: str) -> None:
    holder = manager.lock(name, ttl=10.0)
    assert holder.acquire()
    # Far longer than the manager's retry budget (10 rounds of ~20 ms): threading.Lock waits.
    threading.Timer(1.5, holder.release).start()
    waiter = manager.lock(name, ttl=5.0)
    started = time.monotonic()
    assert waiter.acquire() is True
    waited = time.monotonic() - started
    assert 1.3 < waited < 5.0, waited
    waiter.release()
    # A timeout returns False after about that long.
    assert holder.acquire()
    started = time.monotonic()
    assert manager.lock(name, ttl=5.0).acquire(timeout=0.4) is False
    assert 0.35 < time.monotonic() - started < 2.0
    holder.release()


def test_with_waits_until_acquired_as_threading_lock(manager: ironlock.LockManager, name: str) -> None:
    holder = manager.acquire(name, 10.0)
    # Far longer than the manager's retry budget (10 rounds of ~20 ms): `with threading.Lock()`
    # waits, and so does `with manager.lock(...)` without wait=.
    threading.Timer(1.2, holder.release).start()
    started = time.monotonic()
    with manager.lock(name, ttl=5.0) as lock:
        waited = time.monotonic() - started
        assert lock.valid
    assert 1.0 < waited < 5.0, waited
    # An explicit wait= still bounds it.
    holder = manager.acquire(name, 10.0)
    started = time.monotonic()
    with pytest.raises(ironlock.LockContendedError):
        with manager.lock(name, ttl=5.0, wait=0.4):
            pytest.fail("entered a lock held elsewhere")
    assert 0.35 < time.monotonic() - started < 2.0
    holder.release()


def test_with_wait_is_interrupted_by_ctrl_c(manager: ironlock.LockManager, cluster3: Cluster, name: str) -> None:
    holder = manager.acquire(name, 30.0)
    threading.Timer(0.4, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with manager.lock(name, ttl=5.0):
            pytest.fail("entered a lock held elsewhere")
    assert time.monotonic() - started < 1.5
    assert holder.release()
    assert keys_left(cluster3, name) == 0


def test_async_with_waits_until_acquired(cluster3: Cluster, name: str) -> None:
    async def main() -> float:
        manager = await ironlock.AsyncLockManager.connect(cluster3.urls, **FAST)
        holder = await manager.acquire(name, 10.0)
        asyncio.get_running_loop().call_later(1.2, lambda: asyncio.ensure_future(holder.release()))
        started = time.monotonic()
        async with manager.lock(name, ttl=5.0) as lock:
            waited = time.monotonic() - started
            assert lock.valid
        holder = await manager.acquire(name, 10.0)
        with pytest.raises(ironlock.LockContendedError):
            async with manager.lock(name, ttl=5.0, wait=0.3):
                pytest.fail("entered a lock held elsewhere")
        await holder.release()
        manager.close()
        return waited

    waited = asyncio.run(main())
    assert 1.0 < waited < 5.0, waited


def test_extend_adds_time_as_redis_py(manager: ironlock.LockManager, cluster3: Cluster, name: str) -> None:
    dl = manager.lock(name, ttl=2.0)
    with pytest.raises(RuntimeError):
        dl.extend(1.0)
    assert dl.acquire()
    assert dl.extend(3.0) is True  # adds: about 2 + 3 s left
    assert dl.lock is not None and 4.5 < dl.lock.remaining <= 5.0
    assert dl.extend(timedelta(seconds=1), replace_ttl=True) is True  # sets: about 1 s left
    assert dl.lock.remaining <= 1.0
    with pytest.raises(ironlock.ArgumentTypeError):
        dl.extend("5")
    dl.release()
    with pytest.raises(RuntimeError):
        dl.extend(1.0)


def test_released_locks_refuse_keep_alive_and_extend(manager: ironlock.LockManager, name: str) -> None:
    lock = manager.acquire(name, 5.0)
    assert lock.release()
    with pytest.raises(ironlock.LockLostError):
        lock.keep_alive()
    with pytest.raises(ironlock.LockLostError):
        lock.extend(5.0)


def test_release_inside_with_makes_exit_a_no_op(manager: ironlock.LockManager, cluster3: Cluster, name: str) -> None:
    with manager.lock(name, ttl=5.0) as lock:
        assert lock.release() is True
    dl = manager.lock(name, ttl=5.0)
    with dl:
        dl.release()
    assert keys_left(cluster3, name) == 0


def test_nodes_in_every_form(cluster3: Cluster, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IRONLOCK_NODES", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    port = cluster3.ports
    forms: list[Any] = [
        ",".join(cluster3.urls),
        [{"host": "127.0.0.1", "port": p, "db": 0} for p in port],
        [cluster3.urls[0], {"host": "127.0.0.1", "port": port[1]}, f"redis://127.0.0.1:{port[2]}"],
    ]
    for nodes in forms:
        m = ironlock.LockManager(nodes, **FAST)
        assert len(m.nodes) == 3, m.nodes
        m.acquire(name, 2.0).release()
        m.close()
    monkeypatch.setenv("IRONLOCK_NODES", ",".join(cluster3.urls))
    assert len(ironlock.LockManager(**FAST).nodes) == 3
    monkeypatch.delenv("IRONLOCK_NODES")
    monkeypatch.setenv("REDIS_URL", cluster3.urls[0])
    assert ironlock.LockManager(**FAST).nodes == [cluster3.urls[0]]
    monkeypatch.delenv("REDIS_URL")
    with pytest.raises(ironlock.InvalidArgumentError, match="IRONLOCK_NODES"):
        ironlock.LockManager(**FAST)
    with pytest.raises(ironlock.InvalidArgumentError, match="IRONLOCK_NODES"):
        ironlock.LockManager(None, **FAST)
    with pytest.raises(ironlock.ArgumentTypeError, match=r"nodes\[0\]"):
        ironlock.LockManager([42])
    with pytest.raises(ironlock.InvalidArgumentError, match=r"nodes\[0\]\.port"):
        ironlock.LockManager([{"host": "127.0.0.1", "port": 70000}])


def test_password_in_a_mapping_is_encoded_and_never_shown(new_cluster: Any, name: str) -> None:
    password = "Hunter2#Sec/ret?@%41"
    c = new_cluster(1)
    c.cmd(0, "CONFIG", "SET", "requirepass", password)
    node = {"host": "127.0.0.1", "port": c.ports[0], "password": password}
    m = ironlock.LockManager([node], **FAST)
    m.acquire(name, 2.0).release()
    assert "Hunter2" not in repr(m) and "***" in repr(m)


def test_redis_py_clients_are_read(cluster3: Cluster, name: str) -> None:
    redis = pytest.importorskip("redis")
    clients = [redis.Redis(host="127.0.0.1", port=p, db=0) for p in cluster3.ports]
    m = ironlock.LockManager(clients, **FAST)
    assert m.nodes == [f"redis://127.0.0.1:{p}/0" for p in cluster3.ports]
    m.acquire(name, 2.0).release()
    import redis.asyncio as aioredis

    aclients = [aioredis.Redis(host="127.0.0.1", port=p) for p in cluster3.ports]
    assert len(ironlock.LockManager(aclients, **FAST).nodes) == 3


def test_a_bad_node_among_good_ones_is_a_node_error(cluster3: Cluster, silent_node: str, name: str) -> None:
    nodes = cluster3.urls + [silent_node, "redis://no-such-host.invalid:6379"]
    started = time.monotonic()
    m = ironlock.LockManager(nodes, connect_timeout=10.0, **FAST)
    assert time.monotonic() - started < 5.0, "start-up waited for the silent node"
    lock = m.acquire(name, 5.0)
    assert lock.release()
    with pytest.raises(ironlock.QuorumUnavailableError) as info:
        ironlock.LockManager(nodes[3:] + cluster3.urls[:1], connect_timeout=1.0, retry_count=0,
                             restart_quarantine=False).acquire(name, 1.0)
    assert "cannot resolve host" in str(info.value)


def test_async_constructor_never_blocks_the_loop(cluster3: Cluster, silent_node: str, name: str) -> None:
    async def main() -> float:
        stall = 0.0
        stop = False

        async def ticker() -> None:
            nonlocal stall
            last = time.monotonic()
            while not stop:
                await asyncio.sleep(0.005)
                now = time.monotonic()
                stall = max(stall, now - last)
                last = now

        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.02)
        m = ironlock.AsyncLockManager(cluster3.urls + [silent_node], connect_timeout=3.0, **FAST)
        lock = await m.acquire(name, 5.0)
        assert await lock.release()
        m2 = await ironlock.AsyncLockManager.connect(cluster3.urls, **FAST)
        lock2 = await m2.acquire(name, 5.0)
        assert lock2.valid and await lock2.release()
        await asyncio.sleep(0.02)
        stop = True
        await task
        return stall

    stall = asyncio.run(main())
    assert stall < 0.05, f"the event loop stalled for {stall * 1000:.0f} ms"


def test_mutual_tls_with_redis_py_names(tmp_path: Any, name: str) -> None:
    """Mutual TLS as the least-privilege ACL user, with fencing, against two nodes: node 0's
    certificate names only redis-a.ironlock.test (the URL says 127.0.0.1), node 1's is signed by
    another CA. Handshake errors say what to set in redis-py's names; per-node settings (a
    mapping's ssl_* keys) make both usable."""
    import os
    import subprocess

    from conftest import HARNESS

    pki = tmp_path / "pki"
    subprocess.run([HARNESS, "--pki", str(pki)], check=True, capture_output=True)
    acl = ["--user", "default", "on", "nopass", "~*", "&*", "+@all",
           "--user", "app", "on", ">app-Pa55", "~lk:*", "&lk:*", "+@all", "-@dangerous"]
    clusters, ports = [], []
    try:
        for served in ("named", "other-server"):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            tls = [
                "--tls-port", str(port), "--tls-cert-file", str(pki / f"{served}.pem"),
                "--tls-key-file", str(pki / f"{served}.key"), "--tls-ca-cert-file", str(pki / "ca.pem"),
                "--tls-auth-clients", "yes",
            ]
            clusters.append(Cluster(1, extra=tls + acl))
            ports.append(port)
        urls = [f"rediss://app:app-Pa55@127.0.0.1:{p}" for p in ports]
        common: Dict[str, Any] = dict(FAST, key_prefix="lk:", ssl_ca_certs=str(pki / "ca.pem"))
        client = {"ssl_certfile": str(pki / "client.pem"), "ssl_keyfile": str(pki / "client.key")}
        # The nodes as mappings: node 0 with its server name, node 1 with its own CA (as text).
        nodes = [
            {"host": "127.0.0.1", "port": ports[0], "ssl": True, "username": "app", "password": "app-Pa55",
             "ssl_server_hostname": "redis-a.ironlock.test"},
            {"host": "127.0.0.1", "port": ports[1], "ssl": True, "username": "app", "password": "app-Pa55",
             "ssl_ca_data": (pki / "other-ca.pem").read_text()},
        ]
        # Without a client certificate: the reason and what to set, in redis-py's names.
        m = ironlock.LockManager(nodes, **common)
        with pytest.raises(ironlock.QuorumUnavailableError,
                           match="requires a client certificate: set ssl_certfile and ssl_keyfile"):
            m.acquire(name, 2.0)
        m.close()
        # Without the per-node settings: each handshake error names the keyword to set.
        m = ironlock.LockManager(urls, **common, **client)
        with pytest.raises(ironlock.QuorumUnavailableError) as e:
            m.acquire(name, 2.0)
        text = str(e.value)
        assert "does not name this host: connect by a name it holds, or set ssl_server_hostname" in text, text
        assert "not signed by a trusted CA: set ssl_ca_certs" in text, text
        assert "app-Pa55" not in text and "app-Pa55" not in repr(e.value.report)
        m.close()
        # With both: granted over mutual TLS by the restricted user, with a fencing token.
        m = ironlock.LockManager(nodes, **common, **client)
        lock = m.acquire(name, 2.0, fencing=True)
        assert lock.fence is not None and lock.fence > 0
        lock.release()
        assert "PRIVATE" not in repr(m)
        m.close()
        # The manager-wide server name, for node 0 alone.
        one = ironlock.LockManager(urls[:1], **common, **client, ssl_server_hostname="redis-a.ironlock.test")
        one.acquire(name, 2.0).release()
        one.close()
        with pytest.raises(ironlock.InvalidArgumentError, match="ssl_keyfile: cannot read"):
            ironlock.LockManager(urls, ssl_keyfile=os.fspath(pki / "missing.key"),
                                 ssl_certfile=str(pki / "client.pem"))
        with pytest.raises(ironlock.InvalidArgumentError, match=r"nodes\[0\]\.ssl_certfile: cannot read"):
            ironlock.LockManager([dict(nodes[0], ssl_certfile=os.fspath(pki / "missing.pem"))])
        with pytest.raises(ironlock.InvalidArgumentError, match="ssl_server_hostname: \"not a name\""):
            ironlock.LockManager(urls, ssl_server_hostname="not a name")
    finally:
        for c in clusters:
            c.close()


