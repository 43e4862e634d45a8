"""SPEC §6: every bad input raises InvalidArgumentError (wrong types: ArgumentTypeError, also a
TypeError) naming the argument, touches no node and leaves no key; SPEC §5 error mapping."""

from __future__ import annotations

import math
import pickle
from datetime import timedelta
from typing import Any, Dict, Optional

import pytest

import ironlock
from conftest import FAST, Cluster
from ironlock.exceptions import NodeReport

ALL_ERRORS = [
    ironlock.IronlockError,
    ironlock.LockContendedError,
    ironlock.QuorumUnavailableError,
    ironlock.LockLostError,
    ironlock.InvalidArgumentError,
    ironlock.ArgumentTypeError,
    ironlock.ForkedLockError,
    ironlock.IronlockConnectionError,
    ironlock.InternalError,
]


@pytest.fixture(scope="module")
def manager(cluster3: Cluster) -> ironlock.LockManager:
    return ironlock.LockManager(cluster3.urls, max_ttl=10.0, **FAST)


BAD_ACQUIRE = [
    # (args, kwargs, exception, text in message)
    (([], 1.0), {}, ironlock.InvalidArgumentError, "resources"),
    ((("",), 1.0), {}, ironlock.InvalidArgumentError, "resources[0]"),
    ((["a", "a"], 1.0), {}, ironlock.InvalidArgumentError, "resources[1]"),
    ((["ok", 7], 1.0), {}, ironlock.ArgumentTypeError, "resources[1]"),
    ((b"bytes", 1.0), {}, ironlock.ArgumentTypeError, "resources"),
    ((None, 1.0), {}, ironlock.ArgumentTypeError, "resources"),
    (({"a"}, 1.0), {}, ironlock.ArgumentTypeError, "resources"),
    (("bad\udcff", 1.0), {}, ironlock.InvalidArgumentError, "UTF-8"),
    (("r", 0), {}, ironlock.InvalidArgumentError, "ttl"),
    (("r", 0.0), {}, ironlock.InvalidArgumentError, "ttl"),
    (("r", -1.0), {}, ironlock.InvalidArgumentError, "ttl"),
    (("r", math.nan), {}, ironlock.InvalidArgumentError, "ttl"),
    (("r", math.inf), {}, ironlock.InvalidArgumentError, "ttl"),
    (("r", 11.0), {}, ironlock.InvalidArgumentError, "max_ttl"),
    (("r", timedelta(seconds=-1)), {}, ironlock.InvalidArgumentError, "ttl"),
    (("r", "10"), {}, ironlock.ArgumentTypeError, "ttl"),
    (("r", True), {}, ironlock.ArgumentTypeError, "ttl"),
    (("r", None), {}, ironlock.ArgumentTypeError, "ttl"),
    (("r", 1.0), {"wait": -1.0}, ironlock.InvalidArgumentError, "wait"),
    (("r", 1.0), {"wait": math.nan}, ironlock.InvalidArgumentError, "wait"),
    (("r", 1.0), {"wait": "1"}, ironlock.ArgumentTypeError, "wait"),
    (("r", 1.0), {"fencing": 1}, ironlock.ArgumentTypeError, "fencing"),
    (("r", 1.0), {"retry_count": -1}, ironlock.InvalidArgumentError, "retry_count"),
    (("r", 1.0), {"retry_count": 1.5}, ironlock.ArgumentTypeError, "retry_count"),
    (("r", 1.0), {"retry_count": 10**40}, ironlock.InvalidArgumentError, "retry_count"),
]


@pytest.mark.parametrize("args,kwargs,exc,text", BAD_ACQUIRE)
def test_bad_acquire(
    manager: ironlock.LockManager, cluster3: Cluster, args: Any, kwargs: Dict[str, Any],
    exc: type, text: str,
) -> None:
    with pytest.raises(exc) as info:
        manager.acquire(*args, **kwargs)
    assert text in str(info.value)
    assert info.value.code == "INVALID_ARGUMENT"
    assert isinstance(info.value, ValueError)
    if exc is ironlock.ArgumentTypeError:
        assert isinstance(info.value, TypeError)


def test_bad_input_leaves_no_key(cluster3: Cluster) -> None:
    prefix = "bad-input-probe:"
    m = ironlock.LockManager(cluster3.urls, key_prefix=prefix, max_ttl=10.0, **FAST)
    for args, kwargs, exc, _ in BAD_ACQUIRE:
        with pytest.raises(exc):
            m.acquire(*args, **kwargs)
    for i in range(3):
        assert cluster3.cmd(i, "KEYS", prefix + "*") == []


