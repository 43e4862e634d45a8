#!/usr/bin/env python3
"""An independent checker of lock histories (stdlib only; shares no code with ironlock).

A history is JSON lines. An optional first line is a header:
  {"header": true, "limit": 1, "fifo": "judged" | "reported", "fifo_slack": 0.1}
Every other line is one event of one process (a process runs one operation at a time):
  {"process": "w3", "op": "acquire" | "extend" | "release", "type": "invoke" | "ok" | "fail" |
   "unknown", "resource": "r", "token": "…", "fence": 17, "deadline": 12.5, "time": 10.2,
   "fair": true, "access": "read" | "write"}
`time` and `deadline` are read from ONE monotonic clock for all processes of the run. An `ok`
of acquire or extend carries the validity deadline the client computed; `token` names the lock.

`access` (on an acquire's invoke or ok) makes the lock one side of a read-write lock: reads share
with each other; a write, like a lock without `access`, shares with nobody.

Checks, per resource (limit K from the header, default 1):
  overlap   two holders' validity intervals overlap (limit 1), unless both are reads: a
            holder's interval runs from its acquire's ok to the earlier of its last deadline and
            the invoke of its release;
  permits   more than K holders valid at one instant (limit K > 1);
  fences    fences do not strictly increase in grant order (limit 1; grants without a fence
            are skipped): each grant's fence is above every earlier grant's, except that a
            read's need only be above every earlier write's (reads granted together may get
            theirs in either order);
  fifo      a fair waiter overtaken: A and B fair, A invoked more than fifo_slack before B, both
            granted, B granted before A (A was live: its acquire did not fail or give up).
An acquire whose outcome is `unknown` may hold the lock with an unknown deadline; it is not
counted as a holder (a checker can only judge intervals it knows) and is reported.
Exit code 1 if a judged check fails (fifo is judged only when the header says so).

  check.py HISTORY.jsonl [--json]      check one history
  check.py --self-test                 every corpus/good-* passes, every corpus/bad-* fails
"""

import json
import sys
from pathlib import Path


def load(path):
    header, events = {}, []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        e = json.loads(line)
        if e.get("header"):
            header = e
            continue
        for k in ("process", "op", "type", "time"):
            if k not in e:
                raise ValueError("%s:%d: no %r" % (path, n, k))
        events.append(e)
    return header, events


def operations(events):
    """Pairs each invoke with its completion (per process, in time order)."""
    ops, open_ = [], {}
    for e in sorted(events, key=lambda e: e["time"]):
        p = e["process"]
        if e["type"] == "invoke":
            if p in open_:
                raise ValueError("process %s invoked %s before %s completed" % (p, e["op"], open_[p]["op"]))
            open_[p] = {"process": p, "op": e["op"], "invoke": e["time"], "resource": e.get("resource"),
                        "fair": bool(e.get("fair")), "token": e.get("token"), "access": e.get("access")}
        else:
            o = open_.pop(p, None)
            if o is None or o["op"] != e["op"]:
                raise ValueError("process %s completed %s it never invoked" % (p, e["op"]))
            o.update(type=e["type"], done=e["time"], token=e.get("token", o["token"]),
                     fence=e.get("fence"), deadline=e.get("deadline"),
                     access=e.get("access", o["access"]))
            ops.append(o)
    for o in open_.values():  # never completed: unknown
        o.update(type="unknown", done=None, fence=None, deadline=None)
        ops.append(o)
    return ops


def holders(ops):
    """Each granted lock: resource, token, fence, start, end of validity."""
    grants = {}
    for o in ops:
        if o["op"] == "acquire" and o["type"] == "ok":
            grants[(o["resource"], o["token"])] = {
                "resource": o["resource"], "token": o["token"], "fence": o["fence"],
                "start": o["done"], "end": o["deadline"], "process": o["process"],
                "invoke": o["invoke"], "fair": o["fair"], "read": o["access"] == "read"}
    for o in ops:
        g = grants.get((o["resource"], o["token"]))
        if g is None:
            continue
        if o["op"] == "extend" and o["type"] == "ok" and o["deadline"] is not None:
            g["end"] = max(g["end"], o["deadline"])
    for o in ops:
        g = grants.get((o["resource"], o["token"]))
        if g is not None and o["op"] == "release":
            g["end"] = min(g["end"], o["invoke"])
    return sorted(grants.values(), key=lambda g: g["start"])


