"""Chaos worker (Python): contends for one resource through the ironlock package.

Configured by CHAOS_* environment variables (see run.py, which starts it). Each acquisition is
logged as one JSON line when the critical section ends: worker, token, fence, enter, leave,
deadline (time.monotonic(), i.e. CLOCK_MONOTONIC, comparable across processes), the referee
counter's value after INCR (must be 1) and whether the fenced write was accepted.

With CHAOS_RW=1 it takes the read or the write side of a read-write lock instead (1 in
CHAOS_RW_WRITES acquisitions writes, then pauses CHAOS_RW_PAUSE_MS), logs the side as `access`
and tells the referee which side entered (`referee` = the conflicting holders it saw: for a
write, other writers plus readers; for a read, writers; must be 0). CHAOS_RW_READ_NODES=k (the
negative control) takes reads through a manager of only the first k nodes: a reader that counts
itself granted by a minority.

With CHAOS_ELECT=1 it is a candidate of a leader election instead (elect(): see there).
"""

import ctypes
import json
import os
import signal
import sys
import threading
import time

import random

import ironlock

from resp import RW_ENTER, Resp, fenced_write


# How a leader's term ends (CHAOS_ELECT): resign (most), or die — the worker kills itself with
# SIGKILL while leading (the orchestrator starts it again): its leadership expires unresigned.
# A worker given CHAOS_DIE_AT=k also dies at its k-th leadership of its first life.
ENDINGS = ["resign"] * 9 + ["die"]


def elect(env: "os._Environ[str]", manager: "ironlock.LockManager", referee: Resp) -> int:
    """A candidate: campaigns for the election CHAOS_RESOURCE again and again (ttl
    CHAOS_TTL_MS, waiting at most CHAOS_WAIT_MS), leads for a random 50 ms to CHAOS_HOLD_MS —
    checking every 20 ms that it still leads, its deadline being the last validity seen while it
    did — then resigns or dies (ENDINGS). One line per leadership: term, token, value, enter,
    deadline, leave, how it ended, the referee's leaders counter after INCR (must be 1) and
    whether the referee accepted the term as a fence. An observer thread logs every change of
    leader it sees (`observed`: term and value, or null), in order."""
    wid = int(env["CHAOS_WORKER"])
    life = int(env.get("CHAOS_INCARNATION", "0"))  # restarts of this worker after a death
    end = float(env["CHAOS_END_MONO"])
    ttl = int(env["CHAOS_TTL_MS"]) / 1000.0
    hold = int(env["CHAOS_HOLD_MS"]) / 1000.0
    wait = int(env["CHAOS_WAIT_MS"]) / 1000.0
    counter, fence_key = env["CHAOS_COUNTER_KEY"], env["CHAOS_FENCE_KEY"]
    rng = random.Random("%s/%d/%d" % (env.get("CHAOS_SEED", "7"), wid, life))
    die_at = int(env.get("CHAOS_DIE_AT", "0")) if life == 0 else 0
    election = manager.election(env["CHAOS_RESOURCE"])
    write = threading.Lock()
    log = open(env["CHAOS_LOG"], "a", buffering=1)

    def put(rec: dict) -> None:
        rec.update(worker=wid, lang="py", life=life)
        with write:
            log.write(json.dumps(rec) + "\n")

    observer = election.observe()

    def watch() -> None:
        try:
            for leader in observer:
                put({"observed": None if leader is None else
                     {"term": leader.term, "value": leader.value}, "at": time.monotonic()})
        except ironlock.IronlockError as e:
            put({"observer_error": type(e).__name__, "at": time.monotonic()})

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    errors: dict = {}
    n = 0
    while time.monotonic() < end:
        left = end - time.monotonic()
        value = "w%d/%d/%d" % (wid, life, n)
        invoke = time.monotonic()
        try:
            me = election.campaign(value, ttl, wait=max(0.01, min(wait, left)))
        except ironlock.IronlockError as e:
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
            time.sleep(0.01)
            continue
        enter = time.monotonic()
        deadline = enter + me.validity
        n += 1
        rec = {"term": me.term, "token": me.token, "value": me.value, "invoke": invoke,
               "enter": enter, "deadline": deadline,
               "ending": "die" if n == die_at else rng.choice(ENDINGS)}
        if time.monotonic() >= end:
            rec["ending"] = "resign"  # the run is over: no death the orchestrator ignores
        rec["referee"] = referee.command("INCR", counter)
        rec["fenced_write"] = fenced_write(referee, fence_key, me.term)
        until = enter + rng.uniform(0.05, hold)
        while time.monotonic() < until:
            rem = me.validity
            if not me.is_leader:
                rec["lost"] = True
                break
            deadline = time.monotonic() + rem
            time.sleep(max(0.0, min(0.02, until - time.monotonic())))
        rec["deadline"] = deadline
        referee.command("DECR", counter)
        rec["leave"] = time.monotonic()
        if rec["ending"] == "die":
            put(rec)
            os.kill(os.getpid(), signal.SIGKILL)  # leading, unresigned: the orchestrator restarts us
        rec["resigned"] = me.resign()
        put(rec)
    observer.close()
    watcher.join(timeout=5)
    put({"summary": True, "acquired": n, "errors": errors})
    log.close()
    return 0


