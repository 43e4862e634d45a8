"""Runs every benchmark client on the same local redis nodes and writes the result tables.

Called by bench/run.sh after the setup (python3 bench/bench.py [--smoke] [--only a,b]
[--workloads a1,b,..] [--held-k 1000,10000] [--held-s 20]). Standard library only. Every driver
prints one JSON line (see bench/README.md); this file only starts nodes, runs drivers with a hard
time limit, and aggregates.
"""

import argparse
import atexit
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
PEERS = os.path.join(BENCH, ".peers")
PY = os.path.join(PEERS, "venv", "bin", "python")
HARNESS = os.environ.get("IRONLOCK_HARNESS", os.path.join(ROOT, "target", "debug", "ironlock-harness"))

RUST = [os.environ.get("IRONLOCK_BENCH_RUST", os.path.join(BENCH, "rust", "target", "release", "ironlock-bench"))]
PYDRV = [PY, os.path.join(BENCH, "py", "driver.py")]
NODEDRV = ["node", os.path.join(BENCH, "node", "driver.mjs")]
CDRV = [os.path.join(BENCH, "c", "build", "driver")]

# name -> (label, command prefix). Order = table order.
CLIENTS = {
    "lower": ("lower bound (Rust, hand-written)", RUST + ["--client", "lower"]),
    "ironlock-rust": ("ironlock Rust", RUST + ["--client", "ironlock"]),
    "ironlock-c": ("ironlock C", CDRV + ["--client", "ironlock"]),
    "ironlock-py": ("ironlock Python sync", PYDRV + ["--client", "ironlock-sync"]),
    "ironlock-py-async": ("ironlock Python asyncio", PYDRV + ["--client", "ironlock-async"]),
    "ironlock-node": ("ironlock Node", NODEDRV + ["--client", "ironlock"]),
    "node-redlock": ("node-redlock 5.0.0-beta.2", NODEDRV + ["--client", "redlock"]),
    "node-redlock-io5": ("node-redlock 5.0.0-beta.2 on ioredis 5", NODEDRV + ["--client", "redlock-io5"]),
    "sesame-redlock": ("@sesamecare-oss/redlock", NODEDRV + ["--client", "sesame"]),
    "redis-semaphore": ("redis-semaphore 5.8.0 RedlockMutex", NODEDRV + ["--client", "semaphore"]),
    "redlock-universal": ("redlock-universal 0.8.5", NODEDRV + ["--client", "universal"]),
    "pottery": ("pottery Redlock (sync)", PYDRV + ["--client", "pottery-sync"]),
    "pottery-aio": ("pottery AIORedlock", PYDRV + ["--client", "pottery-aio"]),
    "aioredlock": ("aioredlock", PYDRV + ["--client", "aioredlock"]),
    # redis-py's own Lock: one node only, so only the N = 1 workload.
    "redis-py": ("redis-py Lock (sync, single node)", PYDRV + ["--client", "redis-py-sync"]),
    "redis-py-async": ("redis-py Lock (asyncio, single node)", PYDRV + ["--client", "redis-py-async"]),
    "rslock": ("rslock", RUST + ["--client", "rslock"]),
    # (f) election failover: a hand-made election on plain locks, the standby polling with a
    # try-once acquire every 200 ms (node-redlock's default retry delay), against ironlock's own
    # `campaign`, which waits in the election's line.
    "ironlock-rust-poll": ("ironlock Rust, standby polling every 200 ms (plain locks)",
                           RUST + ["--client", "ironlock", "--poll-ms", "200"]),
    # Profiling rows (full runs, (a) N=5 and (b) only): the lower bound with ONE of ironlock's
    # choices added, to measure what each costs (see the findings below the tables).
    "lower-lua-acquire": ("(profile) lower bound + ironlock's acquire script", RUST + ["--client", "lower-lua-acquire"]),
    "lower-release-all": ("(profile) lower bound + release waits for all N", RUST + ["--client", "lower-release-all"]),
}
PROFILE_ROWS = {"lower-lua-acquire": ("a5", "b"), "lower-release-all": ("a5", "b")}
# Clients that take only some workloads: the profiling rows, and single-node peers.
CLIENT_WORKLOADS = dict(PROFILE_ROWS, **{"redis-py": ("a1",), "redis-py-async": ("a1",),
                                         "ironlock-rust-poll": ("f",)})

