#!/usr/bin/env python3
"""ironlock soak: no growth in memory, open fds or threads under manager churn, a million lock
cycles and a reconnect storm, in every language. See README.md in this folder.

    python3 tests/soak/run.py [--short] [--only rust,c,py,pyasync,node] [--release]
                              [--wrap "valgrind ..."] [--cycles N] [--managers N]

Stdlib only. Prints one markdown table (also written to target/soak/results.md) and exits
non-zero when any limit is exceeded. Every process it starts is stopped on every exit path.
"""

import argparse
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
from harness import CLEANUP, HARNESS, Harness, kill_proc  # noqa: E402

LANGS = ["rust", "c", "py", "pyasync", "node"]
NODES = 5
TTL_MS = 1000
NODE_TIMEOUT_MS = 200
MAX_TTL_MS = 2000
# Under valgrind or a sanitizer every call is many times slower: longer locks and node timeouts,
# so that the run checks memory, fds and threads rather than how slow the instrumentation is.
LENIENT_TTL_MS = 2000
LENIENT_NODE_TIMEOUT_MS = 1000
PAUSE_S = 0.5  # how long the paused node stays stopped (longer than node_timeout)
RSS_LIMIT_KB = 2048
# The managers phase: one-time growth after the warm-up (in one half only) up to this much is no
# leak; more is a finding even so.
ONE_TIME_LIMIT_KB = 4 * RSS_LIMIT_KB
# A blocking pool retires a thread after 10 s idle (tokio's default keep-alive): the end samples
# wait up to this long for the thread count to come back to the baseline.
IDLE_S = 15.0
CALL_SLACK_MS = 300  # a call may take node_timeout plus this (scheduling, GC, a slow machine)
# The warm-up lasts at least this long, and so does the measured part after it: a JIT (Node)
# and allocators reach their steady state in seconds, not in a count of cycles.
WARM_S = 10.0


