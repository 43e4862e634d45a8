#!/usr/bin/env python3
"""The main job: four languages contend for one lock on 5 local Redis nodes.

Starts 5 redis-server nodes and a referee node (tests/harness), runs workers written in Rust,
C, Python and Node at once, each doing a read-modify-write on a shared counter (on the referee)
under the lock, kills node 2 with -9 and restarts it empty mid-run, then prints a table:
acquisitions per language, per-node votes, votes refused by restart quarantine, and the final
counter, which must equal the total number of acquisitions (0 lost updates). Exits non-zero if
any check fails. Every process it starts is stopped on every exit path.

usage: demo/run.py [--seconds N] [--short] [--per-language K]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "target" / "debug"
MAX_TTL_S = 2.0  # quarantine of a (re)started node: max_ttl + drift (22 ms) + 1 s
VOTES = ["for", "against", "error", "timeout", "not_eligible", "pending"]


class Harness:
    """Drives one ironlock-harness process (its nodes die with it)."""

    def __init__(self, nodes: int):
        exe = os.environ.get("IRONLOCK_HARNESS", str(TARGET / "ironlock-harness"))
        self.proc = subprocess.Popen([exe, "--nodes", str(nodes)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("demo: the harness could not start redis-server")
        info = json.loads(line)
        self.urls, self.ports = info["urls"], info["ports"]

    def send(self, command: str) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if answer.startswith("error"):
            raise RuntimeError(f"harness {command!r}: {answer}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def build_c_worker() -> Path:
    out = ROOT / "target" / "demo" / "worker-c"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-O2", "-o", str(out), str(ROOT / "demo" / "worker.c"),
                    f"-I{ROOT / 'include'}", f"-L{TARGET}", "-lironlock", f"-Wl,-rpath,{TARGET}"], check=True)
    return out


def worker_commands() -> dict:
    venv_python = ROOT / ".venv" / "bin" / "python"
    return {
        "rust": [str(TARGET / "examples" / "demo_worker")],
        "c": [str(build_c_worker())],
        "python": [str(venv_python if venv_python.exists() else sys.executable), str(ROOT / "demo" / "worker.py")],
        "node": ["node", str(ROOT / "demo" / "worker.mjs")],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=12.0, help="how long the workers contend (default 12)")
    ap.add_argument("--short", action="store_true", help="a quick run (6 s), used by the test suite")
    ap.add_argument("--per-language", type=int, default=2, help="workers per language (default 2)")
    args = ap.parse_args()
    seconds = 6.0 if args.short else args.seconds
    if seconds < 4 or not 1 <= args.per_language <= 8:
        ap.error("--seconds must be >= 4 and --per-language in 1..8")

    commands = worker_commands()
    nodes = Harness(5)
    referee = Harness(1)
    workers = []
    log = ROOT / "target" / "demo" / "workers.log"
    log_file = open(log, "w")
    try:
        print(f"started 5 redis-server nodes on ports {nodes.ports} and a referee on {referee.ports[0]}")
        print(f"fresh nodes have uptime 0 and are quarantined like restarted ones: waiting {MAX_TTL_S + 1.1:.1f} s")
        time.sleep(MAX_TTL_S + 1.1)
        run_id = f"{os.getpid()}-{time.time_ns()}"
        env = dict(os.environ, DEMO_NODES=",".join(nodes.urls), DEMO_REFEREE_PORT=str(referee.ports[0]),
                   DEMO_RESOURCE=f"demo:resource:{run_id}", DEMO_COUNTER=f"demo:counter:{run_id}",
                   DEMO_SECONDS=str(seconds), DEMO_NODE_PACKAGE=str(ROOT / "node" / "lib" / "index.mjs"))
        for language, cmd in commands.items():
            for k in range(args.per_language):
                name = f"{language}-{k}"
                p = subprocess.Popen(cmd, env=dict(env, DEMO_NAME=name), stdout=subprocess.PIPE,
                                     stderr=log_file, text=True)
                workers.append((name, language, p))
        print(f"{len(workers)} workers ({', '.join(commands)}) contend for one resource for {seconds:.0f} s")
        start = time.monotonic()
        kill_at, restart_at = seconds / 3, seconds / 3 + 0.7
        killed = restarted = False
        next_report = 1.0
        while time.monotonic() - start < seconds + 0.5:
            time.sleep(0.1)
            t = time.monotonic() - start
            if not killed and t >= kill_at:
                nodes.send("kill 2")
                killed = True
                print(f"  t={t:4.1f}s  node 2 killed (-9)")
            elif killed and not restarted and t >= restart_at:
                nodes.send("start 2")
                restarted = True
                print(f"  t={t:4.1f}s  node 2 restarted empty: its votes do not count for {MAX_TTL_S + 1.02:.2f} s")
            if t >= next_report:
                value = json.loads(referee.send(f"cmd 0 GET {env['DEMO_COUNTER']}")) or 0
                print(f"  t={t:4.1f}s  counter {value}")
                next_report += 1.0
        results, failed = [], []
        for name, language, p in workers:
            try:
                out, _ = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                out = ""
            lines = [ln for ln in (out or "").splitlines() if ln.startswith("{")]
            if p.returncode != 0 or not lines:
                failed.append(f"{name} exited {p.returncode}")
                continue
            results.append(json.loads(lines[-1]))
        counter = int(json.loads(referee.send(f"cmd 0 GET {env['DEMO_COUNTER']}")) or 0)
    finally:
        for _, _, p in workers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, _, p in workers:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        nodes.close()
        referee.close()
        log_file.close()

    by_language = {}
    for r in results:
        agg = by_language.setdefault(r["language"], {"workers": 0, "acquisitions": 0, "failures": {}})
        agg["workers"] += 1
        agg["acquisitions"] += r["acquisitions"]
        for code, n in r["failures"].items():
            agg["failures"][code] = agg["failures"].get(code, 0) + n
    total = sum(r["acquisitions"] for r in results)
    print("\n| language | workers | acquisitions | gave up (no lock within 2 s) |\n| --- | ---: | ---: | --- |")
    for language in commands:
        agg = by_language.get(language, {"workers": 0, "acquisitions": 0, "failures": {}})
        gave_up = ", ".join(f"{k} {v}" for k, v in sorted(agg["failures"].items())) or "0"
        print(f"| {language} | {agg['workers']} | {agg['acquisitions']} | {gave_up} |")
    print(f"| **total** | {len(results)} | **{total}** | |")

    print("\n| node | " + " | ".join(v.replace("not_eligible", "refused by restart quarantine") for v in VOTES)
          + " |\n| --- |" + " ---: |" * len(VOTES))
    quarantined = 0
    for i, url in enumerate(nodes.urls):
        sums = {v: sum(r["votes"].get(url, {}).get(v, 0) for r in results) for v in VOTES}
        quarantined += sums["not_eligible"]
        print(f"| {i} ({url}) | " + " | ".join(str(sums[v]) for v in VOTES) + " |")

    checks = [
        ("every worker finished", ", ".join(failed) or "yes", not failed),
        ("every language acquired the lock", ", ".join(l for l in commands if by_language.get(l, {}).get("acquisitions", 0) == 0) or "yes",
         all(by_language.get(l, {}).get("acquisitions", 0) > 0 for l in commands)),
        ("final counter", str(counter), counter == total),
        ("lost updates (acquisitions - counter)", str(total - counter), total == counter),
        ("votes refused by restart quarantine", str(quarantined), quarantined > 0),
    ]
    print("\n| check | value | ok |\n| --- | --- | --- |")
    for name, value, ok in checks:
        print(f"| {name} | {value} | {'yes' if ok else 'NO'} |")
    ok = all(c[2] for c in checks)
    if not ok:
        print(f"\nworker stderr: {log}")
    print("\ndemo passed: one holder at a time across four languages, 0 lost updates" if ok else "\ndemo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
