"""Runs every scenario of tests/corpus/scenarios with the same expectations as the Rust core."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import ironlock
from conftest import REPO, Cluster

SCENARIOS = sorted((REPO / "tests" / "corpus" / "scenarios").glob("*.json"))

DURATIONS = {
    "retry_delay_ms": "retry_delay",
    "retry_jitter_ms": "retry_jitter",
    "drift_constant_ms": "drift_constant",
    "node_timeout_ms": "node_timeout",
    "connect_timeout_ms": "connect_timeout",
    "max_ttl_ms": "max_ttl",
    "min_validity_ms": "min_validity",
    "extension_threshold_ms": "extension_threshold",
    "queue_timeout_ms": "queue_timeout",
}
PLAIN = {
    "retry_count", "drift_factor", "restart_quarantine", "reseat", "key_prefix", "max_extensions",
    "fair",
}
NODE_OPS = {"kill", "start", "restart", "pause", "resume"}

# The fields each op takes (tests/corpus/README.md); `op` and `why` (a comment) go with every op.
# A runner fails on an op or field it does not know.
FIELDS = {
    "acquire": {
        "as", "resources", "ttl_ms", "options", "expect", "expect_votes", "expect_rounds",
        "expect_message", "limit", "access",
    },
    "extend": {"lock", "ttl_ms", "expect"},
    "finish": {"lock", "expect"},
    "keep_alive": {"lock"},
    "expect_lost": {"lock", "lost"},
    "release": {"lock", "expect_held"},
    "expect_valid": {"lock", "valid"},
    "expect_fence": {"lock", "present"},
    "expect_fence_increasing": {"locks"},
    "redis": {"node", "args", "expect", "expect_gt"},
    "sleep": {"ms"},
    "campaign": {"as", "election", "value", "ttl_ms", "wait_ms", "expect", "expect_message"},
    "proclaim": {"leadership", "value", "expect"},
    "resign": {"leadership"},
    "leader": {"election", "expect"},
    "expect_leading": {"leadership", "leading"},
    "expect_terms_increasing": {"leaderships"},
    **{op: {"node"} for op in NODE_OPS},
}
SCENARIO_FIELDS = {"name", "description", "nodes", "settings", "steps"}

# Read-only commands of `redis` steps: a mismatch is retried for up to 200 ms (the corpus README:
# requests a round stopped waiting for reach the other nodes in the background).
READ_ONLY = {"GET", "EXISTS", "PTTL", "TTL", "DBSIZE", "ZCARD", "HGET"}


def redis_step(cluster: Cluster, step: Dict[str, Any], locks: Dict[str, Any]) -> Any:
    def matches(got: Any) -> bool:
        if "expect" in step and got != expand(step["expect"], locks):
            return False
        if "expect_gt" in step and not (isinstance(got, int) and got > step["expect_gt"]):
            return False
        return True

    got = cluster.cmd(step["node"], *step["args"])
    if step["args"][0].upper() in READ_ONLY:
        for _ in range(40):
            if matches(got):
                break
            time.sleep(0.005)
            got = cluster.cmd(step["node"], *step["args"])
    return got


def settings(raw: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"restart_quarantine": False, "retry_count": 0}
    for key, value in raw.items():
        if key in DURATIONS:
            out[DURATIONS[key]] = value / 1000.0
        elif key in PLAIN:
            out[key] = value
        else:
            raise AssertionError(f"unknown setting {key}")
    return out


def check_votes(step: Dict[str, Any], report: Optional[List[ironlock.NodeReport]], ctx: str) -> None:
    expected = step.get("expect_votes")
    if not expected:
        return
    assert report is not None, f"{ctx}: no report"
    for vote, count in expected.items():
        got = sum(1 for n in report if n.vote == vote)
        assert got == count, f"{ctx}: {vote} votes {got} != {count} in {report}"


def check_message(step: Dict[str, Any], message: Optional[str], urls: List[str], ctx: str) -> None:
    """`expect_message`: each text is in str(e), where {nodeI} stands for node I's host:port."""
    for part in step.get("expect_message", []):
        assert message is not None, f"{ctx}: no error message"
        for i, url in enumerate(urls):
            part = part.replace(f"{{node{i}}}", url.rsplit("/", 1)[-1].rsplit("@", 1)[-1])
        assert part in message, f"{ctx}: {part!r} not in {message!r}"