BAD_SETTINGS = [
    ([], {}, ironlock.InvalidArgumentError, "nodes"),
    (["redis://127.0.0.1:1", "redis://127.0.0.1:1"], {}, ironlock.InvalidArgumentError, "duplicate"),
    (["not a url"], {}, ironlock.InvalidArgumentError, "nodes[0]"),
    ([""], {}, ironlock.InvalidArgumentError, "nodes[0]"),
    (["http://127.0.0.1:1"], {}, ironlock.IronlockConnectionError, "nodes[0]"),
    ([7], {}, ironlock.ArgumentTypeError, "nodes[0]"),
    (42, {}, ironlock.ArgumentTypeError, "nodes"),
    (["redis://127.0.0.1:1"], {"drift_factor": 0.5}, ironlock.InvalidArgumentError, "drift_factor"),
    (["redis://127.0.0.1:1"], {"drift_factor": math.nan}, ironlock.InvalidArgumentError, "drift_factor"),
    (["redis://127.0.0.1:1"], {"drift_factor": "x"}, ironlock.ArgumentTypeError, "drift_factor"),
    (["redis://127.0.0.1:1"], {"retry_delay": -0.1}, ironlock.InvalidArgumentError, "retry_delay"),
    (["redis://127.0.0.1:1"], {"retry_jitter": math.nan}, ironlock.InvalidArgumentError, "retry_jitter"),
    (["redis://127.0.0.1:1"], {"node_timeout": 0}, ironlock.InvalidArgumentError, "node_timeout"),
    (["redis://127.0.0.1:1"], {"connect_timeout": -1}, ironlock.InvalidArgumentError, "connect_timeout"),
    (["redis://127.0.0.1:1"], {"max_ttl": 0}, ironlock.InvalidArgumentError, "max_ttl"),
    (["redis://127.0.0.1:1"], {"min_validity": 100.0}, ironlock.InvalidArgumentError, "min_validity"),
    (["redis://127.0.0.1:1"], {"retry_count": -1}, ironlock.InvalidArgumentError, "retry_count"),
    (["redis://127.0.0.1:1"], {"retry_count": True}, ironlock.ArgumentTypeError, "retry_count"),
    (["redis://127.0.0.1:1"], {"restart_quarantine": 1}, ironlock.ArgumentTypeError, "restart_quarantine"),
    (["redis://127.0.0.1:1"], {"key_prefix": 3}, ironlock.ArgumentTypeError, "key_prefix"),
    (["redis://127.0.0.1:1"], {"max_extensions": -2}, ironlock.InvalidArgumentError, "max_extensions"),
    (["redis://127.0.0.1:1"], {"max_extensions": 10**40}, ironlock.InvalidArgumentError, "max_extensions"),
    (["redis://127.0.0.1:1"], {"retry_count": -(10**40)}, ironlock.InvalidArgumentError, "retry_count"),
    (["redis://127.0.0.1:1"], {"extension_threshold": 0}, ironlock.InvalidArgumentError, "extension_threshold"),
    (["redis://127.0.0.1:1"], {"drift_constant": "2ms"}, ironlock.ArgumentTypeError, "drift_constant"),
    (["redis://127.0.0.1:1"], {"replica_acks": 17}, ironlock.InvalidArgumentError,
     "replica_acks: must be 0 (off) to 16 replicas, got 17"),
    (["redis-cluster://127.0.0.1:1"], {"replica_acks": 1}, ironlock.InvalidArgumentError,
     "replica_acks: not available with a Redis Cluster voter (nodes[0]"),
]


@pytest.mark.parametrize("nodes,settings,exc,text", BAD_SETTINGS)
@pytest.mark.parametrize("cls", [ironlock.LockManager, ironlock.AsyncLockManager])
def test_bad_settings(cls: type, nodes: Any, settings: Dict[str, Any], exc: type, text: str) -> None:
    with pytest.raises(exc) as info:
        cls(nodes, **settings)
    assert text in str(info.value)


def test_unknown_setting_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="retry_cnt"):
        ironlock.LockManager(["redis://127.0.0.1:1"], retry_cnt=3)


