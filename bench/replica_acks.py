#!/usr/bin/env python3
"""What replica acknowledgement (`replica_acks`) costs, side by side in one run.

    python3 bench/replica_acks.py [--smoke] [--reps 3]

Starts three redis-server masters, each with one replica (loopback ports), and runs the Rust
driver (bench/rust, release build: `ironlock-bench --client ironlock`) against the three masters
with `--replica-acks 0` and `--replica-acks 1`, interleaved repetitions: (a) sequential
acquire+release on distinct keys, (b) 64 concurrent workers. With acknowledgement every vote is
followed by `WAIT 1` on the same connection, so a grant costs one replication round trip more.
Prints a markdown table (median of the repetitions) and the ratio off/on. Standard library
only; every process it starts is stopped at exit.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "target", "release", "ironlock-bench")
# (label, workload letter, cycles, concurrency, time limit s)
FULL = [("a", "a", 3000, 1, 20), ("b", "b", 20000, 64, 20)]
SMOKE = [("a", "a", 200, 1, 10), ("b", "b", 1000, 16, 10)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, what, limit=10.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise SystemExit(f"replica_acks bench: {what} within {limit} s")


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=5).stdout


def start(port, tmp, extra):
    return subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", tmp, *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(acks, label, letter, cycles, conc, limit, urls, rep):
    cmd = [DRIVER, "--client", "ironlock", "--workload", letter, "--urls", ",".join(urls),
           "--cycles", str(cycles), "--concurrency", str(conc), "--time-limit", str(limit),
           "--prefix", f"acks:{os.getpid()}:{acks}:{label}:{rep}", "--replica-acks", str(acks)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + 60)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise SystemExit(f"replica_acks bench: {' '.join(cmd)} failed: {p.stderr.strip()[-400:]}")
    rec = json.loads(lines[-1])
    if rec.get("failed"):
        raise SystemExit(f"replica_acks bench: {rec['failed']} failed cycles with --replica-acks {acks}: {rec}")
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="a tiny run (CI)")
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default 3; smoke 1)")
    args = ap.parse_args()
    reps = args.reps or (1 if args.smoke else 3)
    plan = SMOKE if args.smoke else FULL
    for tool in ("redis-server", "redis-cli"):
        if not shutil.which(tool):
            raise SystemExit(f"replica_acks bench: {tool} missing (run scripts/setup)")
    subprocess.run(["cargo", "build", "--quiet", "--release", "--manifest-path",
                    os.path.join(ROOT, "bench", "rust", "Cargo.toml")], check=True,
                   env={**os.environ, "CARGO_TARGET_DIR": os.path.join(ROOT, "target")})
    tmp = tempfile.mkdtemp(prefix="ironlock-acks-")
    procs = []
    try:
        masters = [free_port() for _ in range(3)]
        for port in masters:
            procs.append(start(port, tmp, []))
        for port in masters:
            wait_for(lambda: cli(port, "PING").strip() == "PONG", f"master {port} up")
            replica = free_port()
            procs.append(start(replica, tmp, ["--replicaof", "127.0.0.1", str(port)]))
            wait_for(lambda: "master_link_status:up" in cli(replica, "INFO", "replication"),
                     f"replica of {port} linked")
        urls = [f"redis://127.0.0.1:{p}" for p in masters]
        results = {}
        for rep in range(1, reps + 1):
            for label, letter, cycles, conc, limit in plan:
                for acks in (0, 1):
                    rec = run(acks, label, letter, cycles, conc, limit, urls, rep)
                    results.setdefault((label, acks), []).append(rec)
                    print(f"  rep {rep} ({label}) replica_acks={acks}: {rec['cps']:.0f} cycles/s, "
                          f"p50 {rec['p50_us']:.0f} µs, p99 {rec['p99_us']:.0f} µs", file=sys.stderr)
        print("| workload | replica_acks | cycles/s | p50 µs | p99 µs | cost (off / on) |")
        print("| --- | --- | --- | --- | --- | --- |")
        for label, letter, cycles, conc, _ in plan:
            med = {acks: {k: statistics.median(r[k] for r in results[(label, acks)])
                          for k in ("cps", "p50_us", "p99_us")} for acks in (0, 1)}
            what = f"({label}) N = 3, {'sequential' if conc == 1 else f'{conc} concurrent'}, {cycles} cycles"
            for acks in (0, 1):
                m = med[acks]
                ratio = f"{med[0]['cps'] / m['cps']:.2f}× the time" if acks else "—"
                print(f"| {what} | {acks} | {m['cps']:.0f} | {m['p50_us']:.0f} | {m['p99_us']:.0f} | {ratio} |")
        print(f"\nreplica_acks bench: {reps} repetition(s), 3 masters with one replica each, release build")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
