"""Soak worker (Python): manager churn, then lock cycles through one manager while auto-extended
locks stay held. SOAK_MODE=sync uses LockManager, SOAK_MODE=async AsyncLockManager on one
asyncio loop. Driven by run.py; the protocol (SOAK_* environment, JSON lines) is in README.md.
"""

import asyncio
import ctypes
import json
import os
import signal
import sys
import time
from typing import Any, Dict, List, Optional

import ironlock


def env(name: str) -> str:
    value = os.environ.get(name)
    if value is None:
        print("soak worker.py: %s is not set (run tests/soak/run.py)" % name, file=sys.stderr)
        sys.exit(2)
    return value


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class Soak:
    """The settings, the counters and the bookkeeping shared by the sync and async loops."""

    def __init__(self) -> None:
        self.settings = dict(
            retry_count=0,
            node_timeout=int(env("SOAK_NODE_TIMEOUT_MS")) / 1000.0,
            max_ttl=int(env("SOAK_MAX_TTL_MS")) / 1000.0,
        )
        self.nodes = env("SOAK_NODES").split(",")
        self.ttl = int(env("SOAK_TTL_MS")) / 1000.0
        self.managers = int(env("SOAK_MANAGERS"))
        self.managers_marks = {int(m) for m in env("SOAK_MANAGERS_MARKS").split(",")}
        self.held = int(env("SOAK_HELD"))
        self.prefix = env("SOAK_PREFIX")
        self.control = env("SOAK_CONTROL")
        self.max_seconds = float(env("SOAK_MAX_SECONDS"))
        self.resources = ["%s:cycle:%d" % (self.prefix, i) for i in range(16)]
        self.done = self.granted = 0
        self.failed: Dict[str, int] = {}
        self.unclear: List[str] = []
        self.max_acquire = self.max_release = 0.0
        self.last = time.monotonic()
        self.started = 0.0

    def progress(self, phase: str, done: int) -> None:
        if time.monotonic() - self.last >= 0.5:
            if phase == "cycles":
                emit(event="progress", phase=phase, done=done, granted=self.granted,
                     failed=sum(self.failed.values()))
            else:
                emit(event="progress", phase=phase, done=done)
            self.last = time.monotonic()

    def start_cycles(self) -> None:
        self.started = time.monotonic()

    def stopping(self) -> bool:
        return self.done % 64 == 0 and (
            os.path.exists(os.path.join(self.control, "stop"))
            or time.monotonic() - self.started >= self.max_seconds)

    def attempted(self, since: float) -> None:
        """Counts one acquire call that started at `since` (monotonic seconds)."""
        self.max_acquire = max(self.max_acquire, time.monotonic() - since)
        self.done += 1

    def failure(self, resource: str, e: ironlock.IronlockError) -> None:
        self.failed[e.code] = self.failed.get(e.code, 0) + 1
        clear = isinstance(e, ironlock.QuorumUnavailableError) and resource in str(e)
        if not clear and len(self.unclear) < 5:
            self.unclear.append("%s: %s" % (type(e).__name__, e))

    def end(self, held_lost: int) -> None:
        emit(event="end", done=self.done, granted=self.granted, failed=self.failed,
             unclear=self.unclear, max_acquire_ms=self.max_acquire * 1000,
             max_release_ms=self.max_release * 1000, held=self.held, held_lost=held_lost)

    def waiting_for(self, name: str, since: float) -> bool:
        """True until the control file `name` appears or SOAK_MAX_SECONDS have passed."""
        return not (os.path.exists(os.path.join(self.control, name))
                    or time.monotonic() - since >= self.max_seconds)

    def mark(self, k: int) -> Optional[str]:
        """After iteration k of the managers loop: the control file to wait for when run.py wants
        a sample now, else None."""
        if k + 1 not in self.managers_marks:
            return None
        emit(event="managers_mark", done=k + 1)
        return "mark-%d" % (k + 1)