def main() -> int:
    # Die with the orchestrator, even when stopped (SIGKILL reaches stopped processes).
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    env = os.environ
    wid = int(env["CHAOS_WORKER"])
    end = float(env["CHAOS_END_MONO"])
    ttl = int(env["CHAOS_TTL_MS"]) / 1000.0
    hold = int(env["CHAOS_HOLD_MS"]) / 1000.0
    wait = int(env["CHAOS_WAIT_MS"]) / 1000.0
    margin = int(env["CHAOS_MARGIN_MS"]) / 1000.0
    self_stop = int(env.get("CHAOS_SELF_STOP", "0"))
    keep = env.get("CHAOS_KEEP") == "1"  # long holds under auto-extension
    limit = int(env.get("CHAOS_LIMIT", "0"))  # > 0: permits of a semaphore (SPEC §11)
    resource = env["CHAOS_RESOURCE"]
    counter = env["CHAOS_COUNTER_KEY"]
    fence_key = env["CHAOS_FENCE_KEY"]
    settings = dict(
        retry_count=3,
        retry_delay=0.05,
        node_timeout=int(env["CHAOS_NODE_TIMEOUT_MS"]) / 1000.0,
        max_ttl=int(env["CHAOS_MAX_TTL_MS"]) / 1000.0,
        restart_quarantine=env["CHAOS_QUARANTINE"] == "1",
        reseat=env.get("CHAOS_RESEAT", "1") == "1",
        fair=env.get("CHAOS_FAIR") == "1",  # every acquire waits in line (SPEC §10)
    )
    nodes = env["CHAOS_NODES"].split()
    manager = ironlock.LockManager(nodes, **settings)
    rw = env.get("CHAOS_RW") == "1"  # the read or the write side of a read-write lock
    writes_1_in = int(env.get("CHAOS_RW_WRITES", "4"))
    write_pause = int(env.get("CHAOS_RW_PAUSE_MS", "0")) / 1000.0
    rng = random.Random("%s/%d" % (env.get("CHAOS_SEED", "7"), wid))
    # The negative control: readers granted by a minority (a manager of the first k nodes only).
    minority = int(env.get("CHAOS_RW_READ_NODES", "0"))
    readers = ironlock.LockManager(nodes[:minority], **settings) if minority else manager
    referee = Resp(int(env["CHAOS_REFEREE_PORT"]))
    if env.get("CHAOS_ELECT") == "1":
        try:
            return elect(env, manager, referee)
        finally:
            manager.close()
    # The protected resource (storage.py): read-modify-write of its counter under the lock.
    storage = None
    if env.get("CHAOS_STORAGE_PORT"):
        import socket
        storage = socket.create_connection(("127.0.0.1", int(env["CHAOS_STORAGE_PORT"])))
        storage_in = storage.makefile("r")

    def store(line: str) -> str:
        storage.sendall((line + "\n").encode())
        return storage_in.readline().strip()
    errors: dict = {}
    n = 0
    with open(env["CHAOS_LOG"], "a", buffering=1) as log:
        while time.monotonic() < end:
            left = end - time.monotonic()
            invoke = time.monotonic()  # the history's invoke (tests/history)
            side = ("write" if rng.randrange(writes_1_in) == 0 else "read") if rw else None
            try:
                how = dict(wait=max(0.01, min(wait, left)), fencing=True)
                if side == "write":
                    lock = manager.acquire_write(resource, ttl, **how)
                elif side == "read":
                    lock = readers.acquire_read(resource, ttl, **how)
                elif limit:
                    lock = manager.acquire_permit(resource, limit, ttl, **how)
                else:
                    lock = manager.acquire(resource, ttl, **how)
            except ironlock.IronlockError as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                fail = {"worker": wid, "lang": "py", "fail": type(e).__name__,
                        "invoke": invoke, "at": time.monotonic()}
                if side:
                    fail["access"] = side
                log.write(json.dumps(fail) + "\n")
                time.sleep(0.01)
                continue
            enter = time.monotonic()
            deadline = enter + lock.remaining
            keeper = lock.keep_alive() if keep else None
            n += 1
            rec = {"worker": wid, "lang": "py", "token": lock.token, "fence": lock.fence,
                   "invoke": invoke, "enter": enter, "deadline": deadline,
                   "votes": [n.vote for n in lock.report]}
            if rw:
                rec["access"] = lock.access  # as the binding reports it
                rec["asked"] = side
            if rw and deadline - enter > margin:
                # The referee counts writers and readers: a write must see neither another
                # writer nor a reader, a read no writer.
                rec["referee"] = referee.command("EVAL", RW_ENTER, 2, counter + ":writers",
                                                 counter + ":readers", side)
                time.sleep(max(0.0, min(hold, deadline - margin - time.monotonic())))
                if side == "write":
                    rec["fenced_write"] = fenced_write(referee, fence_key, lock.fence)
                    referee.command("DECR", counter + ":writers")
                else:
                    referee.command("DECRBY", counter + ":readers", 1)
            elif rw:
                rec["skipped"] = True
            elif deadline - enter > margin:
                rec["referee"] = referee.command("INCR", counter)
                if storage is not None:
                    rec["read"] = int(store("READ"))
                if self_stop and n == self_stop:
                    os.kill(os.getpid(), signal.SIGSTOP)  # the orchestrator resumes us later
                    rec["self_stopped"] = True
                if keeper is not None:
                    # Work until the hold ends or the lock is lost; the deadline is the last
                    # validity seen while the lock was neither lost nor about to expire.
                    until = enter + hold
                    while time.monotonic() < until:
                        rem = lock.remaining
                        if lock.lost.is_set() or rem <= margin:
                            rec["lost"] = True
                            break
                        deadline = time.monotonic() + rem
                        rec["deadline"] = deadline
                        time.sleep(max(0.0, min(0.02, until - time.monotonic())))
                else:
                    time.sleep(max(0.0, min(hold, deadline - margin - time.monotonic())))
                if storage is not None:
                    rec["storage"] = store("WRITE %d %d" % (rec["read"] + 1, lock.fence))
                rec["fenced_write"] = fenced_write(referee, fence_key, lock.fence)
                referee.command("DECR", counter)
            else:
                rec["skipped"] = True  # too little validity left to do any work
            rec["leave"] = time.monotonic()
            if keeper is not None:
                keeper.stop()
            try:
                rec["released"] = lock.release()
            except ironlock.IronlockError as e:
                rec["released"] = False
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
            log.write(json.dumps(rec) + "\n")
            if side == "write" and write_pause:
                time.sleep(write_pause)  # a waiting writer holds back readers: let them in
        log.write(json.dumps({"worker": wid, "lang": "py", "summary": True,
                              "acquired": n, "errors": errors}) + "\n")
    if readers is not manager:
        readers.close()
    manager.close()
    referee.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