def expand(value: Any, locks: Dict[str, Any]) -> Any:
    """`"$a"` stands for the token of lock (or leadership) `a`."""
    if isinstance(value, str) and value.startswith("$"):
        return locks[value[1:]].token
    return value


def test_corpus_is_complete() -> None:
    assert len(SCENARIOS) >= 20


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    sc = json.loads(path.read_text())
    cluster = Cluster(sc["nodes"])
    try:
        run(sc, cluster)
    finally:
        cluster.close()


def run(sc: Dict[str, Any], cluster: Cluster) -> None:
    manager = ironlock.LockManager(cluster.urls, **settings(sc.get("settings", {})))
    locks: Dict[str, ironlock.Lock] = {}
    leaders: Dict[str, ironlock.Leadership] = {}
    keepers: List[Any] = []
    unknown_top = set(sc) - SCENARIO_FIELDS
    assert not unknown_top, f"{sc['name']}: unknown fields {sorted(unknown_top)}"
    for i, step in enumerate(sc["steps"]):
        op = step["op"]
        ctx = f"{sc['name']} step {i} ({op})"
        assert op in FIELDS, f"{ctx}: unknown op {op}"
        unknown_fields = set(step) - FIELDS[op] - {"op", "why"}
        assert not unknown_fields, f"{ctx}: unknown fields {sorted(unknown_fields)}"
        if op == "acquire":
            opts = step.get("options", {})
            unknown = set(opts) - {"fencing", "wait_ms", "retry_count", "fair", "min_hold_ms"}
            assert not unknown, f"{ctx}: unknown options {sorted(unknown)}"
            kwargs: Dict[str, Any] = {"fencing": opts.get("fencing", False)}
            if "wait_ms" in opts:
                kwargs["wait"] = opts["wait_ms"] / 1000.0
            if "retry_count" in opts:
                kwargs["retry_count"] = opts["retry_count"]
            if "fair" in opts:
                kwargs["fair"] = opts["fair"]
            if "min_hold_ms" in opts:
                kwargs["min_hold"] = opts["min_hold_ms"] / 1000.0
            access = step.get("access")
            assert access in (None, "read", "write"), f"{ctx}: unknown access {access!r}"
            assert access is None or "limit" not in step, f"{ctx}: both limit and access"
            try:
                if "limit" in step:  # a permit of the semaphore resources[0] (SPEC §11)
                    lock = manager.acquire_permit(
                        step["resources"][0], step["limit"], step["ttl_ms"] / 1000.0, **kwargs
                    )
                elif access == "read":  # the read side of the read-write lock resources[0]
                    lock = manager.acquire_read(
                        step["resources"][0], step["ttl_ms"] / 1000.0, **kwargs
                    )
                elif access == "write":  # its write side
                    lock = manager.acquire_write(
                        step["resources"][0], step["ttl_ms"] / 1000.0, **kwargs
                    )
                else:
                    lock = manager.acquire(step["resources"], step["ttl_ms"] / 1000.0, **kwargs)
            except ironlock.IronlockError as e:
                assert e.code == step["expect"], f"{ctx}: {e!r} {e.report}"
                check_votes(step, e.report, ctx)
                check_message(step, str(e), cluster.urls, ctx)
                rounds, elapsed = e.rounds, e.elapsed
            else:
                assert step["expect"] == "ok", f"{ctx}: granted {lock!r}"
                check_votes(step, lock.report, ctx)
                check_message(step, None, cluster.urls, ctx)
                locks[step["as"]] = lock
                rounds, elapsed = lock.rounds, lock.elapsed
            if "expect_rounds" in step:
                assert rounds == step["expect_rounds"], f"{ctx}: {rounds} rounds"
                assert elapsed is not None and elapsed > 0, f"{ctx}: elapsed {elapsed}"
        elif op == "finish":
            try:
                locks[step["lock"]].finish()
                got = "ok"
            except ironlock.IronlockError as e:
                got = e.code
            assert got == step["expect"], ctx
        elif op == "keep_alive":
            keepers.append(locks[step["lock"]].keep_alive())
        elif op == "expect_lost":
            assert locks[step["lock"]].lost.is_set() == step["lost"], ctx
        elif op == "extend":
            lock = locks[step["lock"]]
            try:
                lock.extend(step["ttl_ms"] / 1000.0)
                got = "ok"
            except ironlock.IronlockError as e:
                got = e.code
            assert got == step["expect"], ctx
        elif op == "release":
            held = locks[step["lock"]].release()
            assert held == step["expect_held"], ctx
        elif op == "expect_valid":
            assert locks[step["lock"]].valid == step["valid"], ctx
        elif op == "expect_fence":
            assert (locks[step["lock"]].fence is not None) == step["present"], ctx
        elif op == "expect_fence_increasing":
            fences = [locks[n].fence for n in step["locks"]]
            assert all(f is not None for f in fences), ctx
            assert all(a < b for a, b in zip(fences, fences[1:])), f"{ctx}: {fences}"  # type: ignore[operator]
        elif op == "redis":
            got = redis_step(cluster, step, {**locks, **leaders})
            if "expect" in step:
                assert got == expand(step["expect"], {**locks, **leaders}), f"{ctx}: {step['args']}"
            if "expect_gt" in step:
                assert int(got) > step["expect_gt"], f"{ctx}: {got}"
        elif op == "campaign":
            wait = step["wait_ms"] / 1000.0 if "wait_ms" in step else None
            try:
                leadership = manager.election(step["election"]).campaign(
                    step["value"], step["ttl_ms"] / 1000.0, wait=wait
                )
            except ironlock.IronlockError as e:
                assert e.code == step["expect"], f"{ctx}: {e!r}"
                check_message(step, str(e), cluster.urls, ctx)
            else:
                assert step["expect"] == "ok", f"{ctx}: granted {leadership!r}"
                leaders[step["as"]] = leadership
        elif op == "proclaim":
            try:
                leaders[step["leadership"]].proclaim(step["value"])
                got = "ok"
            except ironlock.IronlockError as e:
                got = e.code
            assert got == step["expect"], ctx
        elif op == "resign":
            leaders[step["leadership"]].resign()
        elif op == "expect_leading":
            assert leaders[step["leadership"]].is_leader == step["leading"], ctx
        elif op == "expect_terms_increasing":
            terms = [leaders[n].term for n in step["leaderships"]]
            assert all(a < b for a, b in zip(terms, terms[1:])), f"{ctx}: {terms}"
        elif op == "leader":
            want = step["expect"]
            try:
                who = manager.election(step["election"]).leader()
            except ironlock.IronlockError as e:
                assert e.code == want, f"{ctx}: {e!r}"
            else:
                if want is None:
                    assert who is None, f"{ctx}: {who!r} leads, want nobody"
                else:
                    assert isinstance(want, dict) and who is not None, f"{ctx}: {who!r}, want {want}"
                    mine = leaders[want["leadership"]]
                    assert (who.value, who.term, who.token) == (want["value"], mine.term, mine.token), (
                        f"{ctx}: {who!r}"
                    )
                    assert who.validity > 0, f"{ctx}: {who!r}"
        elif op in NODE_OPS:
            cluster.control(op, step["node"])
        elif op == "sleep":
            time.sleep(step["ms"] / 1000.0)
        else:
            raise AssertionError(f"{ctx}: unknown op {op}")
    manager.close()
