"""Demo worker (Python): read-modify-write a shared counter under the lock until the deadline.

Settings come from the environment set by demo/run.py; prints one JSON summary line at the end.
"""
import json
import os
import socket
import sys
import time

import ironlock


class Referee:
    """A minimal RESP client for the referee node (plain GET/SET, no dependencies)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def call(self, *args: str):
        out = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
        self.sock.sendall(out.encode())
        line = self.file.readline().rstrip(b"\r\n")
        if line[:1] == b"$":
            n = int(line[1:])
            return None if n < 0 else self.file.read(n + 2)[:-2].decode()
        if line[:1] == b"-":
            raise RuntimeError(line.decode())
        return line[1:].decode()


def tally(votes: dict, report) -> None:
    for node in report or []:
        per = votes.setdefault(node.url, {})
        per[node.vote] = per.get(node.vote, 0) + 1


def main() -> None:
    env = os.environ
    manager = ironlock.LockManager(
        env["DEMO_NODES"].split(","), max_ttl=2.0, retry_delay=0.03, retry_jitter=0.02, node_timeout=0.1
    )
    referee = Referee(int(env["DEMO_REFEREE_PORT"]))
    resource, counter = env["DEMO_RESOURCE"], env["DEMO_COUNTER"]
    deadline = time.monotonic() + float(env["DEMO_SECONDS"])
    acquisitions, failures, votes = 0, {}, {}
    while time.monotonic() < deadline:
        try:
            lock = manager.acquire(resource, 1.0, wait=2.0)
        except ironlock.IronlockError as e:
            failures[e.code] = failures.get(e.code, 0) + 1
            tally(votes, e.report)
            continue
        value = int(referee.call("GET", counter) or 0)
        referee.call("SET", counter, str(value + 1))
        acquisitions += 1
        tally(votes, lock.report)
        lock.release()
    print(json.dumps({"name": env["DEMO_NAME"], "language": "python", "acquisitions": acquisitions,
                      "failures": failures, "votes": votes}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