def run_sync(s: Soak) -> None:
    errors = 0
    for k in range(s.managers):
        try:
            m = ironlock.LockManager(s.nodes, **s.settings)
        except ironlock.IronlockError:
            errors += 1
        else:
            if k % 10 == 0:
                try:
                    m.acquire(s.prefix + ":churn", s.ttl).release()
                except ironlock.IronlockError:
                    pass
            m.close()
        s.progress("managers", k + 1)
        since = time.monotonic()
        mark = s.mark(k)
        while mark and s.waiting_for(mark, since):
            time.sleep(0.05)
    emit(event="managers_done", done=s.managers, manager_errors=errors)
    since = time.monotonic()
    while s.waiting_for("go", since):
        time.sleep(0.05)

    m = ironlock.LockManager(s.nodes, **s.settings)
    held = [m.acquire("%s:held:%d" % (s.prefix, i), s.ttl) for i in range(s.held)]
    keepers = [lock.keep_alive() for lock in held]
    s.start_cycles()
    while not s.stopping():
        resource = s.resources[s.done % 16]
        t = time.monotonic()
        try:
            lock = m.acquire(resource, s.ttl)
        except ironlock.IronlockError as e:
            s.attempted(t)
            s.failure(resource, e)
        else:
            s.attempted(t)
            s.granted += 1
            t = time.monotonic()
            lock.release()
            s.max_release = max(s.max_release, time.monotonic() - t)
        s.progress("cycles", s.done)
    lost = sum(1 for lock in held if lock.lost.is_set() or not lock.valid)
    for keeper, lock in zip(keepers, held):
        keeper.stop()
        lock.release()
    s.end(lost)
    since = time.monotonic()
    while s.waiting_for("quit", since):
        time.sleep(0.05)
    m.close()


async def run_async(s: Soak) -> None:
    errors = 0
    for k in range(s.managers):
        try:
            m = await ironlock.AsyncLockManager.connect(s.nodes, **s.settings)
        except ironlock.IronlockError:
            errors += 1
        else:
            if k % 10 == 0:
                try:
                    await (await m.acquire(s.prefix + ":churn", s.ttl)).release()
                except ironlock.IronlockError:
                    pass
            m.close()
        s.progress("managers", k + 1)
        since = time.monotonic()
        mark = s.mark(k)
        while mark and s.waiting_for(mark, since):
            await asyncio.sleep(0.05)
    emit(event="managers_done", done=s.managers, manager_errors=errors)
    since = time.monotonic()
    while s.waiting_for("go", since):
        await asyncio.sleep(0.05)

    m = await ironlock.AsyncLockManager.connect(s.nodes, **s.settings)
    held = [await m.acquire("%s:held:%d" % (s.prefix, i), s.ttl) for i in range(s.held)]
    keepers = [lock.keep_alive() for lock in held]
    s.start_cycles()
    while not s.stopping():
        resource = s.resources[s.done % 16]
        t = time.monotonic()
        try:
            lock = await m.acquire(resource, s.ttl)
        except ironlock.IronlockError as e:
            s.attempted(t)
            s.failure(resource, e)
        else:
            s.attempted(t)
            s.granted += 1
            t = time.monotonic()
            await lock.release()
            s.max_release = max(s.max_release, time.monotonic() - t)
        s.progress("cycles", s.done)
    lost = sum(1 for lock in held if lock.lost.is_set() or not lock.valid)
    for keeper, lock in zip(keepers, held):
        keeper.stop()
        await lock.release()
    s.end(lost)
    since = time.monotonic()
    while s.waiting_for("quit", since):
        await asyncio.sleep(0.05)
    m.close()


def main() -> int:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with run.py
    s = Soak()
    mode = env("SOAK_MODE")
    if mode == "sync":
        run_sync(s)
    elif mode == "async":
        asyncio.run(run_async(s))
    else:
        print("soak worker.py: SOAK_MODE must be sync or async", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