# id -> (workload letter, N, cycles, concurrency, pinned, time limit s, repetitions[, hold ms[, extra
# driver arguments]]). The held-lock scale ids (e3, e5: extra arguments with --keepalive-s) give a
# tuple of K values as cycles, one run per K (`--held-k` replaces it), and the time limit bounds the
# acquisition of the K locks; the hold (--keepalive-s) and the release come on top.
FULL = {
    "a1": ("a", 1, 5000, 1, False, 6, 3),
    "a3": ("a", 3, 5000, 1, False, 6, 3),
    "a5": ("a", 5, 5000, 1, False, 6, 3),
    "a5p": ("a", 5, 5000, 1, True, 6, 3),
    "b": ("b", 5, 20000, 64, False, 6, 3),
    "c": ("c", 5, 2000, 16, False, 6, 3),
    "d": ("d", 5, 2000, 16, False, 6, 3),
    "dh": ("d", 5, 2000, 16, False, 6, 3, 2),
    "df": ("d", 5, 2000, 16, False, 6, 3, 2, ["--fair", "1"]),
    "ds": ("d", 5, 2000, 16, False, 6, 3, 2, ["--limit", "4"]),
    "e": ("e", 5, 10000, 64, False, 30, 1),
    "dp": ("d", 5, 2000, 17, False, 10, 3, 2),
    "drw": ("d", 5, 2000, 17, False, 10, 3, 2, ["--rw", "1"]),
    "drwf": ("d", 5, 2000, 17, False, 10, 3, 2, ["--rw", "1", "--fair", "1"]),
    "f": ("f", 5, 10, 1, False, 40, 2, 0, ["--ttl-ms", "1000"]),
    "e3": ("e", 3, (1000, 10000, 100000), 64, False, 120, 1, 0, ["--keepalive-s", "60", "--ttl-ms", "3000"]),
    "e5": ("e", 5, (1000, 10000, 100000), 64, False, 120, 1, 0, ["--keepalive-s", "60", "--ttl-ms", "3000"]),
}
SMOKE = {
    "a1": ("a", 1, 20, 1, False, 10, 1),
    "a5p": ("a", 5, 20, 1, True, 10, 1),
    "b": ("b", 5, 100, 8, False, 10, 1),
    "c": ("c", 5, 20, 4, False, 10, 1),
    "d": ("d", 5, 10, 4, False, 10, 1, 1),
    "df": ("d", 5, 10, 4, False, 10, 1, 1, ["--fair", "1"]),
    "ds": ("d", 5, 10, 4, False, 10, 1, 1, ["--limit", "2"]),
    "e": ("e", 3, 100, 8, False, 10, 1),
    "drw": ("d", 5, 10, 4, False, 10, 1, 1, ["--rw", "1"]),
    "drwf": ("d", 5, 10, 4, False, 10, 1, 1, ["--rw", "1", "--fair", "1"]),
    "f": ("f", 3, 1, 1, False, 20, 1, 0, ["--ttl-ms", "500"]),
    "e3": ("e", 3, (1000,), 64, False, 30, 1, 0, ["--keepalive-s", "3", "--ttl-ms", "3000"]),
}
# Workloads only some clients take (fair mode and semaphores are ironlock's and
# redis-semaphore's); every other workload runs every client.
WORKLOAD_CLIENTS = {
    "df": ("ironlock-rust", "ironlock-node"),
    "ds": ("ironlock-rust", "ironlock-node", "redis-semaphore"),
    "dp": ("ironlock-rust",),
    "drw": ("ironlock-rust",),
    "drwf": ("ironlock-rust",),
    "f": ("ironlock-rust", "ironlock-rust-poll"),
    "e3": ("ironlock-rust", "ironlock-py", "ironlock-node"),
    "e5": ("ironlock-rust", "ironlock-py", "ironlock-node"),
}
TITLES = {
    "a1": "(a) 1 client, 5,000 lock+unlock cycles on distinct keys, N = 1",
    "a3": "(a) N = 3",
    "a5": "(a) N = 5",
    "a5p": "(a) pinned: the client and all five servers on CPU 0 (`taskset`), N = 5",
    "b": "(b) 64 in flight, 20,000 cycles on distinct keys, N = 5",
    "c": "(c) 16 workers on ONE key, N = 5, 2,000 acquisitions; library retry off, driver retries after uniform 0–2 ms",
    "d": "(d) 16 workers on ONE key, N = 5, 2,000 acquisitions; every library's DEFAULT retry settings",
    "dh": "(d) with a 2 ms critical section: each grant is held 2 ms before the release (16 workers, ONE key, N = 5, default retry settings)",
    "df": "(d) FAIR mode (SPEC §10), 2 ms critical section, 16 workers, ONE key, N = 5 (compare with the 2 ms table above: the same workload without fairness)",
    "ds": "(d) SEMAPHORE, limit 4: 16 workers take permits of ONE semaphore, each held 2 ms, N = 5 (ironlock: Q(4) = 5 of 5 nodes; redis-semaphore: its RedlockSemaphore, which admits with a majority)",
    "e": "(e) memory: one process holding 10,000 locks at once (N = 5, taken 64 at a time)",
    "dp": "(d) 17 workers on ONE key with plain locks, each grant held 2 ms, N = 5, default retry settings (the base of the read-write row)",
    "drw": "(d) READ-WRITE: 16 readers and 1 writer on ONE read-write lock, each grant held 2 ms, N = 5, default retry settings (per worker: the writer first)",
    "drwf": "(d) READ-WRITE, FAIR: the same 16 readers and 1 writer with `fair` on (every waiter in ticket order)",
    "e3": "(e) HELD-LOCK SCALE, N = 3",
    "e5": "(e) HELD-LOCK SCALE, N = 5",
    "f": "(f) ELECTION FAILOVER: the leader stops without resigning (as a killed process: its keys stay until they expire), ttl 1 s (smoke: 0.5 s), N = 5 (smoke: 3); time until the standby leads",
}