def log(msg: str) -> None:
    print("[soak %7.1f] %s" % (time.monotonic() % 100000, msg), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- /proc sampling

@dataclass
class Sample:
    rss_kb: int
    fds: int
    threads: int

    def __str__(self) -> str:
        return "%.1f MB, %d fds, %d threads" % (self.rss_kb / 1024, self.fds, self.threads)


class Gone(RuntimeError):
    """The worker process exited (its status has no VmRSS: a zombie)."""


def sample(pid: int) -> Sample:
    try:
        status = Path("/proc/%d/status" % pid).read_text()
    except OSError as e:
        raise Gone("process %d is gone: %s" % (pid, e)) from None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if "VmRSS" not in fields:
        raise Gone("process %d exited" % pid)
    try:
        fds = len(os.listdir("/proc/%d/fd" % pid))
    except OSError as e:
        raise Gone("process %d is gone: %s" % (pid, e)) from None
    return Sample(
        rss_kb=int(fields["VmRSS"].split()[0]),
        fds=fds,
        threads=int(fields["Threads"].strip()),
    )


def connected_ports(pid: int) -> set:
    """Remote ports of the established TCP connections that process `pid` holds."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path("/proc/%d/net/%s" % (pid, table)).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "01" and cols[9] in inodes:  # ESTABLISHED
                ports.add(int(cols[2].rsplit(":", 1)[1], 16))
    return ports


# --------------------------------------------------------------------------- one worker

class Worker:
    """A worker process, its JSON lines (read by a thread) and its control files."""

    def __init__(self, lang: str, argv: List[str], env: Dict[str, str], control: Path,
                 logfile: Path):
        self.lang = lang
        self.control = control
        self.events: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self.progress: Dict[str, Any] = {}
        self.err = open(logfile, "w")
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=self.err,
                                  text=True, start_new_session=True)
        self._cleanup = CLEANUP.add(lambda: kill_proc(self.p))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                log("%s: not JSON: %r" % (self.lang, line))
                continue
            if ev.get("event") == "progress":
                self.progress = ev
            else:
                self.events.put(ev)
        self.events.put({"event": "exit"})

    def expect(self, name: str, timeout: float) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("%s: no %r within %.0f s" % (self.lang, name, timeout))
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if ev["event"] == name:
                return ev
            if ev["event"] == "exit":
                raise RuntimeError("%s: exited (code %s) before %r; see %s"
                                   % (self.lang, self.p.wait(), name, self.err.name))

    def done(self, phase: str) -> int:
        p = self.progress
        return int(p.get("done", 0)) if p.get("phase") == phase else 0

    def touch(self, name: str) -> None:
        (self.control / name).write_text("")

    def finish(self, timeout: float) -> int:
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = -1
        CLEANUP.run(self._cleanup)
        self.err.close()
        return rc


# --------------------------------------------------------------------------- the storm

class Storm(threading.Thread):
    """Node 0 killed and restarted `kills` times, node 1 stopped and resumed `stops` times,
    spread evenly over `seconds`."""

    def __init__(self, h: Harness, kills: int, stops: int, seconds: float):
        super().__init__(daemon=True)
        self.h = h
        events = [((i + 0.5) / kills, "kill") for i in range(kills)]
        events += [((i + 0.5) / stops, "stop") for i in range(stops)]
        self.plan = [kind for _, kind in sorted(events)]
        self.interval = seconds / max(1, len(self.plan))
        self.kills = self.stops = 0
        self.error: Optional[str] = None

    def run(self) -> None:
        try:
            start = time.monotonic()
            for i, kind in enumerate(self.plan):
                wait = start + (i + 1) * self.interval - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if kind == "kill":
                    self.h.send("restart 0")
                    self.kills += 1
                else:
                    self.h.send("pause 1")
                    time.sleep(PAUSE_S)
                    self.h.send("resume 1")
                    self.stops += 1
        except Exception as e:  # reported in the verdict
            self.error = repr(e)


# --------------------------------------------------------------------------- one language

@dataclass
class Result:
    lang: str
    problems: List[str] = field(default_factory=list)
    cells: Dict[str, str] = field(default_factory=dict)

    def check(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)


def growth(r: Result, what: str, a: Sample, b: Sample, rss: bool,
           limit_kb: int = RSS_LIMIT_KB) -> str:
    if rss:
        r.check(b.rss_kb - a.rss_kb <= limit_kb, "%s: RSS grew %d kB (limit %d)"
                % (what, b.rss_kb - a.rss_kb, limit_kb))
    # No growth (a count that went down, e.g. an idle pool thread that retired, is no leak).
    r.check(b.fds <= a.fds, "%s: open fds %d -> %d" % (what, a.fds, b.fds))
    r.check(b.threads <= a.threads, "%s: threads %d -> %d" % (what, a.threads, b.threads))
    return "%+.2f MB, %+d fds, %+d thr" % ((b.rss_kb - a.rss_kb) / 1024, b.fds - a.fds,
                                           b.threads - a.threads)


def manager_marks(managers: int) -> Tuple[int, int]:
    """The managers-phase sample points: after 30 % (the warm-up) and 65 % of the loop."""
    first = max(1, managers * 3 // 10)
    return first, max(first + 1, managers * 13 // 20)


def settled(pid: int, base: Sample, timeout: float) -> Sample:
    """A sample taken once the thread count is back to `base`'s, or after `timeout` s: a runtime's
    blocking pool (tokio's, in the Python binding) starts threads on demand and retires each
    after 10 s idle, so a count above the baseline right now is growth only if it stays."""
    deadline = time.monotonic() + timeout
    while True:
        now = sample(pid)
        if now.threads <= base.threads or time.monotonic() >= deadline:
            return now
        time.sleep(0.5)


def wait_connected(w: Worker, ports: List[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if set(ports) <= connected_ports(w.p.pid):
            return True
        time.sleep(0.1)
    return False


def run_lang(lang: str, argv: List[str], extra_env: Dict[str, str], h: Harness,
             args: argparse.Namespace, workdir: Path) -> Result:
    r = Result(lang)
    control = workdir / lang
    control.mkdir(parents=True, exist_ok=True)
    lenient = args.lenient
    slow = 20.0 if lenient else 1.0  # valgrind runs everything about 20x slower
    env = dict(os.environ, **extra_env)
    env.update(
        SOAK_NODES=",".join(h.urls), SOAK_MANAGERS=str(args.managers),
        SOAK_MANAGERS_MARKS="%d,%d" % manager_marks(args.managers), SOAK_HELD=str(args.held),
        SOAK_TTL_MS=str(args.ttl_ms), SOAK_NODE_TIMEOUT_MS=str(args.node_timeout_ms),
        SOAK_MAX_TTL_MS=str(MAX_TTL_MS), SOAK_PREFIX="soak-%s-%d" % (lang, os.getpid()),
        SOAK_CONTROL=str(control), SOAK_MAX_SECONDS=str(int(args.max_seconds)),
    )
    w = Worker(lang, shlex.split(args.wrap) + argv, env, control, workdir / (lang + ".log"))
    pid = w.p.pid
    started = time.monotonic()
    samples: List[Sample] = []
    stop_sampling = threading.Event()

    def sampler() -> None:
        while not stop_sampling.wait(args.sample):
            try:
                samples.append(sample(pid))
            except Gone:
                return

    threading.Thread(target=sampler, daemon=True).start()
    try:
        # Managers: samples at 30 % and 65 % of the loop (SOAK_MANAGERS_MARKS) and at its end, each
        # taken while the worker waits (no manager open). The first 30 % are warm-up. A leak grows
        # with every manager, so it shows in both halves after the warm-up; one-time growth (JIT
        # compiler zones, an allocator arena a runtime thread touches for the first time, a heap
        # page V8 keeps) shows in one half only. Once in CI a Node run grew 4.4 MB over its 210
        # managers after the warm-up, while every local run of the same build grew 0.3-0.6 MB:
        # one step, which the two halves tell apart from a leak of the same size.
        marks = []
        for _ in manager_marks(args.managers):
            at = int(w.expect("managers_mark", args.max_seconds)["done"])
            time.sleep(0.5)
            marks.append(sample(pid))
            w.touch("mark-%d" % at)
        done = w.expect("managers_done", args.max_seconds)
        time.sleep(0.5)
        m0, mh = marks
        m1 = settled(pid, m0, IDLE_S)
        w.touch("go")
        r.check(int(done.get("manager_errors", 0)) == 0,
                "%s managers could not be created" % done.get("manager_errors"))
        cell = growth(r, "managers", m0, m1, False)
        if not lenient:
            halves = (mh.rss_kb - m0.rss_kb, m1.rss_kb - mh.rss_kb)
            r.check(min(halves) <= RSS_LIMIT_KB // 2,
                    "managers: RSS grew %d kB and %d kB in the two halves after the warm-up "
                    "(a leak: both above %d kB)" % (halves + (RSS_LIMIT_KB // 2,)))
            r.check(m1.rss_kb - m0.rss_kb <= ONE_TIME_LIMIT_KB,
                    "managers: RSS grew %d kB after the warm-up (limit %d)"
                    % (m1.rss_kb - m0.rss_kb, ONE_TIME_LIMIT_KB))
            cell += " (halves %+.2f / %+.2f)" % (halves[0] / 1024, halves[1] / 1024)
        r.cells["managers"] = "%d: %s" % (args.managers, cell)

        # Cycles: the storm runs from the start; the baseline is taken after the warm-up (the
        # first 10 % of the cycles and at least WARM_S, storm included: the high-water marks of its backlogs belong
        # to the steady state), the end sample after the last cycle and storm event, both while
        # the worker cycles and is connected to every node.
        deadline = time.monotonic() + args.max_seconds

        def wait_cycles(n: int) -> None:
            while w.done("cycles") < n and time.monotonic() < deadline:
                if w.p.poll() is not None:
                    raise RuntimeError("%s exited during the cycles; see %s" % (lang, w.err.name))
                time.sleep(0.1)

        wait_cycles(1)
        t0, n0 = time.monotonic(), w.done("cycles")
        time.sleep(2.0)
        rate = max(1.0, (w.done("cycles") - n0) / max(0.001, time.monotonic() - t0))
        storm = Storm(h, args.kills, args.stops, max(1.0, (args.cycles - w.done("cycles")) / rate))
        storm.start()
        warm_from = len(samples)
        wait_cycles(args.warmup)
        while time.monotonic() - t0 < WARM_S and time.monotonic() < deadline:
            time.sleep(0.1)
        r.check(wait_connected(w, h.ports, 30 * slow), "not connected to every node after warm-up")
        c0, t_base = sample(pid), time.monotonic()
        wait_cycles(args.cycles)
        while (storm.is_alive() or time.monotonic() - t_base < WARM_S) and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        storm.join(timeout=5)
        r.check(storm.error is None, "storm: %s" % storm.error)
        r.check(storm.kills == args.kills and storm.stops == args.stops,
                "storm incomplete: %d kills, %d stops" % (storm.kills, storm.stops))
        r.check(wait_connected(w, h.ports, 30 * slow), "not connected to every node at the end")
        # The thread baseline is the most seen from the warm-up to the middle of the cycles, not
        # one instant: while calls complete, a runtime's blocking pool (the Python asyncio
        # binding delivers results through it) keeps as many threads as its busiest moment
        # needed, each retiring only after 10 s idle, so its count steps up under a burst (the
        # storm) and then stays flat. A leak keeps growing through the second half.
        # The fd baseline is the count seen most often over the same span, not one instant:
        # the storm still runs when the baseline is sampled, and a node killed between the
        # connected check and the sample takes its socket with it (once in CI: 10 fds against
        # a steady 11 in all 30 samples).
        middle = warm_from + (len(samples) - warm_from) // 2
        span = [c0] + samples[warm_from:middle]
        fds = [x.fds for x in span]
        steady_fds = max(set(fds), key=lambda n: (fds.count(n), -n))
        c0 = Sample(c0.rss_kb, steady_fds, max(x.threads for x in span))
        # The end sample once the cycles have stopped and the pools have been idle: a pool that
        # keeps busy spreads its work over every thread it ever started (none stays idle for
        # 10 s while calls go on), so only an idle pool shows whether its threads retire. The
        # manager, its connections and its background tasks are still alive here.
        w.touch("stop")
        end = w.expect("end", 60 * slow)
        c1 = settled(pid, c0, IDLE_S)
        r.cells["cycles"] = growth(r, "cycles", c0, c1, not lenient)
        r.cells["rss"] = "%.1f → %.1f MB" % (c0.rss_kb / 1024, c1.rss_kb / 1024)
        r.cells["fds"] = "%d → %d" % (c0.fds, c1.fds)
        r.cells["threads"] = "%d → %d" % (c0.threads, c1.threads)
        if samples:
            r.cells["rss"] += " (max %.1f)" % (max(s.rss_kb for s in samples) / 1024)
        judge_end(r, end, args, lenient)
        r.cells["storm"] = "%d kills, %d stops" % (storm.kills, storm.stops)

        # Every key gone once the ttl has passed.
        time.sleep(args.ttl_ms / 1000 + 0.5)
        left = sum(int(h.send("cmd %d DBSIZE" % i)) for i in range(NODES))
        r.check(left == 0, "%d keys left on the nodes" % left)
        r.cells["keys left"] = str(left)
        w.touch("quit")
        rc = w.finish(60 * slow)
        r.check(rc == 0, "worker exit code %s (see %s)" % (rc, w.err.name))
    except RuntimeError as e:
        if w.p.poll() is not None:
            # Say how it ended: a negative code is the signal that killed it.
            e = RuntimeError("%s (the worker exited with code %s; see %s)"
                             % (e, w.p.returncode, w.err.name))
        r.problems.append(str(e))
        w.touch("quit")
        w.finish(5)
    finally:
        stop_sampling.set()
        # The whole series, for a look at the trend: one "rss_kb fds threads" line per sample.
        (workdir / (lang + ".samples")).write_text(
            "".join("%d %d %d\n" % (x.rss_kb, x.fds, x.threads) for x in samples))
    r.cells["time"] = "%.0f s" % (time.monotonic() - started)
    return r


def judge_end(r: Result, end: Dict[str, Any], args: argparse.Namespace, lenient: bool) -> None:
    failed = {k.lower().replace("ironlock_", ""): v for k, v in end["failed"].items()}
    done, granted = int(end["done"]), int(end["granted"])
    r.cells["cycles done"] = "%d (%d granted)" % (done, granted)
    r.cells["failed"] = ", ".join("%s %d" % kv for kv in sorted(failed.items())) or "0"
    r.check(done >= args.cycles, "only %d cycles" % done)
    r.check(granted * 2 >= done, "only %d of %d acquires granted" % (granted, done))
    r.check(set(failed) <= {"unavailable"}, "failures other than unavailable: %s" % failed)
    r.check(not end["unclear"], "unclear errors: %s" % end["unclear"])
    r.check(int(end["held_lost"]) == 0, "%s of %s held locks lost%s"
            % (end["held_lost"], end["held"],
               "".join("\n  %s" % json.dumps(x) for x in end.get("held_lost_reports", []))))
    bound = args.node_timeout_ms + CALL_SLACK_MS
    acq, rel = float(end["max_acquire_ms"]), float(end["max_release_ms"])
    r.cells["max call"] = "%.0f / %.0f ms" % (acq, rel)
    if not lenient:
        r.check(acq <= bound, "an acquire took %.0f ms (bound %d)" % (acq, bound))
        r.check(rel <= bound, "a release took %.0f ms (bound %d)" % (rel, bound))


# --------------------------------------------------------------------------- setup

def build(args: argparse.Namespace) -> Dict[str, List[str]]:
    """Builds what the chosen languages need; returns each worker's command line."""
    profile = "release" if args.release else "debug"
    cargo = ["cargo", "build", "--quiet"] + (["--release"] if args.release else [])
    libdir = REPO / "target" / profile
    cmds: Dict[str, List[str]] = {}
    if "rust" in args.langs:
        if not args.rust_worker:
            subprocess.run(cargo + ["-p", "ironlock", "--example", "soak_worker"], cwd=REPO,
                           check=True)
        cmds["rust"] = [args.rust_worker or str(libdir / "examples" / "soak_worker")]
    if "c" in args.langs:
        if not args.c_worker:
            subprocess.run(cargo + ["-p", "ironlock-ffi"], cwd=REPO, check=True)
            out = REPO / "target" / "soak" / ("c-" + profile)
            subprocess.run(["make", "-s", "-C", "tests/c", "LIBDIR=%s" % libdir,
                            "BUILD=%s" % out, str(out / "soak_worker-shared")],
                           cwd=REPO, check=True)
        cmds["c"] = [args.c_worker or str(REPO / "target" / "soak" / ("c-" + profile)
                                          / "soak_worker-shared")]
    py = args.python or str(REPO / ".venv" / "bin" / "python")
    cmds["py"] = [py, str(HERE / "worker.py")]
    cmds["pyasync"] = cmds["py"]
    # V8 grows its young generation (new space 4 -> 8 -> 16 MB, committed and kept) when the
    # allocation rate rises, in steps that show in RSS although no object is live (measured:
    # +4.5 MB at ~12,000 managers, +8.5 MB at ~34,000, heapUsed flat at 3.5 MB). Pinning the
    # semi-spaces small (1 MB, fully touched at once) leaves only real growth: JS objects (old
    # space) and native memory.
    cmds["node"] = ["node", "--expose-gc", "--min-semi-space-size=1", "--max-semi-space-size=1",
                    str(HERE / "worker.mjs")]
    return cmds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", action="store_true", help="CI counts (about 2 minutes)")
    ap.add_argument("--only", default=",".join(LANGS), help="languages: " + ",".join(LANGS))
    ap.add_argument("--release", action="store_true", help="release builds of Rust and C")
    ap.add_argument("--wrap", default="", help="run each worker under this command "
                    "(valgrind ...); implies --lenient")
    ap.add_argument("--lenient", action="store_true", help="no RSS or call-duration limits and "
                    "at most 1,500 cycles and 20 managers (valgrind, sanitizers)")
    ap.add_argument("--cycles", type=int)
    ap.add_argument("--managers", type=int)
    ap.add_argument("--held", type=int, default=4)
    ap.add_argument("--kills", type=int)
    ap.add_argument("--stops", type=int)
    ap.add_argument("--sample", type=float, help="seconds between samples")
    ap.add_argument("--rust-worker", help="a built soak_worker (default: cargo build)")
    ap.add_argument("--c-worker", help="a built C worker (default: make -C tests/c)")
    ap.add_argument("--python", help="interpreter with ironlock installed (default .venv)")
    args = ap.parse_args()
    full = dict(cycles=1_000_000, managers=10_000, kills=200, stops=50, sample=10.0)
    short = dict(cycles=20_000, managers=300, kills=10, stops=4, sample=1.0)
    for k, v in (short if args.short else full).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.lenient = args.lenient or bool(args.wrap)
    args.ttl_ms, args.node_timeout_ms = TTL_MS, NODE_TIMEOUT_MS
    if args.lenient:
        args.cycles, args.managers = min(args.cycles, 1_500), min(args.managers, 20)
        args.ttl_ms, args.node_timeout_ms = LENIENT_TTL_MS, LENIENT_NODE_TIMEOUT_MS
    if args.managers < 4:
        ap.error("--managers: at least 4 (samples after 30 %% and 65 %% of them and at the end), "
                 "got %d" % args.managers)
    args.warmup = max(1_000, args.cycles // 10)
    args.max_seconds = 3600.0 if not args.short else 600.0
    args.langs = [x for x in args.only.split(",") if x]
    unknown = set(args.langs) - set(LANGS)
    if unknown:
        ap.error("unknown language(s) %s (have %s)" % (sorted(unknown), ",".join(LANGS)))
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    if not Path(HARNESS).exists():
        subprocess.run(["cargo", "build", "--quiet", "-p", "ironlock-harness"], cwd=REPO,
                       check=True)
    cmds = build(args)
    workdir = Path(tempfile.mkdtemp(prefix="soak-", dir=REPO / "target"))
    results: List[Result] = []
    try:
        h = Harness(NODES)
        # Fresh nodes are in restart quarantine for max_ttl + drift + 1 s.
        time.sleep(MAX_TTL_MS / 1000 + 1.5)
        for lang in args.langs:
            log("%s: %d managers, then %d cycles with %d held locks; storm: %d kills, %d stops"
                % (lang, args.managers, args.cycles, args.held, args.kills, args.stops))
            extra = {"SOAK_MODE": "async" if lang == "pyasync" else "sync"}
            r = run_lang(lang, cmds[lang], extra, h, args, workdir)
            log("%s: %s" % (lang, "ok" if not r.problems else "; ".join(r.problems)))
            results.append(r)
        h.close()
    finally:
        CLEANUP.run_all()
    cols = ["managers", "cycles done", "failed", "storm", "rss", "fds", "threads", "cycles",
            "max call", "keys left", "time"]
    lines = ["| language | " + " | ".join(cols) + " | verdict |",
             "|---" * (len(cols) + 2) + "|"]
    for r in results:
        verdict = "ok" if not r.problems else "FAIL: " + "; ".join(r.problems)
        lines.append("| %s | %s | %s |" % (r.lang, " | ".join(r.cells.get(c, "") for c in cols),
                                          verdict))
    table = "\n".join(lines)
    mode = "short" if args.short else "full"
    how = (", under " + args.wrap.split()[0]) if args.wrap else (", lenient" if args.lenient else "")
    head = "soak (%s%s): %d managers and %d cycles per language, %d nodes, node_timeout %d ms" % (
        mode, how, args.managers,
        args.cycles, NODES, args.node_timeout_ms)
    print(head + "\n\n" + table)
    print("\nper-sample series and worker logs: %s" % workdir)
    (REPO / "target" / "soak").mkdir(parents=True, exist_ok=True)
    (REPO / "target" / "soak" / "results.md").write_text(head + "\n\n" + table + "\n")
    for r in results:
        log_file = workdir / (r.lang + ".log")
        if r.problems and log_file.exists():
            tail = log_file.read_text(errors="replace").splitlines()[-40:]
            print("\n%s worker's stderr (last %d lines):\n%s" % (r.lang, len(tail),
                                                                  "\n".join(tail)))
    failed = [r.lang for r in results if r.problems]
    print("\nsoak: %d languages, %d passed, %d failed%s" % (
        len(results), len(results) - len(failed), len(failed),
        (" (" + ", ".join(failed) + ")") if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
