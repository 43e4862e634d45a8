"""ironlock quick start: one lock over three Redis masters.

Run with node URLs in IRONLOCK_NODES (comma-separated), e.g.
    IRONLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
        python examples/basic.py
"""

import os

import ironlock

nodes = os.environ.get(
    "IRONLOCK_NODES", "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003"
).split(",")
# Restart quarantine: a node that started less than max_ttl + drift + 1 s ago (about a minute
# by default) does not count toward the quorum, so on freshly started redis-server nodes the
# first acquires fail with QuorumUnavailableError; nodes up for a minute are unaffected. For
# tests on fresh nodes pass restart_quarantine=False, as this example does when
# IRONLOCK_QUARANTINE=off (its own convention: the library reads no such variable).
manager = ironlock.LockManager(nodes, restart_quarantine=os.environ.get("IRONLOCK_QUARANTINE") != "off")

# 1. A context manager: acquire (waiting up to 5 s; without wait=, until acquired), run, release.
with manager.lock("invoice:42", ttl=10.0, wait=5.0) as lock:
    print(f"holding {lock.resources} for {lock.remaining:.1f} more seconds")

# 2. Explicit calls, with a fencing token to hand to the storage you protect.
lock = manager.acquire("invoice:42", 10.0, fencing=True)
try:
    print(f"fence {lock.fence}, valid: {lock.valid}")
    lock.extend(20.0)
finally:
    print("released while still held:", lock.release())

# 3. Long work: the lock is extended in the background; lock.lost is set at once if it is lost.
with manager.using("report:daily", ttl=5.0) as lock:
    for step in range(3):
        if lock.lost.is_set():
            break
        print("working, step", step)

# 4. Failures are exceptions carrying a per-node report.
held = manager.acquire("invoice:42", 10.0)
try:
    manager.acquire("invoice:42", 10.0, retry_count=0)
except ironlock.LockContendedError as e:
    print("busy:", [(n.url, n.vote) for n in e.report])
finally:
    held.release()