# Row labels that differ by workload.
LABELS = {("ds", "redis-semaphore"): "redis-semaphore 5.8.0 RedlockSemaphore"}


def keepalive_s(spec):
    """The hold of a held-lock scale workload (its --keepalive-s), or None for any other."""
    extra = spec[8] if len(spec) > 8 else []
    return float(extra[extra.index("--keepalive-s") + 1]) if "--keepalive-s" in extra else None


def spec_arg(spec, name, default=None):
    """One of a spec's extra driver arguments (`--ttl-ms`, ...)."""
    extra = spec[8] if len(spec) > 8 else []
    return extra[extra.index(name) + 1] if name in extra else default


def with_hold(spec, seconds):
    """A held-lock scale spec with another hold (`--held-s`)."""
    extra = list(spec[8])
    extra[extra.index("--keepalive-s") + 1] = f"{seconds:g}"
    return spec[:8] + (extra,)


def held_ks(spec, override):
    """The K values a workload runs with: the held-lock scale's tuple (or `--held-k`), else [None]."""
    if not isinstance(spec[2], tuple):
        return [None]
    return override or list(spec[2])


def runs(client, wid):
    """Whether `client` takes part in workload `wid`."""
    if client in CLIENT_WORKLOADS and wid not in CLIENT_WORKLOADS[client]:
        return False
    return wid not in WORKLOAD_CLIENTS or client in WORKLOAD_CLIENTS[wid]


harness = None


def start_nodes(n):
    global harness
    harness = subprocess.Popen(
        [HARNESS, "--nodes", str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    line = harness.stdout.readline()
    if not line:
        sys.exit("bench: the harness did not start the nodes")
    return json.loads(line)


def harness_cmd(cmd):
    harness.stdin.write(cmd + "\n")
    harness.stdin.flush()
    return harness.stdout.readline().strip()


def stop_nodes():
    global harness
    if harness is None:
        return
    h, harness = harness, None
    try:
        h.stdin.write("quit\n")
        h.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass
    try:
        h.wait(timeout=10)
    except subprocess.TimeoutExpired:
        h.kill()
        h.wait()


def on_signal(signum, _frame):
    stop_nodes()
    sys.exit(128 + signum)


def pin(pids, cpus):
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, stdout=subprocess.DEVNULL)


def server_cpu_s(ports):
    """user+system CPU seconds of the given redis-server nodes (INFO cpu), or None."""
    total = 0.0
    for port in ports:
        try:
            out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "cpu"], capture_output=True,
                                 text=True, timeout=5).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        vals = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        if "used_cpu_sys" not in vals:
            return None
        total += float(vals["used_cpu_sys"]) + float(vals["used_cpu_user"])
    return total


def run_one(client, wid, spec, urls, pids, rep, run_id, env, k=None):
    """One run of `client` in workload `wid`; `k`: the number of locks of a held-lock scale run."""
    letter, n, cycles, conc, pinned, limit = spec[:6]
    hold = spec[7] if len(spec) > 7 else 0
    extra = spec[8] if len(spec) > 8 else []
    keep = keepalive_s(spec)
    if k is not None:
        cycles = k
    cmd = CLIENTS[client][1] + [
        "--workload", letter,
        "--urls", ",".join(urls[:n]),
        "--cycles", str(cycles),
        "--concurrency", str(conc),
        "--prefix", f"bench:{run_id}:{client}:{wid}:{rep}" + (f":{k}" if k is not None else ""),
        "--time-limit", str(limit),
    ] + (["--hold-ms", str(hold)] if hold else []) + extra
    # Held-lock scale: the time limit bounds the acquisition; the hold and the release come on top.
    kill_after = limit + 60 + (keep + 120 if keep else 0)
    if pinned:
        cmd = ["taskset", "-c", "0"] + cmd
        pin(pids[:n], "0")
    rec = {"client": client, "workload": wid, "letter": letter, "n": n, "rep": rep, "pinned": pinned,
           "concurrency": conc}
    if k is not None:
        rec["k"] = k
    ports = [int(u.rsplit(":", 1)[1]) for u in urls[:n]]
    srv0 = server_cpu_s(ports)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=kill_after, env=env)
        rec["rc"] = p.returncode
        out = p.stdout.strip().splitlines()
        try:
            rec.update(json.loads(out[-1]) if out else {})
        except json.JSONDecodeError:
            rec["error"] = "unparsable output: " + out[-1][:300]
        if p.returncode not in (0, 3) or not out:
            rec["error"] = rec.get("error") or (p.stderr.strip().splitlines() or ["no output"])[-1][:500]
            if "cps" in rec and (p.returncode < 0 or p.returncode >= 128):
                # Measured in full, then crashed while exiting: keep the numbers, flag the crash.
                sig = -p.returncode if p.returncode < 0 else p.returncode - 128
                rec["exit_crash"] = f"signal {sig}"
                rec["error"] = f"crashed at exit (signal {sig}) after reporting"
    except subprocess.TimeoutExpired:
        rec["rc"] = -1
        rec["error"] = f"killed after {kill_after} s"
    finally:
        if pinned:
            pin(pids[:n], f"0-{os.cpu_count() - 1}")
    rec["wall_s"] = round(time.monotonic() - t0, 3)
    srv1 = server_cpu_s(ports)
    if srv0 is not None and srv1 is not None and rec.get("ok") and not keep:
        # (The held-lock scale's drivers read the nodes' CPU over the hold phase themselves.)
        # Includes the driver's warm-up cycles (max(50, 4 x concurrency)), counted in.
        warm = max(50, 4 * conc)
        rec["server_cpu_us_per_cycle"] = round((srv1 - srv0) * 1e6 / (rec["ok"] + warm), 3)
    return rec


