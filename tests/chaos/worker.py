"""Chaos worker (Python): contends for one resource through the ironlock package.

Configured by CHAOS_* environment variables (see run.py, which starts it). Each acquisition is
logged as one JSON line when the critical section ends: worker, token, fence, enter, leave,
deadline (time.monotonic(), i.e. CLOCK_MONOTONIC, comparable across processes), the referee
counter's value after INCR (must be 1) and whether the fenced write was accepted.
"""

import ctypes
import json
import os
import signal
import sys
import time

import ironlock

from resp import Resp, fenced_write


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
    manager = ironlock.LockManager(
        env["CHAOS_NODES"].split(),
        retry_count=3,
        retry_delay=0.05,
        node_timeout=int(env["CHAOS_NODE_TIMEOUT_MS"]) / 1000.0,
        max_ttl=int(env["CHAOS_MAX_TTL_MS"]) / 1000.0,
        restart_quarantine=env["CHAOS_QUARANTINE"] == "1",
        reseat=env.get("CHAOS_RESEAT", "1") == "1",
        fair=env.get("CHAOS_FAIR") == "1",  # every acquire waits in line (SPEC §10)
    )
    referee = Resp(int(env["CHAOS_REFEREE_PORT"]))
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
            try:
                how = dict(wait=max(0.01, min(wait, left)), fencing=True)
                if limit:
                    lock = manager.acquire_permit(resource, limit, ttl, **how)
                else:
                    lock = manager.acquire(resource, ttl, **how)
            except ironlock.IronlockError as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                log.write(json.dumps({"worker": wid, "lang": "py", "fail": type(e).__name__,
                                      "invoke": invoke, "at": time.monotonic()}) + "\n")
                time.sleep(0.01)
                continue
            enter = time.monotonic()
            deadline = enter + lock.remaining
            keeper = lock.keep_alive() if keep else None
            n += 1
            rec = {"worker": wid, "lang": "py", "token": lock.token, "fence": lock.fence,
                   "invoke": invoke, "enter": enter, "deadline": deadline,
                   "votes": [n.vote for n in lock.report]}
            if deadline - enter > margin:
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
        log.write(json.dumps({"worker": wid, "lang": "py", "summary": True,
                              "acquired": n, "errors": errors}) + "\n")
    manager.close()
    referee.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