@pytest.mark.parametrize("cls", [ironlock.LockManager, ironlock.AsyncLockManager])
@pytest.mark.parametrize(
    "given,meant",
    [("masters", "nodes"), ("retryCount", "retry_count"), ("node_timout", "node_timeout"),
     ("ssl_ca_cert", "ssl_ca_certs"), ("colour", None)],
)
def test_an_unknown_keyword_is_named_with_what_it_likely_meant(
    cls: type, given: str, meant: Optional[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # pottery spells the node list `masters`: the error names it, not a missing node list.
    monkeypatch.delenv("IRONLOCK_NODES", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(TypeError) as info:
        cls(**{given: ["redis://127.0.0.1:1"]})
    text = str(info.value)
    assert f'unexpected keyword argument "{given}"' in text, text
    assert "none given" not in text, text
    if meant is None:
        assert "did you mean" not in text, text
    else:
        assert f"did you mean {meant}?" in text, text


def test_settings_accept_timedelta_and_every_spec_name(cluster3: Cluster, name: str) -> None:
    settings = dict(
        retry_count=2, retry_delay=timedelta(milliseconds=20), retry_jitter=0.01,
        drift_factor=0.01, drift_constant=0.002, node_timeout=0.1, connect_timeout=1,
        max_ttl=30, restart_quarantine=False, replica_acks=0, reseat=True, key_prefix="pfx:",
        min_validity=0.0,
        max_extensions=None, extension_threshold=timedelta(seconds=1), fair=False,
        queue_timeout=timedelta(milliseconds=500),
        # Used by redis-sentinel:// voters only.
        sentinel_username="ironlock", sentinel_password="unused",
    )
    assert sorted(settings) == sorted(ironlock._native.SETTINGS)
    m = ironlock.LockManager(cluster3.urls, **settings)
    lock = m.acquire(name, 5)
    assert cluster3.cmd(0, "EXISTS", "pfx:" + name) + cluster3.cmd(1, "EXISTS", "pfx:" + name) >= 1
    assert lock.release()


def test_repr_never_shows_a_password() -> None:
    urls = ["redis://alice:s3cret@127.0.0.1:1", "redis://:hunter2@127.0.0.1:2/3"]
    m = ironlock.LockManager(urls, connect_timeout=0.2, restart_quarantine=False)
    for text in (repr(m), str(m), str(m.nodes)):
        assert "s3cret" not in text and "hunter2" not in text
        assert "***" in text
    with pytest.raises(ironlock.QuorumUnavailableError) as info:
        m.acquire("r", 1.0, retry_count=0)
    blob = repr(info.value) + str(info.value) + repr(info.value.report)
    assert "s3cret" not in blob and "hunter2" not in blob
    with pytest.raises(ironlock.InvalidArgumentError) as bad:
        ironlock.LockManager(["redis://u:s3cret@127.0.0.1:1", "redis://u:s3cret@127.0.0.1:1"])
    assert "s3cret" not in str(bad.value)


@pytest.mark.parametrize("cls", ALL_ERRORS)
def test_every_exception_pickles(cls: type) -> None:
    report = [NodeReport("redis://:***@h:1", "against"), NodeReport("redis://h:2", "timeout", "t/o")]
    e = cls("boom", report=report, elapsed=0.25, rounds=3)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is cls and str(back) == "boom"
    assert back.report == report and back.elapsed == 0.25 and back.rounds == 3
    assert back.code == cls.code
    assert isinstance(back, ironlock.IronlockError)


def test_raised_exceptions_pickle_with_their_report(manager: ironlock.LockManager, name: str) -> None:
    lock = manager.acquire(name, 5.0)
    with pytest.raises(ironlock.LockContendedError) as info:
        manager.acquire(name, 5.0, retry_count=0)
    back = pickle.loads(pickle.dumps(info.value))
    assert back.report == info.value.report and len(back.report) == 3
    assert lock.release()


def test_exception_hierarchy() -> None:
    assert issubclass(ironlock.InvalidArgumentError, ValueError)
    assert issubclass(ironlock.ArgumentTypeError, TypeError)
    assert issubclass(ironlock.IronlockConnectionError, ConnectionError)
    assert issubclass(ironlock.ForkedLockError, RuntimeError)
    codes = {c.code for c in ALL_ERRORS}
    assert codes == {"INTERNAL", "CONTENDED", "UNAVAILABLE", "LOST", "INVALID_ARGUMENT", "CONNECTION"}


def test_unresolvable_host_is_a_connection_error() -> None:
    with pytest.raises(ironlock.IronlockConnectionError) as info:
        ironlock.LockManager(["redis://no-such-host.invalid:6379"], connect_timeout=2.0)
    assert isinstance(info.value, ConnectionError) and info.value.code == "CONNECTION"
    assert "nodes[0]" in str(info.value)


def test_huge_but_finite_durations_do_not_crash(manager: ironlock.LockManager, name: str) -> None:
    lock = manager.acquire(name, 5.0)
    for wait in (1e9, 1e30):
        with pytest.raises(ironlock.IronlockError):
            manager.acquire(name, 5.0, wait=wait, retry_count=0)
    assert lock.release()


@pytest.mark.parametrize("password", ["Hunter2#Secret", "Hunter2?Secret", "Hunter2/Secret"])
def test_a_password_with_a_reserved_character_is_never_shown(password: str) -> None:
    url = f"redis://alice:{password}@127.0.0.1:6379"
    with pytest.raises(ironlock.InvalidArgumentError) as info:
        ironlock.LockManager([url])
    text = str(info.value) + repr(info.value)
    for run in ("Hun", "unt", "ter2", "Sec", "cret"):
        assert run not in text, text
    assert "nodes[0]" in text and "127.0.0.1:6379" in text
    assert "%23" in text and "%3F" in text and "%2F" in text
