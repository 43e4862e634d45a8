"""Driving the test harness and its redis-server nodes from Python test programs (tests/chaos,
tests/soak): an `ironlock-harness` process over its stdin protocol (see tests/harness/src/main.rs),
and cleanup callbacks that run on every exit path. Stdlib only.
"""

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
HARNESS = os.environ.get("IRONLOCK_HARNESS", str(REPO / "target" / "debug" / "ironlock-harness"))


def log(msg: str) -> None:
    print("[harness] %s" % msg, file=sys.stderr, flush=True)


class Cleanup:
    """Callbacks run once, last-registered first, from finally blocks and atexit."""

    def __init__(self) -> None:
        self.items: List[Callable[[], None]] = []
        self.lock = threading.Lock()

    def add(self, fn: Callable[[], None]) -> Callable[[], None]:
        with self.lock:
            self.items.append(fn)
        return fn

    def run(self, fn: Callable[[], None]) -> None:
        with self.lock:
            if fn not in self.items:
                return
            self.items.remove(fn)
        try:
            fn()
        except Exception as e:  # cleanup must go on
            log("cleanup error: %r" % e)

    def run_all(self) -> None:
        while True:
            with self.lock:
                if not self.items:
                    return
                fn = self.items[-1]
            self.run(fn)


CLEANUP = Cleanup()
atexit.register(CLEANUP.run_all)


def kill_proc(p: "subprocess.Popen[Any]") -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the worker and anything it started
        except OSError:
            p.kill()
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class Harness:
    """An ironlock-harness process: N redis-server nodes driven over its stdin protocol."""

    def __init__(self, n: int, extra: Sequence[str] = (), env: Optional[Dict[str, str]] = None,
                 sentinel: Optional[str] = None, cluster: Optional[str] = None):
        """`sentinel="R,S"`: a master with R replicas under S sentinels instead of n masters;
        `cluster="M,R"`: a Redis Cluster of M masters with R replicas each."""
        args = [HARNESS, "--nodes", str(n)]
        if sentinel:
            args = [HARNESS, "--sentinel", sentinel]
        if cluster:
            args = [HARNESS, "--cluster", cluster]
        if extra:
            args += ["--", *extra]
        self.p = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
            start_new_session=True,
        )
        self._cleanup = CLEANUP.add(self._close)
        info = json.loads(self._readline(30))
        self.ports: List[int] = info["ports"]
        self.urls: List[str] = info["urls"]
        self.sentinel_url: Optional[str] = info.get("sentinel_url")
        self.cluster_url: Optional[str] = info.get("cluster_url")
        self.lock = threading.Lock()

    def _readline(self, timeout: float) -> str:
        assert self.p.stdout is not None
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError("harness did not answer within %.0f s" % timeout)
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("harness exited (code %s)" % self.p.poll())
        return line.strip()

    def send(self, cmd: str, timeout: float = 20) -> str:
        with self.lock:
            assert self.p.stdin is not None
            self.p.stdin.write(cmd + "\n")
            self.p.stdin.flush()
            answer = self._readline(timeout)
        if answer.startswith("error:"):
            raise RuntimeError("harness %r: %s" % (cmd, answer))
        return answer

    def _close(self) -> None:
        try:
            if self.p.poll() is None and self.p.stdin is not None:
                self.p.stdin.write("quit\n")
                self.p.stdin.close()  # the harness kills every node when stdin closes
                self.p.wait(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        kill_proc(self.p)

    def close(self) -> None:
        CLEANUP.run(self._cleanup)
