"""Leader election from Python against real nodes: candidates (threads, asyncio tasks) lead in
the order they queued with terms that grow; ``leader()`` shows the value and ``proclaim``
changes it; ``observe()`` yields nobody, then each leader in order, and ends when the manager or
the observer is closed; a campaign that is cancelled, interrupted or gives up leaves the line on
every node; a leader cut off from its nodes is told before its validity ends; the context
managers resign; bad input names its argument."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any, Dict, List, Optional

import pytest

import ironlock
from conftest import FAST, Cluster, wait_until


def queue_key(name: str) -> str:
    return f"{name}{{{name}}}:ironlock:queue"


def record_key(name: str) -> str:
    return f"{name}{{{name}}}:ironlock:leader"


def in_line(cluster: Cluster, name: str) -> List[int]:
    """How many candidates wait in the line of `name` on each node."""
    return [int(cluster.cmd(i, "ZCARD", queue_key(name))) for i in range(len(cluster.urls))]


def nobody_left(cluster: Cluster, name: str) -> bool:
    """No key, leader record or waiting candidate of `name` on any node."""
    return all(
        cluster.cmd(i, "EXISTS", name, record_key(name)) == 0
        and cluster.cmd(i, "ZCARD", queue_key(name)) == 0
        for i in range(len(cluster.urls))
    )


def on_quorum(cluster: Cluster, pred: Any) -> bool:
    return sum(1 for i in range(len(cluster.urls)) if pred(i)) >= len(cluster.urls) // 2 + 1


def queued(cluster: Cluster, name: str, n: int) -> bool:
    """`n` candidates wait in line on a quorum of nodes."""
    return on_quorum(cluster, lambda i: int(cluster.cmd(i, "ZCARD", queue_key(name))) == n)


def next_leader(changes: ironlock.Observer) -> ironlock.Leader:
    """The next leader the observer yields, skipping "nobody leads" (a read between a
    resignation and the next grant)."""
    for leader in changes:
        if leader is not None:
            return leader
    raise AssertionError("the observer ended")


def test_candidates_lead_in_queue_order_with_growing_terms(cluster3: Cluster, name: str) -> None:
    # A 3 s retry delay: a candidate granted soon after a resignation was woken by it.
    m = ironlock.LockManager(cluster3.urls, restart_quarantine=False, retry_delay=3.0)
    election = m.election(name)
    assert isinstance(election, ironlock.Election) and election.name == name
    assert repr(election) == f"<ironlock.Election {name!r}>"
    assert election.leader() is None
    changes = election.observe()
    assert next(changes) is None, "nobody leads yet"

    a = election.campaign("a:1", ttl=5.0)
    assert isinstance(a, ironlock.Leadership)
    assert a.is_leader and not a.is_lost and not a.resigned and a.name == name
    assert a.value == "a:1" and a.ttl == 5.0 and 4.0 < a.validity <= 5.0
    seen = next(changes)
    assert seen is not None and (seen.value, seen.term, seen.token) == ("a:1", a.term, a.token)

    granted: List[str] = []
    got: Dict[str, Any] = {}
    c_may_resign = threading.Event()

    def candidate(tag: str) -> None:
        try:
            if tag == "c":
                # `wait`: bounded, so that a failed assertion below cannot leave it waiting.
                with election.campaign("c:1", ttl=5.0, wait=30.0) as me:
                    got["c"], got["c_at"] = me, time.monotonic()
                    granted.append(tag)
                    c_may_resign.wait(10.0)
                return
            me = election.campaign(f"{tag}:1", ttl=5.0, wait=30.0)
            got[tag], got[f"{tag}_at"] = me, time.monotonic()
            granted.append(tag)
        except BaseException as e:  # reported by the assertions below
            got[f"{tag}_error"] = e

    b_thread = threading.Thread(target=candidate, args=("b",), daemon=True)
    b_thread.start()
    assert wait_until(lambda: queued(cluster3, name, 1), 5.0), in_line(cluster3, name)
    c_thread = threading.Thread(target=candidate, args=("c",), daemon=True)
    c_thread.start()
    assert wait_until(lambda: queued(cluster3, name, 2), 5.0), in_line(cluster3, name)

    a.proclaim("a:2")
    assert a.value == "a:2" and "value='a:2'" in repr(a)
    now = election.leader()
    assert now is not None and (now.value, now.term) == ("a:2", a.term)
    seen = next(changes)
    assert seen is not None and (seen.value, seen.term) == ("a:2", a.term)
    assert granted == [], "B and C wait while A leads"

    resigned_at = time.monotonic()
    assert a.resign() is True
    assert a.resigned and not a.is_leader
    with pytest.raises(ironlock.LockLostError):
        a.proclaim("a:3")
    b_thread.join(10.0)
    assert "b_error" not in got, got
    b = got["b"]
    assert b.term > a.term, (a.term, b.term)
    assert got["b_at"] - resigned_at < 2.0, "woken by the resignation, not a 3 s retry"
    assert granted == ["b"] and c_thread.is_alive(), "C queued after B"
    seen = next_leader(changes)
    assert (seen.value, seen.term, seen.token) == ("b:1", b.term, b.token)

    assert b.resign() is True
    assert wait_until(lambda: "c" in got or "c_error" in got, 10.0)
    assert "c_error" not in got, got
    c = got["c"]
    assert c.term > b.term
    seen = next_leader(changes)
    assert (seen.value, seen.term) == ("c:1", c.term)
    c_may_resign.set()
    c_thread.join(10.0)
    assert c.resigned, "leaving the with block resigns"
    assert granted == ["b", "c"] and a.term < b.term < c.term
    assert wait_until(lambda: nobody_left(cluster3, name), 3.0)
    assert election.leader() is None

    # The observer ends once the manager is closed.
    m.close()
    started = time.monotonic()
    rest = list(changes)
    assert all(x is None for x in rest), rest
    assert time.monotonic() - started < 3.0
    with pytest.raises(StopIteration):
        next(changes)


def test_leader_is_an_immutable_snapshot_and_proclaim_only_while_leading(
    cluster3: Cluster, name: str
) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST)
    election = m.election(name)
    with election.campaign("10.0.0.7:8080", 3.0) as me:
        leader = election.leader()
        assert isinstance(leader, ironlock.Leader)
        assert (leader.value, leader.term, leader.token) == ("10.0.0.7:8080", me.term, me.token)
        assert 2.0 < leader.validity <= 3.0
        assert repr(leader).startswith(f"Leader(value='10.0.0.7:8080', term={me.term}, token=")
        with pytest.raises(AttributeError):
            leader.value = "other"  # type: ignore[misc]
        # The record is beside the key on a quorum, with the value and the term.
        assert on_quorum(cluster3, lambda i: cluster3.cmd(i, "GET", name) == me.token)
        me.proclaim("10.0.0.7:9090")
        later = election.leader()
        assert later is not None and later.value == "10.0.0.7:9090" and later.term == me.term
        assert leader.value == "10.0.0.7:8080", "a Leader does not change once read"
        r = repr(me)
        assert r.startswith(f"<ironlock.Leadership election={name!r} term={me.term} ") and (
            "leader=True" in r
        ), r
    assert me.resigned and not me.is_leader and "leader=False" in repr(me)
    assert me.validity == 0.0
    with pytest.raises(ironlock.LockLostError, match="no longer the leader"):
        me.proclaim("late")
    assert me.resign() is False, "a second resignation finds nothing held"
    assert election.leader() is None

    # An exception in the block resigns too, and propagates.
    with pytest.raises(KeyError):
        with election.campaign("x", 3.0) as me2:
            raise KeyError("boom")
    assert me2.resigned
    assert wait_until(lambda: nobody_left(cluster3, name))
    m.close()


def test_a_thread_stops_another_threads_observer(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST)
    election = m.election(name)
    seen: List[Optional[ironlock.Leader]] = []
    changes = election.observe()
    assert repr(changes) == f"<ironlock.Observer {name!r} closed=False>"

    def follow() -> None:
        for leader in changes:
            seen.append(leader)

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    assert wait_until(lambda: seen == [None])
    me = election.campaign("x", 5.0)
    assert wait_until(lambda: len(seen) == 2)
    assert seen[1] is not None and seen[1].term == me.term
    changes.close()
    t.join(3.0)
    assert not t.is_alive(), "close() ends a next() waiting in another thread"
    assert changes.closed and "closed=True" in repr(changes)
    with pytest.raises(StopIteration):
        next(changes)
    # Leaving `with` closes it too; the manager still works.
    with election.observe() as again:
        first = next(again)
        assert first is not None and first.token == me.token
    assert again.closed and list(again) == []
    me.resign()
    m.close()


def test_ctrl_c_interrupts_a_campaign_and_it_leaves_the_line(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST, queue_timeout=2.0)
    election = m.election(name)
    leader = election.campaign("a", 10.0)
    sent: List[float] = []
    seen: List[bool] = []

    def interrupt() -> None:
        # Always interrupts, so that the campaign below cannot wait forever; whether the
        # candidate was seen in line first is asserted after it.
        seen.append(wait_until(lambda: queued(cluster3, name, 1), 10.0))
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        # `wait`: a bound of its own, should the interrupt never come.
        election.campaign("b", 10.0, wait=60.0)
    assert seen == [True], "the candidate was never seen in line"
    assert sent and time.monotonic() - sent[0] < 1.0
    assert wait_until(lambda: in_line(cluster3, name) == [0, 0, 0]), in_line(cluster3, name)
    # A campaign that gives up (wait=) leaves the line too.
    started = time.monotonic()
    with pytest.raises(ironlock.LockContendedError):
        election.campaign("c", 10.0, wait=0.3)
    assert time.monotonic() - started < 3.0
    assert wait_until(lambda: in_line(cluster3, name) == [0, 0, 0]), in_line(cluster3, name)
    assert leader.is_leader
    assert leader.resign() is True
    assert wait_until(lambda: nobody_left(cluster3, name))
    m.close()


def test_a_leader_cut_off_from_its_nodes_is_told_before_its_validity_ends(
    new_cluster: Any, name: str
) -> None:
    cluster = new_cluster(3)
    m = ironlock.LockManager(cluster.urls, **FAST, node_timeout=0.1)
    ttl = 2.0
    started = time.monotonic()
    me = m.election(name).campaign("x", ttl)
    assert not me.lost.is_set()
    cluster.control("pause", 0)
    cluster.control("pause", 1)
    try:
        assert me.lost.wait(5.0), "never told"
        at = time.monotonic() - started
        assert me.is_lost and not me.is_leader
        # The lock is valid ttl - drift from the start of the campaign's round; the loss is
        # told a tenth of the ttl before that (the slack leaves it well before, still).
        drift = ttl * 0.01 + 0.002
        assert at <= ttl - drift - ttl / 10 + 0.1, f"told at {at:.3f}s"
        with pytest.raises(ironlock.LockLostError):
            me.proclaim("y")
    finally:
        cluster.control("resume", 0)
        cluster.control("resume", 1)
    m.close()


def test_bad_input_names_the_argument(cluster3: Cluster, name: str) -> None:
    m = ironlock.LockManager(cluster3.urls, **FAST)
    with pytest.raises(ironlock.InvalidArgumentError, match="^name: empty election name"):
        m.election("")
    with pytest.raises(ironlock.InvalidArgumentError, match="^name: a name ending in"):
        m.election("job:ironlock:queue")
    with pytest.raises(ironlock.ArgumentTypeError, match="^name: expected a str"):
        m.election(7)  # type: ignore[arg-type]
    election = m.election(name)
    long = "v" * (ironlock.MAX_ELECTION_VALUE_LEN + 1)
    assert ironlock.MAX_ELECTION_VALUE_LEN == 65536
    with pytest.raises(ironlock.InvalidArgumentError, match="^value: at most 65536 bytes"):
        election.campaign(long, 1.0)
    with pytest.raises(ironlock.ArgumentTypeError, match="^value: expected a str"):
        election.campaign(42, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ironlock.InvalidArgumentError, match="^ttl: "):
        election.campaign("v", 0)
    with pytest.raises(ironlock.InvalidArgumentError, match="^ttl: "):
        election.campaign("v", -1.0)
    with pytest.raises(ironlock.ArgumentTypeError, match="^ttl: "):
        election.campaign("v", "10")  # type: ignore[arg-type]
    with pytest.raises(ironlock.ArgumentTypeError, match="^wait: "):
        election.campaign("v", 1.0, wait="soon")  # type: ignore[arg-type]
    # Nothing was queued or taken by the refusals.
    assert nobody_left(cluster3, name)
    with election.campaign() as me:  # value "" and a 30 s ttl by default
        assert me.value == "" and me.ttl == 30.0
        with pytest.raises(ironlock.InvalidArgumentError, match="^value: at most 65536 bytes"):
            me.proclaim(long)
        with pytest.raises(ironlock.ArgumentTypeError, match="^value: "):
            me.proclaim(None)  # type: ignore[arg-type]
        assert me.is_leader and me.value == ""
    assert wait_until(lambda: nobody_left(cluster3, name))
    m.close()


def test_asyncio_candidates_lead_in_order_and_observers_follow(cluster3: Cluster, name: str) -> None:
    async def main() -> Dict[str, Any]:
        m = await ironlock.AsyncLockManager.connect(
            cluster3.urls, restart_quarantine=False, retry_delay=3.0
        )
        election = m.election(name)
        assert isinstance(election, ironlock.AsyncElection)
        assert repr(election) == f"<ironlock.AsyncElection {name!r}>"
        assert await election.leader() is None
        seen: List[Optional[ironlock.Leader]] = []

        async def follow() -> None:
            async for leader in election.observe():
                seen.append(leader)

        follower = asyncio.create_task(follow())
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.02)
        assert seen == [None], seen

        a = await election.campaign("a:1", ttl=5.0)
        assert isinstance(a, ironlock.AsyncLeadership) and a.is_leader
        granted: List[str] = []
        c_may_resign = asyncio.Event()

        async def b() -> ironlock.AsyncLeadership:
            me = await election.campaign("b:1", ttl=5.0)
            granted.append("b")
            return me

        async def c() -> int:
            async with election.campaign("c:1", ttl=5.0) as me:
                granted.append("c")
                await c_may_resign.wait()
                return me.term

        b_task = asyncio.create_task(b())
        for _ in range(250):
            if queued(cluster3, name, 1):
                break
            await asyncio.sleep(0.02)
        c_task = asyncio.create_task(c())
        for _ in range(250):
            if queued(cluster3, name, 2):
                break
            await asyncio.sleep(0.02)
        assert queued(cluster3, name, 2), in_line(cluster3, name)

        await a.proclaim("a:2")
        now = await election.leader()
        assert now is not None and (now.value, now.term) == ("a:2", a.term)
        assert granted == []
        resigned_at = time.monotonic()
        assert await a.resign() is True
        with pytest.raises(ironlock.LockLostError):
            await a.proclaim("a:3")
        bl = await asyncio.wait_for(b_task, 10.0)
        woken = time.monotonic() - resigned_at
        assert bl.term > a.term and granted == ["b"] and not c_task.done()
        assert await bl.resign() is True
        for _ in range(500):
            if granted == ["b", "c"]:
                break
            await asyncio.sleep(0.02)
        assert granted == ["b", "c"]
        c_may_resign.set()
        c_term = await asyncio.wait_for(c_task, 10.0)
        assert c_term > bl.term
        # Closing the manager ends the async iteration.
        for _ in range(250):
            if seen and seen[-1] is None and any(s and s.value == "c:1" for s in seen):
                break
            await asyncio.sleep(0.02)
        m.close()
        await asyncio.wait_for(follower, 5.0)
        return {"seen": seen, "terms": [a.term, bl.term, c_term], "woken": woken}

    out = asyncio.run(main())
    a_term, b_term, c_term = out["terms"]
    assert a_term < b_term < c_term
    assert out["woken"] < 2.0, "woken by the resignation, not a 3 s retry"
    leaders = [(s.value, s.term) for s in out["seen"] if s is not None]
    # The leaders in order (A's proclaim may be seen as a change of its own). B resigns as soon
    # as it is granted: a reign that ends before the observer's next read is not delivered.
    names = [v for v, _ in leaders if v != "a:2"]
    assert names in (["a:1", "b:1", "c:1"], ["a:1", "c:1"]), leaders
    assert [t for _, t in leaders] == sorted(t for _, t in leaders)
    assert {t for _, t in leaders} in ({a_term, b_term, c_term}, {a_term, c_term})
    assert out["seen"][0] is None and out["seen"][-1] is None
    assert wait_until(lambda: nobody_left(cluster3, name))


def test_asyncio_cancelled_campaign_leaves_the_line(cluster3: Cluster, name: str) -> None:
    async def scenario() -> List[List[int]]:
        m = await ironlock.AsyncLockManager.connect(cluster3.urls, **FAST, queue_timeout=2.0)
        election = m.election(name)
        leader = await election.campaign("a", ttl=10.0)

        async def candidate() -> ironlock.AsyncLeadership:
            return await election.campaign("b", ttl=10.0)

        task = asyncio.create_task(candidate())
        for _ in range(250):
            if queued(cluster3, name, 1):
                break
            await asyncio.sleep(0.02)
        lines = [in_line(cluster3, name)]
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if in_line(cluster3, name) == [0, 0, 0]:
                break
            await asyncio.sleep(0.02)
        lines.append(in_line(cluster3, name))
        # A campaign that gives up after `wait` leaves it too.
        with pytest.raises(ironlock.LockContendedError):
            await election.campaign("c", ttl=10.0, wait=0.3)
        for _ in range(100):
            if in_line(cluster3, name) == [0, 0, 0]:
                break
            await asyncio.sleep(0.02)
        lines.append(in_line(cluster3, name))
        assert leader.is_leader
        assert await leader.resign() is True
        m.close()
        return lines

    lines = asyncio.run(scenario())
    assert sum(1 for n in lines[0] if n == 1) >= 2, lines
    assert lines[1:] == [[0, 0, 0], [0, 0, 0]], lines
    assert wait_until(lambda: nobody_left(cluster3, name))


def test_asyncio_loss_bad_input_and_context_managers(new_cluster: Any, name: str) -> None:
    cluster = new_cluster(3)

    async def main() -> float:
        m = await ironlock.AsyncLockManager.connect(cluster.urls, **FAST, node_timeout=0.1)
        election = m.election(name)
        with pytest.raises(ironlock.InvalidArgumentError, match="^value: at most 65536 bytes"):
            await election.campaign("v" * (ironlock.MAX_ELECTION_VALUE_LEN + 1), 1.0)
        with pytest.raises(ironlock.InvalidArgumentError, match="^ttl: "):
            await election.campaign("v", 0)
        with pytest.raises(ironlock.ArgumentTypeError, match="^value: "):
            election.campaign(b"v", 1.0)  # type: ignore[arg-type]
        # `async with` on an awaited leadership resigns too, and the exception propagates.
        with pytest.raises(KeyError):
            async with await election.campaign("k", 3.0) as me:
                assert me.is_leader
                raise KeyError("boom")
        assert me.resigned
        async with election.observe() as changes:
            assert await changes.__anext__() is None
        assert changes.closed
        with pytest.raises(StopAsyncIteration):
            await changes.__anext__()

        ttl = 2.0
        started = time.monotonic()
        me = await election.campaign("x", ttl)
        assert not me.lost.is_set()
        cluster.control("pause", 0)
        cluster.control("pause", 1)
        try:
            assert await asyncio.wait_for(me.lost.wait(), 5.0)
            at = time.monotonic() - started
            assert me.is_lost and not me.is_leader
            with pytest.raises(ironlock.LockLostError):
                await me.proclaim("y")
        finally:
            cluster.control("resume", 0)
            cluster.control("resume", 1)
        m.close()
        return at

    at = asyncio.run(main())
    ttl = 2.0
    drift = ttl * 0.01 + 0.002
    assert at <= ttl - drift - ttl / 10 + 0.1, f"told at {at:.3f}s"


def test_election_names_are_exported_and_documented() -> None:
    for cls in (
        "Election", "AsyncElection", "ElectionBase", "AsyncCampaign", "Leadership",
        "AsyncLeadership", "LeadershipBase", "Leader", "Observer", "AsyncObserver",
    ):
        assert cls in ironlock.__all__ and getattr(ironlock, cls).__doc__, cls
    assert "MAX_ELECTION_VALUE_LEN" in ironlock.__all__
    # The docstrings state the rules themselves.
    campaign = ironlock.Election.campaign.__doc__ or ""
    for rule in ("order they", "majority", "leaves the line", "resigns"):
        assert rule in campaign, rule
    assert "a tenth of its ttl" in (ironlock.Leadership.lost.__doc__ or "")
    assert "larger than every earlier" in (ironlock.LeadershipBase.term.__doc__ or "")
    assert "only while still leader" in (ironlock.Leadership.proclaim.__doc__ or "")
    assert "Cancelling the awaiting task" in (ironlock.AsyncElection.campaign.__doc__ or "")
    observe = ironlock.Election.observe.__doc__ or ""
    for rule in ("in order", "None when nobody leads", "manager is closed", "Terms only grow"):
        assert rule in observe, rule


def test_election_types_check(tmp_path: Any) -> None:
    import subprocess
    import sys

    use = tmp_path / "use_election.py"
    use.write_text(
        "from typing import List, Optional\n"
        "import ironlock\n"
        "def sync(m: ironlock.LockManager) -> int:\n"
        "    e: ironlock.Election = m.election('e')\n"
        "    with e.campaign('v', ttl=10, wait=1.5) as me:\n"
        "        me.proclaim('w')\n"
        "        lost: bool = me.lost.wait(0.1)\n"
        "    now: Optional[ironlock.Leader] = e.leader()\n"
        "    with e.observe() as changes:\n"
        "        seen: List[Optional[ironlock.Leader]] = [next(changes)]\n"
        "    return me.term\n"
        "async def aio(m: ironlock.AsyncLockManager) -> int:\n"
        "    e: ironlock.AsyncElection = m.election('e')\n"
        "    async with e.campaign('v', 10.0) as me:\n"
        "        await me.proclaim('w')\n"
        "    again: ironlock.AsyncLeadership = await e.campaign()\n"
        "    held: bool = await again.resign()\n"
        "    now: Optional[ironlock.Leader] = await e.leader()\n"
        "    async for leader in e.observe():\n"
        "        term: int = leader.term if leader else 0\n"
        "    return me.term\n"
        "def wrong(m: ironlock.LockManager) -> str:\n"
        "    return m.election('e').campaign(ttl='10').term\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(use)],
        capture_output=True, text=True, timeout=300,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    # Only the last function is wrong: a str ttl, and an int term returned as a str.
    assert [e.split(":")[1] for e in errors] == ["23", "23"], out.stdout + out.stderr
