#!/usr/bin/env python3
"""What one lock's extension costs a server at the least: server CPU per key, one node.

    bench/.peers/venv/bin/python bench/extension_floor.py [--server PATH ...] [--reps 3]
                                                          [--keys 100000] [--passes 4]

For each server binary (default: the machine's redis-server), starts one node on a loopback
port with K keys of 40-character tokens, and extends every key `passes` times, in a random
order, as fast as one connection can send, in each of these ways (a fresh node per way and
repetition, the ways interleaved):

- script/256, script/32: the library's batch script (`EXTEND_SAME` in core/src/scripts.rs, read
  from there): one `EVALSHA` per 256 (the keeper's chunk) or 32 keys, each key's token compared
  (`GET`) and its expiry set (`PEXPIRE`) on a match;
- ifeq/256: `SET key token IFEQ token PX ttl`, 256 to a pipeline: compare-and-set-expiry in one
  native command, where the server has it (Valkey 8.1+, Redis 8.4+; skipped elsewhere);
- pexpire/256: `PEXPIRE key ttl` with no comparison, 256 to a pipeline — NOT a safe extension
  (it would extend another holder's key): the cost of touching each key with one command at all.

The server's user+system CPU (/proc/PID/stat) over the extensions, divided by the keys
extended: microseconds per key per node (a lock extended at N nodes costs N times that; the
held-lock rows of bench/RESULTS.md sum the nodes). Requests are built before the clock starts.
Prints a markdown table: median (min–max) of the repetitions. Needs redis-py (the bench's venv);
every process it starts is stopped at exit. Loopback only.
"""

import argparse
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TTL_MS = 600_000
CLK = os.sysconf("SC_CLK_TCK")


def extend_same_source():
    with open(os.path.join(ROOT, "core", "src", "scripts.rs")) as f:
        text = f.read()
    m = re.search(r'pub const EXTEND_SAME_SOURCE: &str = r#"(.*?)"#;', text, re.S)
    if not m:
        sys.exit("EXTEND_SAME_SOURCE not found in core/src/scripts.rs")
    return m.group(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


class Node:
    def __init__(self, binary):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.r = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.r.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    sys.exit(f"{binary} did not start")
                time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def has_ifeq(binary):
    node = Node(binary)
    try:
        node.r.execute_command("SET", "extension-floor:probe", "x", "IFEQ", "y")
        return True
    except redis.ResponseError:
        return False
    finally:
        node.stop()


def run_once(binary, way, chunk, keys, tokens, order, passes, script):
    node = Node(binary)
    try:
        pipe = node.r.pipeline(transaction=False)
        for k, t in zip(keys, tokens):
            pipe.set(k, t, px=TTL_MS)
        pipe.execute()
        sha = node.r.script_load(script)
        batches = []
        for s in range(0, len(order), chunk):
            idx = order[s:s + chunk]
            if way == "script":
                args = [keys[i] for i in idx] + [TTL_MS] + [tokens[i] for i in idx]
                batches.append(("EVALSHA", sha, len(idx), *args))
            elif way == "ifeq":
                batches.append([("SET", keys[i], tokens[i], "IFEQ", tokens[i], "PX", TTL_MS)
                                for i in idx])
            else:
                batches.append([("PEXPIRE", keys[i], TTL_MS) for i in idx])
        before = cpu_seconds(node.proc.pid)
        done = 0
        for _ in range(passes):
            for b in batches:
                if way == "script":
                    replies = node.r.execute_command(*b)
                else:
                    pipe = node.r.pipeline(transaction=False)
                    for cmd in b:
                        pipe.execute_command(*cmd)
                    replies = pipe.execute()
                ok = sum(1 for x in replies if x in (1, True, b"OK"))
                if ok != len(replies):
                    sys.exit(f"{way}: {len(replies) - ok} of {len(replies)} keys not extended")
                done += len(replies)
        spent = cpu_seconds(node.proc.pid) - before
        info = node.r.info("server")
        version = info.get("valkey_version") or info.get("redis_version", "?")
        return 1e6 * spent / done, version
    finally:
        node.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", help="a redis-server or valkey-server binary")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--passes", type=int, default=4)
    args = ap.parse_args()
    servers = args.server or ["/usr/bin/redis-server"]
    script = extend_same_source()
    keys = [f"extension-floor:{i:07d}" for i in range(args.keys)]
    tokens = [os.urandom(20).hex() for _ in keys]
    order = list(range(args.keys))
    random.Random(1).shuffle(order)
    ways = [("script", 256), ("script", 32), ("ifeq", 256), ("pexpire", 256)]
    rows = []
    for binary in servers:
        todo = [w for w in ways if w[0] != "ifeq" or has_ifeq(binary)]
        got = {w: [] for w in todo}
        version = "?"
        for _ in range(args.reps):
            for way, chunk in todo:
                us, version = run_once(binary, way, chunk, keys, tokens, order, args.passes,
                                       script)
                got[(way, chunk)].append(us)
        base = statistics.median(got[("script", 256)])
        for (way, chunk), xs in got.items():
            med = statistics.median(xs)
            rows.append((f"{os.path.basename(binary)} {version}", f"{way}/{chunk}",
                         f"{med:.2f} ({min(xs):.2f}–{max(xs):.2f})", f"{med / base:.2f}",
                         f"{3 * med:.1f}"))
    print(f"{args.keys:,} keys, {args.passes} passes, {args.reps} repetitions; server CPU "
          "per key extended, one node\n")
    print("| server | way | µs per key per node | × script/256 | × 3 nodes, µs |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
