"""Fixtures: real redis-server nodes from the project's harness binary (tests/harness)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, List

import pytest

REPO = Path(__file__).resolve().parents[2]
HARNESS = os.environ.get("IRONLOCK_HARNESS", str(REPO / "target" / "debug" / "ironlock-harness"))


class Cluster:
    """N fresh redis-server nodes on loopback; killed when the harness's stdin closes."""

    def __init__(
        self, nodes: int, extra: List[str] = [], sentinel: str = "", cluster: str = ""
    ) -> None:
        """`sentinel="R,S"`: a master with R replicas under S sentinels instead of N masters
        (`sentinel_url` names it; `master()` and `failover()` drive it). `cluster="M,R"`: a
        Redis Cluster of M masters with R replicas each (`cluster_url` names it)."""
        args = ["--", *extra] if extra else []
        start = ["--nodes", str(nodes)]
        if sentinel:
            start = ["--sentinel", sentinel]
        if cluster:
            start = ["--cluster", cluster]
        self.proc = subprocess.Popen(
            [HARNESS, *start, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{HARNESS} exited without starting nodes")
        info = json.loads(line)
        self.urls: List[str] = info["urls"]
        self.ports: List[int] = info["ports"]
        self.sentinel_url: str = info.get("sentinel_url", "")
        self.cluster_url: str = info.get("cluster_url", "")
        self._mutex = threading.Lock()

    def _ask(self, line: str) -> str:
        with self._mutex:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline().strip()
        if answer.startswith("error:"):
            raise RuntimeError(f"harness {line!r}: {answer}")
        return answer

    def cmd(self, node: int, *args: str) -> Any:
        """One Redis command on one node; the reply as JSON (str, int, None, list, dict)."""
        return json.loads(self._ask(" ".join(["cmd", str(node), *args])))

    def master(self) -> int:
        """The data node the sentinels name as master now."""
        return int(self._ask("master"))

    def failover(self) -> int:
        """SENTINEL FAILOVER, until the old master is a replica; the new master's index."""
        return int(self._ask("failover"))

    def control(self, op: str, node: int) -> None:
        """kill / start / restart / pause / resume."""
        assert self._ask(f"{op} {node}") == "ok"

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def cluster3() -> Iterator[Cluster]:
    c = Cluster(3)
    yield c
    c.close()


@pytest.fixture
def new_cluster() -> Iterator[Any]:
    made: List[Cluster] = []

    def make(n: int) -> Cluster:
        c = Cluster(n)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def name() -> str:
    """A resource name unique to this test run."""
    return f"py:{os.getpid()}:{time.monotonic_ns()}:{uuid.uuid4().hex[:8]}"


FAST = dict(restart_quarantine=False, retry_delay=0.02, retry_jitter=0.01)


def keys_left(cluster: Cluster, key: str) -> int:
    return sum(int(cluster.cmd(i, "EXISTS", key)) for i in range(len(cluster.urls)))


def wait_until(pred: Any, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())