def check(header, events):
    limit = int(header.get("limit", 1))
    slack = float(header.get("fifo_slack", 0.0))
    ops = operations(events)
    found = {"overlap": [], "permits": [], "fences": [], "fifo": []}
    shared = 0
    by_res = {}
    for g in holders(ops):
        by_res.setdefault(g["resource"], []).append(g)
    for res, gs in by_res.items():
        if limit == 1:
            for i, a in enumerate(gs):
                for b in gs[i + 1:]:
                    if b["start"] >= a["end"] or b["start"] >= b["end"]:
                        continue
                    if a["read"] and b["read"]:
                        shared += 1
                    else:
                        found["overlap"].append("%s: %s [%.6f, %.6f) and %s [%.6f, %.6f)" % (
                            res, a["process"], a["start"], a["end"], b["process"], b["start"], b["end"]))
            top = top_excl = None  # (fence, process) of every earlier grant; of earlier writes
            for g in gs:
                f = g["fence"]
                if f is None:
                    continue
                bar = top_excl if g["read"] else top
                if bar is not None and f <= bar[0]:
                    found["fences"].append("%s: %s's fence %d after %s's %d" % (
                        res, g["process"], f, bar[1], bar[0]))
                if top is None or f > top[0]:
                    top = (f, g["process"])
                if not g["read"] and (top_excl is None or f > top_excl[0]):
                    top_excl = (f, g["process"])
        else:
            for g in gs:
                t = g["start"]
                valid = [h for h in gs if h["start"] <= t < h["end"]]
                if len(valid) > limit:
                    found["permits"].append("%s: %d holders valid at %.6f (limit %d): %s" % (
                        res, len(valid), t, limit, ", ".join(h["process"] for h in valid)))
        fair = [g for g in gs if g["fair"]]
        for a in fair:
            for b in fair:
                if a["invoke"] + slack < b["invoke"] and b["start"] < a["start"]:
                    found["fifo"].append("%s: %s (waiting since %.6f) overtaken by %s (since %.6f)" % (
                        res, a["process"], a["invoke"], b["process"], b["invoke"]))
    judged = ["overlap", "permits", "fences"] + (["fifo"] if header.get("fifo") == "judged" else [])
    unknown = sum(1 for o in ops if o["type"] == "unknown")
    summary = {k: len(v) for k, v in found.items()}
    summary.update(operations=len(ops), grants=sum(len(g) for g in by_res.values()),
                   unknown=unknown, judged=judged, shared_reads=shared,
                   ok=not any(found[k] for k in judged))
    return summary, found


def self_test(root):
    corpus = sorted((root / "corpus").glob("*.jsonl"))
    bad = 0
    for path in corpus:
        summary, _ = check(*load(path))
        want_ok = path.name.startswith("good-")
        status = "ok" if summary["ok"] == want_ok else "WRONG"
        if status == "WRONG":
            bad += 1
        print("%-5s %-34s %s" % (status, path.name, {k: summary[k] for k in ("overlap", "permits", "fences", "fifo")}))
    kinds = {p.name.split("-")[0] for p in corpus}
    if kinds != {"good", "bad"}:
        print("the corpus needs good-* and bad-* histories")
        bad += 1
    print("history checker self-test: %d histories, %d wrong" % (len(corpus), bad))
    return 1 if bad else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test(Path(__file__).resolve().parent)
    if len(argv) < 2:
        print(__doc__)
        return 2
    summary, found = check(*load(argv[1]))
    if "--json" in argv:
        print(json.dumps({"summary": summary, "found": {k: v[:5] for k, v in found.items()}}))
    else:
        for k, v in found.items():
            for line in v[:5]:
                print("%s: %s" % (k, line))
        print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
