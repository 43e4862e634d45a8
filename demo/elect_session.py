#!/usr/bin/env python3
"""One leader election, three candidates in three languages, the leader killed twice.

    python3 demo/elect_session.py        (after scripts/build, or the test suites)

Starts three fresh redis-server nodes (the test harness), an observer (`ironlock leader NAME
--watch --json`) and three candidates that campaign for one election, in this order: the CLI
(`ironlock elect`), a Python process and a Node process, each printing its term when it leads.
Then it kills the leading process with SIGKILL — no resign: its keys stay until they expire —
twice, and prints who led, with which term, how long after each kill the next leader acted,
and what the observer saw. Exits 1 unless the leaders came in the order they queued with
growing terms, each after its predecessor's ttl at the most (plus a margin), and the observer
saw the same leaders in the same order.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "demo:jobs"
TTL_S = 2.0

PY_CANDIDATE = """
import json, sys, time, ironlock
m = ironlock.LockManager(sys.argv[1].split(","), restart_quarantine=False)
me = m.election(sys.argv[2]).campaign("python", ttl=float(sys.argv[3]))
print(json.dumps({"who": "python", "term": str(me.term)}), flush=True)
while True:
    time.sleep(1)
"""

NODE_CANDIDATE = """
const { LockManager } = await import(process.argv[1])
const m = await LockManager.connect(process.argv[2].split(','), { restartQuarantine: false })
const me = await m.election(process.argv[3]).campaign('node', Number(process.argv[4]))
console.log(JSON.stringify({ who: 'node', term: String(me.term) }))
setInterval(() => {}, 1000)
"""


def reader(name, proc, lines):
    for line in proc.stdout:
        lines.put((time.monotonic(), name, line.strip()))


def main():
    harness = subprocess.Popen([str(REPO / "target/debug/ironlock-harness"), "--nodes", "3"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    urls = json.loads(harness.stdout.readline())["urls"]
    env = dict(os.environ, IRONLOCK_NODES=",".join(urls))
    cli = str(REPO / "target/debug/ironlock")
    python = str(REPO / ".venv/bin/python")
    lines = queue.Queue()
    procs = {}

    def start(name, argv):
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
        procs[name] = p
        threading.Thread(target=reader, args=(name, p, lines), daemon=True).start()

    def next_line(who=None, timeout=TTL_S * 3):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                at, name, line = lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                break
            if who is None or name == who or (who == "candidate" and name != "observer"):
                return at, name, line
            seen.append((at, name, line))
        return None

    seen = []
    failures = []
    try:
        start("observer", [cli, "leader", NAME, "--watch", "--json", "--no-restart-quarantine"])
        start("cli", [cli, "elect", NAME, "--value", "cli", "--ttl", str(TTL_S),
                      "--no-restart-quarantine", "-q", "-c",
                      'echo "{\\"who\\": \\"cli\\", \\"term\\": \\"$IRONLOCK_TERM\\"}"; exec sleep 600'])
        leaders = []
        first = next_line("candidate")
        if not first:
            raise SystemExit("no candidate led")
        leaders.append((first[0], json.loads(first[2]), None))
        print("%-6s leads, term %s" % (leaders[0][1]["who"], leaders[0][1]["term"]))
        # The others queue behind it, in this order.
        start("python", [python, "-c", PY_CANDIDATE, ",".join(urls), NAME, str(TTL_S)])
        time.sleep(1.0)
        start("node", ["node", "--input-type=module", "-e", NODE_CANDIDATE,
                       str(REPO / "node/lib/index.mjs"), ",".join(urls), NAME, str(int(TTL_S * 1000))])
        time.sleep(1.0)
        for _ in range(2):
            who = leaders[-1][1]["who"]
            killed = time.monotonic()
            os.kill(procs[who].pid, signal.SIGKILL)  # the CLI's command dies with it
            print("killed %s (SIGKILL, no resign)" % who)
            got = next_line("candidate")
            if not got:
                failures.append("nobody led within %.0f s of killing %s" % (TTL_S * 3, who))
                break
            lead = json.loads(got[2])
            leaders.append((got[0], lead, got[0] - killed))
            print("%-6s leads, term %s, %.0f ms after the kill (ttl %.0f ms)"
                  % (lead["who"], lead["term"], (got[0] - killed) * 1000, TTL_S * 1000))
        time.sleep(0.5)
        order = [l[1]["who"] for l in leaders]
        terms = [int(l[1]["term"]) for l in leaders]
        if order != ["cli", "python", "node"]:
            failures.append("leaders came in the order %s, not the order they queued" % order)
        if any(b <= a for a, b in zip(terms, terms[1:])):
            failures.append("terms did not grow: %s" % terms)
        for _, lead, took in leaders[1:]:
            if took > TTL_S + 1.0:
                failures.append("%s led %.0f ms after the kill (ttl %.0f ms)"
                                % (lead["who"], took * 1000, TTL_S * 1000))
        # What the observer printed, in order (it may also say that nobody led for a moment).
        while True:
            try:
                seen.append(lines.get_nowait())
            except queue.Empty:
                break
        observed = []
        for _, name, line in sorted(seen):
            if name != "observer" or not line:
                continue
            rec = json.loads(line)  # {"leader": true, "value", "term", ...} or {"leader": false}
            value, term = rec.get("value"), rec.get("term")
            if rec.get("leader") and (not observed or observed[-1] != (value, str(term))):
                observed.append((value, str(term)))
        print("observer saw: %s" % ", ".join("%s (term %s)" % o for o in observed))
        if [o[0] for o in observed] != order or [int(o[1]) for o in observed] != terms:
            failures.append("the observer saw %s, the leaders were %s with terms %s"
                            % (observed, order, terms))
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        harness.stdin.write("quit\n")
        harness.stdin.close()
        harness.wait(timeout=30)
    for f in failures:
        print("FAIL: " + f)
    print("election session: %s" % ("ok" if not failures else "FAILED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