# ---------------------------------------------------------------- tables


def fmt_rate(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def med(xs):
    return statistics.median(xs) if xs else 0.0


def aggregate(recs):
    ok = [r for r in recs if "cps" in r and (r.get("rc") in (0, 3) or "exit_crash" in r)]
    if not ok:
        return None
    return {
        "cps": med([r["cps"] for r in ok]),
        "min": min(r["cps"] for r in ok),
        "max": max(r["cps"] for r in ok),
        "p50": med([r["p50_us"] for r in ok]),
        "p99": med([r["p99_us"] for r in ok]),
        "cpu": med([r["cpu_us_per_cycle"] for r in ok]),
        "srv": med([r.get("server_cpu_us_per_cycle", 0) for r in ok]),
        "partial": any(not r.get("complete") for r in ok),
        "done": med([r["ok"] for r in ok]),
        "target": ok[0]["target"],
        "rss_peak": med([r.get("rss_peak_kb", 0) for r in ok]),
        "rss_base": med([r.get("rss_base_kb", 0) for r in ok]),
        "reps": len(ok),
        "jain": med([r["jain"] for r in ok if "jain" in r]) if any("jain" in r for r in ok) else None,
        "crashes": sum(1 for r in ok if "exit_crash" in r),
    }


def keepalive_table(wid, spec, records, clients):
    """(e) held-lock scale: one row per client and K, every figure from the hold phase except the
    acquisition time and the memory (RSS after acquiring the K locks less RSS before, per lock)."""
    hold = keepalive_s(spec)
    ttl = float(spec_arg(spec, "--ttl-ms", "0")) / 1000
    lines = [f"### {TITLES.get(wid, wid)}: K locks held at once by ONE process, each auto-extended "
             f"(ttl {ttl:g} s) through a {hold:g} s hold", "",
             "| client | K | held | acquisition s | client CPU % of a core | server CPU µs/extension | "
             "extensions/lock | extensions | failed extensions | lost | memory B/lock |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rows = {}
    for c in clients:
        mine = [r for r in records if r["client"] == c and r["workload"] == wid]
        for k in sorted({r.get("k") for r in mine if r.get("k") is not None}) or [None]:
            recs = [r for r in mine if r.get("k") == k and "hold_s" in r]
            label = CLIENTS[c][0]
            if not recs:
                errs = [r.get("error", "") for r in mine if r.get("k") == k]
                lines.append(f"| {label} | {k or ''} | failed: {(errs or [''])[0][:80]} | | | | | | | | |")
                continue

            def m(key):
                vals = [r[key] for r in recs if r.get(key) is not None]
                return med(vals) if vals else None

            srv = m("server_us_per_extension")
            held = m("ok")
            partial = " (partial)" if any(not r.get("complete") for r in recs) else ""
            lost = sum(r["lost"] for r in recs)
            keys_left = sum(r.get("keys_left") or 0 for r in recs)
            lost_txt = f"**{lost:,}**" if lost else "0"
            before = sum(r.get("lost_before_hold") or 0 for r in recs)
            if before:
                lost_txt += f" ({before:,} before the hold)"
            unconfirmed = sum(r.get("release_unconfirmed") or 0 for r in recs)
            if unconfirmed:
                lost_txt += f" ({unconfirmed:,} releases unconfirmed)"
            if keys_left:
                lost_txt += f" (**{keys_left:,} keys left**)"
            rows[(c, k)] = {"lost": lost, "held": held, "cpu": m("hold_cpu_pct"), "srv": srv}
            lines.append(
                f"| {label} | {k:,} | {held:,.0f}{partial} | {m('acquire_s'):,.1f} | {m('hold_cpu_pct'):,.1f} | "
                f"{'–' if srv is None else f'{srv:,.1f}'} | {m('extensions_per_lock'):,.2f} | "
                f"{m('extensions'):,.0f} | {m('extension_failures'):,.0f} | {lost_txt} | "
                f"{m('bytes_per_lock'):,.0f} |")
    return lines + [""], rows


def table(wid, spec, records, clients):
    letter = spec[0]
    clients = [c for c in clients if runs(c, wid)]
    if keepalive_s(spec) is not None:
        return keepalive_table(wid, spec, records, clients)
    rows = {c: aggregate([r for r in records if r["client"] == c and r["workload"] == wid]) for c in clients}
    low = rows.get("lower")
    redl = rows.get("node-redlock")
    lines = [f"### {TITLES.get(wid, wid)}", ""]
    if letter == "e":
        lines += ["| client | peak RSS MB | RSS while idle MB | held locks | × lower bound (peak) |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for c in clients:
            a = rows[c]
            if a is None:
                lines.append(f"| {CLIENTS[c][0]} | failed | | | |")
                continue
            ratio = f"{a['rss_peak'] / low['rss_peak']:.2f}×" if low and low["rss_peak"] else "–"
            lines.append(f"| {CLIENTS[c][0]} | {a['rss_peak'] / 1024:.1f} | {a['rss_base'] / 1024:.1f} | "
                         f"{a['done']:,.0f}{' (partial)' if a['partial'] else ''} | {ratio} |")
        return lines + [""], rows
    if letter == "f":
        lines += ["| client | failovers | stop → next leader p50 ms | p99 ms | p50 × ttl | after the key expired: p50 ms | p99 ms |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for c in clients:
            recs = [r for r in records if r["client"] == c and r["workload"] == wid and "overhead_p50_us" in r]
            if not recs:
                lines.append(f"| {CLIENTS[c][0]} | failed | | | | | |")
                continue
            p50, p99 = med([r["p50_us"] for r in recs]), med([r["p99_us"] for r in recs])
            o50, o99 = med([r["overhead_p50_us"] for r in recs]), med([r["overhead_p99_us"] for r in recs])
            ttl = recs[0]["ttl_ms"]
            lines.append(f"| {CLIENTS[c][0]} | {sum(r['ok'] for r in recs)} | {p50 / 1000:,.0f} | {p99 / 1000:,.0f} | "
                         f"{p50 / 1000 / ttl:.2f} | {o50 / 1000:,.1f} | {o99 / 1000:,.1f} |")
        return lines + [""], {c: aggregate([r for r in records if r["client"] == c and r["workload"] == wid])
                              for c in clients}
    unit = "acquisitions/s" if letter in "cd" else "cycles/s"
    with_redl = letter in "abd" and redl
    extra_cols = (["× node-redlock"] if with_redl else []) + (["Jain's index"] if letter == "d" else [])
    extra = "".join(f" | {c}" for c in extra_cols)
    lines += [f"| client | {unit} median (min–max) | × lower bound | p50 µs | p99 µs | p99 × lower | client CPU µs/cycle | server CPU µs/cycle{extra} |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---:" + " | ---:" * len(extra_cols) + " |"]
    for c in clients:
        a = rows[c]
        label = LABELS.get((wid, c), CLIENTS[c][0])
        if a is None:
            errs = [r.get("error", "") for r in records if r["client"] == c and r["workload"] == wid]
            lines.append(f"| {label} | failed: {(errs or [''])[0][:80]} | | | | | | |" + " |" * len(extra_cols))
            continue
        ratio = f"{a['cps'] / low['cps']:.2f}" if low and low["cps"] else "–"
        p99r = f"{a['p99'] / low['p99']:.2f}" if low and low["p99"] else "–"
        partial = f" (partial: {a['done']:,.0f}/{a['target']:,} in the time limit)" if a["partial"] else ""
        if a["crashes"]:
            partial += f" **crashed at exit in {a['crashes']}/{a['reps']} runs**"
        row = (f"| {label} | {fmt_rate(a['cps'])} ({fmt_rate(a['min'])}–{fmt_rate(a['max'])}){partial} | "
               f"{ratio} | {a['p50']:,.0f} | {a['p99']:,.0f} | {p99r} | {a['cpu']:,.1f} | {a['srv']:,.1f} |")
        if with_redl:
            row += f" {a['cps'] / redl['cps']:.2f} |" if redl["cps"] else " – |"
        if letter == "d":
            row += f" {a['jain']:.3f} |" if a.get("jain") is not None else " – |"
        lines.append(row)
    return lines + [""], rows


NODE_PEERS = ("node-redlock", "node-redlock-io5", "sesame-redlock", "redis-semaphore", "redlock-universal")


def fastest_node_peer(rows):
    """The Node peer with the highest median rate in one table's rows, or None."""
    have = [(rows[c]["cps"], c) for c in NODE_PEERS if rows.get(c)]
    return max(have)[1] if have else None


def targets(aggs):
    def r(wid, c, base="lower", key="cps"):
        a, b = aggs.get(wid, {}).get(c), aggs.get(wid, {}).get(base)
        if not a or not b or not b[key]:
            return None
        return a[key] / b[key]

    checks = [
        ("Rust core ≥ 0.95× lower bound in (a) N=5", r("a5", "ironlock-rust"), 0.95, "≥"),
        ("Rust core ≥ 0.95× lower bound in (b)", r("b", "ironlock-rust"), 0.95, "≥"),
        ("Rust core p99 ≤ 1.2× lower bound in (a) N=5", r("a5", "ironlock-rust", key="p99"), 1.2, "≤"),
        ("Rust core p99 ≤ 1.2× lower bound in (b)", r("b", "ironlock-rust", key="p99"), 1.2, "≤"),
    ]
    for wid in ("a1", "a3", "a5"):
        checks.append((f"C ≥ 0.9× lower bound in (a) N={wid[1]}", r(wid, "ironlock-c"), 0.9, "≥"))
    checks += [
        ("Python sync ≥ 0.8× lower bound in (a) N=5", r("a5", "ironlock-py"), 0.8, "≥"),
        ("Python asyncio ≥ 0.25× lower bound in (b)", r("b", "ironlock-py-async"), 0.25, "≥"),
    ]
    for wid in ("a1", "a3", "a5"):
        fastest = fastest_node_peer(aggs.get(wid, {}))
        checks.append((f"Node ≥ 1.1× the fastest Node peer in (a) N={wid[1]} ({CLIENTS[fastest][0] if fastest else '–'})",
                       r(wid, "ironlock-node", fastest) if fastest else None, 1.1, "≥"))
    checks += [
        ("Node ≥ 3.5× node-redlock in (b)", r("b", "ironlock-node", "node-redlock"), 3.5, "≥"),
        ("(d) ironlock Node ≥ 20× node-redlock acquisitions/s", r("d", "ironlock-node", "node-redlock"), 20.0, "≥"),
        ("(d) ironlock Rust ≥ 20× node-redlock acquisitions/s", r("d", "ironlock-rust", "node-redlock"), 20.0, "≥"),
        ("(d) with a 2 ms hold: ironlock Node ≥ 20× node-redlock", r("dh", "ironlock-node", "node-redlock"), 20.0, "≥"),
        ("(d) with a 2 ms hold: ironlock Rust ≥ 20× node-redlock", r("dh", "ironlock-rust", "node-redlock"), 20.0, "≥"),
    ]
    # Issue 12 item 5: fair mode of (d) with a 2 ms hold. The ideal FIFO wait is 16 × (hold +
    # the client's own p50 lock+unlock cycle in (a) N = 5, measured in this run).
    for c in ("ironlock-rust", "ironlock-node"):
        fair = aggs.get("df", {}).get(c)
        plain = aggs.get("dh", {}).get(c)
        cycle = aggs.get("a5", {}).get(c)
        redl = aggs.get("dh", {}).get("node-redlock")
        name = CLIENTS[c][0]
        ideal = 16 * (2000 + cycle["p50"]) if cycle else None
        checks += [
            (f"(d) fair, 2 ms hold: {name} p99 wait ≤ 3× the ideal FIFO wait (16 × (2 ms + p50 cycle))",
             fair["p99"] / ideal if fair and ideal else None, 3.0, "≤"),
            (f"(d) fair, 2 ms hold: node-redlock's p99 wait ≥ 10× {name}'s",
             redl["p99"] / fair["p99"] if fair and redl and fair["p99"] else None, 10.0, "≥"),
            (f"(d) fair, 2 ms hold: {name} throughput ≥ 0.9× its non-fair throughput",
             fair["cps"] / plain["cps"] if fair and plain and plain["cps"] else None, 0.9, "≥"),
            (f"(d) fair, 2 ms hold: {name} Jain's fairness index ≥ 0.99",
             fair["jain"] if fair and fair.get("jain") is not None else None, 0.99, "≥"),
        ]
    lines = ["| target | measured | met? |", "| --- | ---: | :---: |"]
    met_all = True
    for name, val, bound, op in checks:
        if val is None:
            lines.append(f"| {name} | not measured | – |")
            continue
        ok = val >= bound if op == "≥" else val <= bound
        met_all &= ok
        lines.append(f"| {name} | {val:.2f}× | {'yes' if ok else '**no**'} |")
    return lines, met_all


def markdown(head, plan, records, clients, smoke):
    md = ["# ironlock benchmark results", "", head]
    md += ["", "Every client ran against the same five local redis-server nodes (loopback, started by "
           "`target/debug/ironlock-harness`; N = 1 and 3 use the first nodes), one process per run, "
           "repetitions interleaved. Rates are the median of the repetitions (min–max); p50/p99 are "
           "medians over repetitions of each run's per-cycle (a, b) or per-acquisition (c, d: from the "
           "first attempt to the grant, release included) latency; client CPU is the client process's "
           "user+system time per cycle (getrusage / process.cpuUsage / resource); server CPU is the "
           "redis-server nodes' user+system time (INFO cpu) over the run divided by its cycles, warm-up "
           "included. Ratios are to the lower bound measured in the same run.", ""]
    aggs = {}
    for wid, spec in plan.items():
        lines, rows = table(wid, spec, records, clients)
        aggs[wid] = rows
        md += lines
    plain = aggs.get("dp", {}).get("ironlock-rust")
    for wid, what in (("drw", "not fair"), ("drwf", "fair")):
        rw = aggs.get(wid, {}).get("ironlock-rust")
        if rw and plain and plain["cps"]:
            md += [f"Read-write lock ({what}), 16 readers + 1 writer: {rw['cps'] / plain['cps']:.2f}× the "
                   f"acquisitions/s of the same 17 workers with plain locks (p99 wait {rw['p99'] / 1000:,.0f} ms "
                   f"against {plain['p99'] / 1000:,.0f} ms; Jain's index {rw['jain'] or 0:.3f}).", ""]
    if not smoke:
        tl, _ = targets(aggs)
        md += ["## Targets (issue 8 item 4; issue 11 item 5; issue 12 item 5)", ""] + tl + [""]
    md += ["## Settings used", "",
           "- ironlock (every language): `restart_quarantine` off (the nodes are fresh, uptime 0); "
           "(a), (b), (d), (e): otherwise the defaults (retry_count 10, retry_delay 200 ms ± 100 ms, release "
           "wake-ups, node_timeout 50 ms); (c): `retry_count` 0 (one round per call).",
           "- node-redlock / @sesamecare-oss/redlock: ioredis clients (6.0.0; the `on ioredis 5` row: 5.9.3), "
           "one per node, connected and warm (a PING each before the warm-up); (c) `retryCount: 0`; "
           "otherwise defaults (10 retries, 200 ms ± 100 ms).",
           "- redis-semaphore: a `RedlockMutex` per key over the same ioredis clients, `lockTimeout` = the ttl, "
           "its auto-refresh on as shipped; (c) `acquireAttemptsLimit: 1`; otherwise defaults (retry every 10 ms "
           "for up to 10 s).",
           "- redlock-universal: a `createRedlock` per key over `IoredisAdapter`s of the same clients; "
           "(c) `retryAttempts: 0`; otherwise defaults.",
           "- pottery: `Redlock`/`AIORedlock` per key over redis-py clients; (c) `acquire(blocking=False)`; "
           "(d) `acquire()` (blocks, retrying after uniform 0–200 ms), bounded by the run's time limit.",
           "- aioredlock: (c) `retry_count=1` (one attempt); otherwise defaults (3 attempts, 0.1–0.3 s apart).",
           "- rslock: (c) `set_retry(1, _)` (one attempt); otherwise defaults (3 attempts, 0–200 ms apart).",
           "- lower bound: no library retry at all; in (c) and (d) the driver retries after uniform 0–2 ms.",
           "- read-write (d): ironlock's `rw_lock(key).write` for worker 0 and `.read` for the 16 others, "
           "default settings (not fair; the fair row sets `fair`); the plain-lock base row runs the same 17 "
           "workers with `acquire`.",
           "- (f) election failover, ironlock Rust only: the leader is dropped without resigning; ironlock's "
           "standby `campaign`s (waits in line: the next in line checks every 20 ms, a release wakes it at once); "
           "the polling row is an election made by hand on plain locks, a try-once `acquire` of the "
           "election's name every 200 ms. \"After the key expired\" is the time to the next leader less "
           "what the election's key still had to live when the leader stopped (PTTL on node 0).",
           "- (e) held-lock scale (ironlock Rust, Python sync, Node; N = 3 and 5): ONE process acquires K "
           "locks (distinct names, 64 acquires in flight: Rust tasks, Python threads, Node promises) of ttl "
           "3 s, starting each one's auto-extension (`keep_alive()` / `keepAlive()`, the library's defaults: "
           "it extends when a third of the ttl is left) as soon as it is granted, holds them all for the hold "
           "(60 s; smoke: N = 3, K = 1,000 for 3 s), then releases them and checks that no key is left on the "
           "nodes. Measured over the hold phase only: the client process's user+system CPU as % of one "
           "core; the redis-server nodes' user+system CPU (INFO cpu, summed over the N nodes) per "
           "extension; extensions (the manager's `stats().extensions`, and its `extension_failures`: "
           "failed tries, retried) in total and per lock. Lost: locks whose lost signal fired, or that were "
           "no longer valid at the end of the hold, or whose release found the token gone on more than N − Q "
           "nodes (must be 0: any makes the run fail; in parentheses, those already lost before the hold, while the K "
           "locks were being acquired); a release that could not confirm a quorum only "
           "because nodes did not answer within node_timeout is shown as unconfirmed, not lost (its keys "
           "are gone all the same: the run also fails if any key is left on the nodes). Memory: the "
           "client's RSS after acquiring the K locks less its RSS before, per lock (the lock objects, their "
           "keep-alive handles and the driver's list of them). Acquisition: wall time to acquire the K "
           "locks (informative; extensions of the locks already held run meanwhile).",
           "- ttl 10 s ((e) memory: 60 s, the default max_ttl). Each run is bounded: 6 s of measurement "
           "(30 s for (e) memory; the held-lock scale: 120 s to acquire, then the hold); a client that does "
           "not finish its cycles in time is reported with the rate of the cycles it completed, marked "
           "partial. (e) runs once per client and K (memory does not need a median).", ""]
    findings = os.path.join(BENCH, "findings.md")
    if not smoke and os.path.exists(findings):
        with open(findings) as f:
            md += [f.read().rstrip()]
    return md


def render_stored(args):
    """Re-renders bench/RESULTS.md from stored .jsonl results (see --render)."""
    groups = {}
    for path in args.render:
        recs = [json.loads(line) for line in open(path) if line.strip()]
        fresh = {}
        for r in recs:
            fresh.setdefault((r["client"], r["workload"]), []).append(r)
        groups.update(fresh)
    records = [r for rs in groups.values() for r in rs]
    names = ", ".join(os.path.basename(p) for p in args.render)
    head = f"Rendered from {names}. {args.load_note}"
    md = markdown(head, FULL, records, list(CLIENTS), False)
    with open(os.path.join(BENCH, "RESULTS.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("bench: wrote bench/RESULTS.md")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--only", help="comma-separated client names")
    ap.add_argument("--workloads", help="comma-separated workload ids")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--held-k", help="comma-separated K values (locks held at once) for the held-lock "
                                     "scale workloads e3, e5 (default: their own, 1000,10000,100000)")
    ap.add_argument("--held-s", type=float, help="the held-lock scale workloads' hold, seconds (default: "
                                                 "60; smoke: 3)")
    ap.add_argument("--load-note", default="")
    ap.add_argument("--render", action="append", metavar="JSONL",
                    help="no run: render bench/RESULTS.md from stored results (a later file's records "
                         "replace the earlier files' records of the same client and workload)")
    args = ap.parse_args()
    if args.render:
        return render_stored(args)
    ks = [int(x) for x in args.held_k.split(",")] if args.held_k else None

    plan = SMOKE if args.smoke else FULL
    if args.workloads:
        base_plan = SMOKE if args.smoke else FULL
        plan = {w: base_plan[w] for w in args.workloads.split(",")}
    if args.held_s:
        plan = {w: with_hold(spec, args.held_s) if keepalive_s(spec) else spec for w, spec in plan.items()}
    clients = list(CLIENTS) if not args.only else [c for c in CLIENTS if c in args.only.split(",")]
    if args.smoke:
        clients = [c for c in clients if c not in PROFILE_ROWS]
    if "lower" not in clients:
        clients.insert(0, "lower")

    atexit.register(stop_nodes)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    info = start_nodes(5)
    urls, pids = info["urls"], info["pids"]
    run_id = f"{int(time.time())}{os.getpid()}"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    os.makedirs(os.path.join(BENCH, "results"), exist_ok=True)
    base = os.path.join(BENCH, "results", stamp + ("-smoke" if args.smoke else ""))
    env = dict(os.environ,
               BENCH_PEERS_NODE=os.path.join(PEERS, "node"),
               BENCH_IRONLOCK_NODE=os.path.join(PEERS, "ironlock-node"))
    load0 = os.getloadavg()
    started = time.monotonic()
    records = []
    failures = []
    max_reps = max(s[6] for s in plan.values()) if args.reps is None else args.reps
    with open(base + ".jsonl", "w") as jl:
        # Interleaved repetitions: rep 1 of every (workload, client), then rep 2, then rep 3.
        for rep in range(1, max_reps + 1):
            for wid, spec in plan.items():
                if rep > (spec[6] if args.reps is None else args.reps):
                    continue
                for c in clients:
                    if not runs(c, wid):
                        continue
                    for k in held_ks(spec, ks):
                        rec = run_one(c, wid, spec, urls, pids, rep, run_id, env, k)
                        records.append(rec)
                        jl.write(json.dumps(rec) + "\n")
                        jl.flush()
                        bad = "error" in rec or rec.get("rc") not in (0, 3) or (args.smoke and rec.get("rc") != 0)
                        status = "FAIL" if bad else ("partial" if rec.get("rc") == 3 else "ok")
                        if "hold_s" in rec:
                            print(f"[rep {rep}] {wid:4} {c:18} {status:7} K {k:,}: {rec['ok']:,} held, acquired in "
                                  f"{rec['acquire_s']:.1f} s; hold {rec['hold_s']:.0f} s: client CPU "
                                  f"{rec['hold_cpu_pct']:.1f} %, {rec['extensions_per_lock']:.2f} extensions/lock, "
                                  f"server {rec['server_us_per_extension'] or 0:.1f} µs/extension, lost {rec['lost']}, "
                                  f"{rec['bytes_per_lock']:.0f} B/lock  {rec.get('error', '')}", flush=True)
                        else:
                            print(f"[rep {rep}] {wid:4} {c:18} {status:7} {rec.get('cps', 0):>10.1f}/s "
                                  f"p99 {rec.get('p99_us', 0):>8.0f} µs  {rec.get('error', '')}", flush=True)
                        if bad:
                            failures.append(rec)
    load1 = os.getloadavg()
    stop_nodes()

    kind = "smoke" if args.smoke else ("selection" if args.only or args.workloads or args.reps else "full")
    head = (f"Run {stamp} ({kind} run), {time.monotonic() - started:.0f} s. "
            f"Host: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; "
            f"load average at start {load0[0]:.2f}, at end {load1[0]:.2f}. {args.load_note}")
    md = markdown(head, plan, records, clients, args.smoke)
    text = "\n".join(md) + "\n"
    with open(base + ".md", "w") as f:
        f.write(text)
    print(text)
    print(f"bench: wrote {base}.md and {base}.jsonl")
    if not args.smoke and not args.only and not args.workloads and args.reps is None:
        shutil.copyfile(base + ".md", os.path.join(BENCH, "RESULTS.md"))
        print("bench: copied to bench/RESULTS.md")
    if failures:
        print(f"bench: {len(failures)} run(s) FAILED", file=sys.stderr)
        for r in failures:
            k = f" K {r['k']:,}" if r.get("k") is not None else ""
            print(f"  {r['client']} {r['workload']}{k} rep {r['rep']}: rc {r.get('rc')} {r.get('error', 'incomplete')}",
                  file=sys.stderr)
        return 1
    print(f"bench: {len(records)} runs, all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
