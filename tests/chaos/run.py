#!/usr/bin/env python3
"""ironlock chaos suite: K worker processes contend for ONE resource on real redis-server nodes
while a nemesis injects faults; a checker then looks for two holders at once.

    python tests/chaos/run.py [--only NAME[,NAME...]] [--seconds S] [--list]

Stdlib only (the workers use the ironlock package, the C library or the Node package). Prints
one markdown table with a row per scenario and exits non-zero if any pass criterion fails.
Every process it starts is stopped, and every iptables rule it adds is removed, on every exit
path (normal end, exception, Ctrl-C, SIGTERM).
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from harness import CLEANUP, HARNESS, Harness, kill_proc  # noqa: E402
from resp import Resp  # noqa: E402

HERE = Path(__file__).resolve().parent
# The independent history checker (stdlib Python; shares no code with ironlock or this file).
HISTORY_CHECKER = HERE.parent / "history" / "check.py"
REPO = HERE.parents[1]
# Per-run directory (binaries + logs), so that concurrent runs do not trample each other; the
# directories of runs whose process is gone are removed when the next run starts.
CHAOS_ROOT = REPO / "target" / "chaos"
BUILD = CHAOS_ROOT / str(os.getpid())
LIBDIR = Path(os.environ.get("IRONLOCK_LIBDIR", str(REPO / "target" / "debug")))
TAG = "ironlock-chaos-%d" % os.getpid()
MARGIN_MS = 100  # a worker stops working this long before its validity ends


def log(msg: str) -> None:
    print("[chaos %7.2f] %s" % (time.monotonic() % 10000, msg), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- process hygiene

def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


class Firewall:
    """iptables DROP rules on loopback ports, tagged with a comment and always removed."""

    def __init__(self) -> None:
        self.ok = self._probe()
        self.active: Dict[int, bool] = {}
        self.cuts: set = set()
        self.lock = threading.Lock()
        if self.ok:
            CLEANUP.add(self.heal_all)
            CLEANUP.add(self.sweep)  # runs after heal_all: removes anything left with our tag
            self.sweep(stale_only=True)

    @staticmethod
    def _probe() -> bool:
        if os.environ.get("CHAOS_NO_IPTABLES") == "1" or not shutil.which("iptables"):
            return False
        r = subprocess.run(["iptables", "-w", "-L", "INPUT", "-n"], capture_output=True)
        return r.returncode == 0

    @staticmethod
    def _rules(port: int) -> List[List[str]]:
        return [
            ["INPUT", "-i", "lo", "-p", "tcp", "--dport", str(port),
             "-m", "comment", "--comment", TAG, "-j", "DROP"],
            ["INPUT", "-i", "lo", "-p", "tcp", "--sport", str(port),
             "-m", "comment", "--comment", TAG, "-j", "DROP"],
        ]

    def isolate(self, port: int) -> None:
        with self.lock:
            if self.active.get(port):
                return
            self.active[port] = True
            for rule in self._rules(port):
                subprocess.run(["iptables", "-w", "-I", *rule], check=True)

    def heal(self, port: int) -> None:
        with self.lock:
            if not self.active.pop(port, False):
                return
            for rule in self._rules(port):
                subprocess.run(["iptables", "-w", "-D", *rule], capture_output=True)

    def heal_all(self) -> None:
        for port in list(self.active):
            self.heal(port)
        for conn in list(self.cuts):
            self.uncut(*conn)

    @staticmethod
    def _cut_rule(sport: int, dport: int) -> List[str]:
        return ["INPUT", "-i", "lo", "-p", "tcp", "--sport", str(sport), "--dport", str(dport),
                "-m", "comment", "--comment", TAG, "-j", "DROP"]

    def cut(self, sport: int, dport: int) -> None:
        """Drops the packets of one direction of one connection (a master's replication
        stream to its replica): the data stays in the sender's buffer and is lost with it."""
        with self.lock:
            if (sport, dport) in self.cuts:
                return
            self.cuts.add((sport, dport))
            subprocess.run(["iptables", "-w", "-I", *self._cut_rule(sport, dport)], check=True)

    def uncut(self, sport: int, dport: int) -> None:
        with self.lock:
            if (sport, dport) not in self.cuts:
                return
            self.cuts.discard((sport, dport))
            subprocess.run(["iptables", "-w", "-D", *self._cut_rule(sport, dport)],
                           capture_output=True)

    def sweep(self, stale_only: bool = False) -> None:
        """Deletes our tagged rules; with stale_only, those of earlier runs whose process is gone."""
        out = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if not line.startswith("-A ") or "ironlock-chaos-" not in line:
                continue
            words = line.split()
            tag = next((w.strip('"') for w in words if w.strip('"').startswith("ironlock-chaos-")), "")
            if stale_only:
                pid = tag.rsplit("-", 1)[-1]
                if not pid.isdigit() or Path("/proc/%s" % pid).exists():
                    continue
            elif tag != TAG:
                continue
            subprocess.run(["iptables", "-w", "-D", *line.split()[1:]], capture_output=True)


# --------------------------------------------------------------------------- builds

def build_shim() -> Path:
    """Compiles the LD_PRELOAD clock shim and a redis-server wrapper that preloads it."""
    BUILD.mkdir(parents=True, exist_ok=True)
    so = BUILD / "clockshim.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(so),
                    str(HERE / "clockshim.c"), "-ldl", "-lpthread"], check=True)
    real = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if not real:
        raise RuntimeError("redis-server not found")
    wrapper = BUILD / "redis-server-clock"
    # Each node reads its own control file, named after its port (clock-PORT).
    wrapper.write_text(
        "#!/bin/sh\n"
        "port=0\nprev=\n"
        'for a in "$@"; do [ "$prev" = "--port" ] && port=$a; prev=$a; done\n'
        'IRONLOCK_CHAOS_CLOCK_FILE="$CHAOS_CLOCK_DIR/clock-$port" LD_PRELOAD=%s exec %s "$@"\n'
        % (so, real)
    )
    wrapper.chmod(0o755)
    return wrapper


def build_c_worker() -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / "worker_c"
    subprocess.run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(HERE / "worker.c"), "-pthread", "-I", str(REPO / "include"),
                    "-L", str(LIBDIR),
                    "-Wl,-rpath," + str(LIBDIR), "-lironlock"], check=True)
    return exe


# --------------------------------------------------------------------------- topologies

class Endpoint:
    """A TCP endpoint that forwards to one node and can be re-pointed: the primary endpoint of a
    managed Redis, whose name moves to the promoted replica after a failover. Clients see one
    `redis://` URL throughout; re-pointing drops every open connection, as a failover does."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.lock = threading.Lock()
        self.conns: List[socket.socket] = []
        self.closed = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        CLEANUP.add(self.close)
        threading.Thread(target=self._accept, name="endpoint", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                target = self.target
            try:
                upstream = socket.create_connection(("127.0.0.1", target), timeout=2)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def point(self, port: int) -> None:
        with self.lock:
            self.target = port
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        self.point(0)


def ask(port: int, *args: str) -> Any:
    """One command on a fresh connection (replies of any length, unlike the harness's `cmd`)."""
    c = Resp(port, timeout=2)
    try:
        return c.command(*args)
    finally:
        c.close()


def as_text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def replica_link_up(h: Harness, i: int) -> bool:
    try:
        return "master_link_status:up" in as_text(ask(h.ports[i], "INFO", "replication"))
    except OSError:
        return False


def replication_port(h: Harness, master: int) -> Optional[int]:
    """The replica's end of the master's replication connection (`CLIENT LIST TYPE replica`)."""
    listing = as_text(ask(h.ports[master], "CLIENT", "LIST", "TYPE", "replica"))
    for word in listing.split():
        if word.startswith("addr="):
            return int(word.rsplit(":", 1)[1])
    return None


# --------------------------------------------------------------------------- scenarios

@dataclass
class Ctx:
    """What a nemesis sees."""
    h: Harness
    fw: Firewall
    rng: random.Random
    end: float
    stop: threading.Event
    workers: List["subprocess.Popen[Any]"]
    clock_dir: Path
    resource: str
    events: Dict[str, int] = field(default_factory=dict)
    note: str = ""
    endpoint: Optional[Endpoint] = None
    master: int = 0
    voters: List[Harness] = field(default_factory=list)
    quarantine_s: float = 3.0
    # (CLOCK_MONOTONIC, fault, node) of the restarts and isolations: run_dir/nemesis.jsonl
    timeline: List[Tuple[float, str, int]] = field(default_factory=list)

    def sleep(self, s: float) -> bool:
        """Sleeps s seconds or until the fault phase ends; False once it has ended."""
        left = self.end - time.monotonic()
        if left <= 0 or self.stop.is_set():
            return False
        self.stop.wait(min(s, left))
        return time.monotonic() < self.end and not self.stop.is_set()

    def count(self, what: str) -> None:
        self.events[what] = self.events.get(what, 0) + 1

    def isolate(self, i: int) -> None:
        self.timeline.append((time.monotonic(), "isolate", i))
        if self.fw.ok:
            self.fw.isolate(self.h.ports[i])
        else:
            self.h.send("pause %d" % i)
        self.count("isolations" if self.fw.ok else "isolations(SIGSTOP)")

    def heal(self, i: int) -> None:
        self.timeline.append((time.monotonic(), "heal", i))
        if self.fw.ok:
            self.fw.heal(self.h.ports[i])
        else:
            self.h.send("resume %d" % i)

    def restart(self, i: int) -> None:
        self.timeline.append((time.monotonic(), "restart", i))
        self.h.send("restart %d" % i)
        self.count("restarts")

    def set_clock(self, i: int, rate: float, offset: float) -> None:
        tmp = self.clock_dir / ("tmp-%d" % self.h.ports[i])
        tmp.write_text("%r %r\n" % (rate, offset))
        tmp.replace(self.clock_dir / ("clock-%d" % self.h.ports[i]))


def nem_none(ctx: Ctx) -> None:
    while ctx.sleep(60):
        pass


def nem_kill_restart(ctx: Ctx) -> None:
    """kill -9 + immediate restart of one random node at a time, repeatedly. Gaps alternate:
    0.3 s (two nodes lose their keys within one lock's life) and 3.8 s (longer than the
    restart quarantine, so the quarantined scenario regains a quorum in between)."""
    n = len(ctx.h.ports)
    last = -1
    gaps = [0.3, 3.8]
    k = 0
    if not ctx.sleep(1.0):
        return
    while True:
        node = ctx.rng.choice([i for i in range(n) if i != last])
        ctx.restart(node)
        last = node
        if not ctx.sleep(gaps[k % 2]):
            return
        k += 1


def nem_churn(ctx: Ctx) -> None:
    """kill -9 + immediate restart of a random node every 1.6 s, never one of the two restarted
    last: at most two of the five nodes are quarantined at a time, so three eligible nodes keep
    granting (each grant then needs every eligible node)."""
    n = len(ctx.h.ports)
    recent: List[int] = []
    if not ctx.sleep(0.5):
        return
    while True:
        node = ctx.rng.choice([i for i in range(n) if i not in recent])
        ctx.restart(node)
        recent = (recent + [node])[-2:]
        if not ctx.sleep(1.6):
            return


def nem_rolling(ctx: Ctx) -> None:
    """Rolling restart of every node (0.4 s apart), then 4.5 s of calm, repeatedly."""
    n = len(ctx.h.ports)
    if not ctx.sleep(1.0):
        return
    while True:
        for i in range(n):
            ctx.restart(i)
            if not ctx.sleep(0.4):
                return
        if not ctx.sleep(4.5):
            return


def nem_rolling_slow(ctx: Ctx) -> None:
    """Rolling restart of every node, 2.5 s apart (longer than a restarted node's quarantine of
    2.01 s with max_ttl 1 s), as an operator upgrades nodes one at a time; then calm. A 5 s hold
    that starts before the second restart sees two of the three nodes forget its key."""
    n = len(ctx.h.ports)
    if not ctx.sleep(1.0):
        return
    for i in range(n):
        ctx.restart(i)
        if not ctx.sleep(2.5):
            return


def nem_isolate_then_restart(ctx: Ctx) -> None:
    """A node A isolated (iptables DROP of its port), healed as soon as the lock has changed
    hands without it (the new holder's token is on both other nodes, or after 3 s), and right
    then ANOTHER node B restarted: A never saw the holder's key and B forgot it. 4 s calm."""
    n = len(ctx.h.ports)
    if not ctx.sleep(0.8):
        return

    def holder(conns: List[Resp]) -> Optional[str]:
        tokens = {c.command("GET", ctx.resource) for c in conns}
        return tokens.pop() if len(tokens) == 1 else None

    while True:
        a = ctx.rng.randrange(n)
        others = [i for i in range(n) if i != a]
        b = ctx.rng.choice(others)
        conns = [Resp(ctx.h.ports[i], timeout=2) for i in others]
        try:
            before = holder(conns)
            ctx.isolate(a)
            try:
                deadline = time.monotonic() + 3.0
                ok = True
                while time.monotonic() < deadline:
                    ok = ctx.sleep(0.02)
                    if not ok:
                        break
                    now = holder(conns)
                    if now is not None and now != before:
                        break
            finally:
                ctx.heal(a)
        finally:
            for c in conns:
                c.close()
        if not ok:
            return
        ctx.restart(b)
        if not ctx.sleep(4.0):
            return


def kill_after_unreplicated_grant(ctx: Ctx, plan: List[Tuple[Harness, int]]) -> bool:
    """For each (harness, master index): cuts the master's replication stream (iptables DROP of
    its packets to the replica: the data stays in its send buffer and dies with it), waits until
    a new grant of the resource has landed on every one of them (one token, at most 3 s), lets
    the holder into its hold, and kills them all. False once the fault phase has ended."""
    links = []
    for h, m in plan:
        link = replication_port(h, m)
        if link is None or not ctx.fw.ok:
            raise RuntimeError("no replication connection to cut (or no iptables)")
        links.append((h.ports[m], link))
    for port, link in links:
        ctx.fw.cut(port, link)
    try:
        before = [ask(h.ports[m], "GET", ctx.resource) for h, m in plan]
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            if not ctx.sleep(0.01):
                return False
            now = [ask(h.ports[m], "GET", ctx.resource) for h, m in plan]
            if all(x is not None and x != b for x, b in zip(now, before)) and len(set(now)) == 1:
                break
        if not ctx.sleep(0.1):
            return False
        for h, m in plan:
            h.send("kill %d" % m)
    finally:
        for port, link in links:
            ctx.fw.uncut(port, link)
    return True


def nem_failover_endpoint(ctx: Ctx) -> None:
    """A master and its replica behind one endpoint. Repeatedly: the replication stream is cut
    (iptables DROP of the master's packets to the replica), a new grant lands on the master only,
    the master is killed, the replica promoted (`REPLICAOF NO ONE`) and the endpoint re-pointed
    to it; the old master comes back empty as the new replica. The promoted replica lacks the
    holder's key: only the failover quarantine keeps a second client out. 4 s calm between."""
    assert ctx.endpoint is not None
    if not ctx.sleep(1.0):
        return
    while True:
        m, r = ctx.master, 1 - ctx.master
        if not kill_after_unreplicated_grant(ctx, [(ctx.h, m)]):
            return
        ctx.h.send("cmd %d REPLICAOF NO ONE" % r)
        ctx.endpoint.point(ctx.h.ports[r])
        ctx.master = r
        ctx.count("failovers")
        ctx.h.send("start %d" % m)
        ctx.h.send("cmd %d REPLICAOF 127.0.0.1 %d" % (m, ctx.h.ports[r]))
        deadline = time.monotonic() + 5.0
        while not replica_link_up(ctx.h, m) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not ctx.sleep(4.0):
            return


def await_sentinel_failover(h: Harness, m: int) -> None:
    """Waits (at most 20 s) until the sentinels name a master other than data node `m`."""
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        try:
            if int(h.send("master")) != m:
                return
        except RuntimeError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the sentinels did not fail over within 20 s")


def nem_failover_sentinel(ctx: Ctx) -> None:
    """Voters that are Sentinel groups (a master, a replica, three sentinels). Repeatedly, on
    one voter (N = 1) or two at once (N = 3, so that a majority of a holder's votes can vanish):
    the replication stream is cut, a new grant lands on the masters only, the masters are killed
    and the sentinels fail over on their own (down after 1 s); the old masters come back empty
    and the sentinels make them replicas. Calm past the quarantine between."""
    n = len(ctx.voters)
    if not ctx.sleep(1.0):
        return
    while True:
        chosen = ctx.rng.sample(range(n), min(2, n))
        plan = []
        for v in chosen:
            h = ctx.voters[v]
            plan.append((h, int(h.send("master"))))
        if not kill_after_unreplicated_grant(ctx, plan):
            return
        for h, m in plan:
            await_sentinel_failover(h, m)
            ctx.count("failovers")
            h.send("start %d" % m)
            # What the sentinels do to a returning old master, at once rather than at their next
            # check: it becomes a replica of the new one.
            new = int(h.send("master"))
            h.send("cmd %d REPLICAOF 127.0.0.1 %d" % (m, h.ports[new]))
        for h, m in plan:
            deadline = time.monotonic() + 10.0
            while not replica_link_up(h, m) and time.monotonic() < deadline:
                time.sleep(0.02)
        # Calm past the failover quarantine, so that the guarded run makes progress in between.
        if not ctx.sleep(ctx.quarantine_s + 0.5):
            return


def nem_failover_sentinel_pause(ctx: Ctx) -> None:
    """One voter that is a Sentinel group. Repeatedly: once a new grant has landed on its master,
    the master is SIGSTOPped until the sentinels have failed over, then resumed: it is still a
    master in its own eyes, holding its keys, and the clients whose connections reach it are
    not told, until the sentinels demote it seconds later. Every other client connection to it
    is closed, so that some clients find the new master while others still reach the old one.
    Calm past the quarantine after the demotion."""
    h = ctx.voters[0]
    if not ctx.sleep(1.0):
        return
    while True:
        m = int(h.send("master"))
        before = ask(h.ports[m], "GET", ctx.resource)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            if not ctx.sleep(0.01):
                return
            now = ask(h.ports[m], "GET", ctx.resource)
            if now is not None and now != before:
                break
        h.send("pause %d" % m)
        try:
            await_sentinel_failover(h, m)
        finally:
            h.send("resume %d" % m)
        ctx.count("failovers")
        # Every other client connection of the resumed master is closed (a blip on some
        # clients' network): those clients reconnect and find the new master through the
        # sentinels, while the others still reach the old one.
        listing = as_text(ask(h.ports[m], "CLIENT", "LIST", "TYPE", "normal"))
        addrs = sorted(w[5:] for w in listing.split() if w.startswith("addr="))
        for addr in addrs[::2]:
            try:
                ask(h.ports[m], "CLIENT", "KILL", "ADDR", addr)
            except RuntimeError:
                pass  # gone meanwhile
        deadline = time.monotonic() + 30.0
        while "role:slave" not in as_text(ask(h.ports[m], "INFO", "replication")):
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinels did not demote the resumed master within 30 s")
            if not ctx.sleep(0.05):
                return
        if not ctx.sleep(ctx.quarantine_s + 0.5):
            return


def cluster_roles(h: Harness, slot: int) -> Tuple[Optional[int], Optional[int]]:
    """The indexes of the master serving `slot` and of one of its live replicas, as the first
    node that answers sees them (`CLUSTER NODES`)."""
    for port in h.ports:
        try:
            text = as_text(ask(port, "CLUSTER", "NODES"))
        except OSError:
            continue
        rows = [line.split() for line in text.splitlines() if line.strip()]
        index = {r[0]: h.ports.index(int(r[1].split("@")[0].rsplit(":", 1)[1])) for r in rows}
        for r in rows:
            if "master" not in r[2] or "fail" in r[2]:
                continue
            for rng in r[8:]:
                lo, _, hi = rng.partition("-")
                if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                    replica = next((index[x[0]] for x in rows
                                    if x[3] == r[0] and "fail" not in x[2]), None)
                    return index[r[0]], replica
        return None, None
    return None, None


def nem_failover_cluster(ctx: Ctx) -> None:
    """One voter that is a Redis Cluster (three shards, a replica each). Repeatedly, on the
    shard that serves the resource: its replication stream is cut, a new grant lands on its
    master only, the master is killed and the cluster promotes the replica on its own; the old
    master comes back empty and rejoins as a replica. Calm past the quarantine between."""
    slot = next(int(ask(p, "CLUSTER", "KEYSLOT", ctx.resource)) for p in ctx.h.ports)
    if not ctx.sleep(1.0):
        return
    while True:
        m, r = cluster_roles(ctx.h, slot)
        if m is None or r is None or not ctx.fw.ok:
            raise RuntimeError("no master and replica for the resource's slot (or no iptables)")
        if not kill_after_unreplicated_grant(ctx, [(ctx.h, m)]):
            return
        deadline = time.monotonic() + 20.0
        while cluster_roles(ctx.h, slot)[0] != r:
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not promote the replica within 20 s")
            time.sleep(0.05)
        ctx.count("failovers")
        ctx.h.send("start %d" % m)
        deadline = time.monotonic() + 15.0
        while not replica_link_up(ctx.h, m) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not ctx.sleep(ctx.quarantine_s + 0.5):
            return


def nem_node_sigstop(ctx: Ctx) -> None:
    """One node at a time SIGSTOPped for 2.5 s (longer than the 1 s ttl), then resumed."""
    n = len(ctx.h.ports)
    i = 0
    if not ctx.sleep(0.8):
        return
    while True:
        node = i % n
        ctx.h.send("pause %d" % node)
        ctx.count("sigstops")
        try:
            ok = ctx.sleep(2.5)
        finally:
            ctx.h.send("resume %d" % node)
        if not ok or not ctx.sleep(0.8):
            return
        i += 1


def nem_stall(ctx: Ctx) -> None:
    """Alternately `DEBUG SLEEP 2` and `CLIENT PAUSE 2000 ALL` on one node at a time."""
    n = len(ctx.h.ports)
    i = 0
    if not ctx.sleep(0.8):
        return
    while True:
        node = i % n
        conn = Resp(ctx.h.ports[node], timeout=10)
        try:
            if i % 2 == 0:
                conn.command("DEBUG", "SLEEP", "2")  # blocks this thread for the 2 s
                ctx.count("debug_sleeps")
            else:
                conn.command("CLIENT", "PAUSE", "2000", "ALL")
                ctx.count("client_pauses")
                if not ctx.sleep(2.0):
                    conn.command("CLIENT", "UNPAUSE")
                    return
        finally:
            conn.close()
        if not ctx.sleep(0.8):
            return
        i += 1


def nem_flaky(ctx: Ctx) -> None:
    """Flaky partitions: 1 or 2 random nodes cut off for 0.2-1.5 s, 0.1-0.8 s apart."""
    n = len(ctx.h.ports)
    if not ctx.sleep(0.5):
        return
    while True:
        cut = ctx.rng.sample(range(n), ctx.rng.choice([1, 2]))
        for i in cut:
            ctx.isolate(i)
        try:
            ok = ctx.sleep(ctx.rng.uniform(0.2, 1.5))
        finally:
            for i in cut:
                ctx.heal(i)
        if not ok or not ctx.sleep(ctx.rng.uniform(0.1, 0.8)):
            return


def nem_worker_pause(ctx: Ctx) -> None:
    """Workers configured with CHAOS_SELF_STOP SIGSTOP themselves inside their critical section
    (right after the referee INCR, before the work and the fenced write); they are resumed
    2.5 s later (the ttl is 1 s) — a GC pause after the grant."""
    stopped: Dict[int, float] = {}
    try:
        while ctx.sleep(0.02):
            for w in ctx.workers:
                if w.pid in stopped:
                    if time.monotonic() - stopped[w.pid] >= 2.5:
                        os.kill(w.pid, signal.SIGCONT)
                        stopped[w.pid] = float("inf")
                    continue
                try:
                    state = Path("/proc/%d/stat" % w.pid).read_text().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    continue
                if state == "T":
                    stopped[w.pid] = time.monotonic()
                    ctx.count("worker_sigstops")
    finally:
        for w in ctx.workers:
            if w.poll() is None:
                os.kill(w.pid, signal.SIGCONT)


def nem_protected(ctx: Ctx) -> None:
    """Workers pause past their validity (as worker-pause), while random nodes are cut off
    (as flaky-partitions, one at a time) and a node is restarted every 4 s."""
    threads = [threading.Thread(target=nem_worker_pause, args=(ctx,), daemon=True)]
    threads[0].start()
    n = len(ctx.h.ports)
    try:
        k = 0
        while ctx.sleep(0.5):
            k += 1
            if k % 8 == 0:
                ctx.restart(ctx.rng.randrange(n))
            elif k % 2 == 0:
                i = ctx.rng.randrange(n)
                ctx.isolate(i)
                try:
                    ok = ctx.sleep(ctx.rng.uniform(0.2, 0.6))
                finally:
                    ctx.heal(i)
                if not ok:
                    break
    finally:
        threads[0].join(timeout=10)


def nem_clock_fast(ctx: Ctx) -> None:
    """Node 0's wall clock runs 4x fast (its keys expire after a quarter of their ttl)."""
    ctx.set_clock(0, 4.0, 0.0)
    ctx.count("fast_clocks")
    try:
        while ctx.sleep(60):
            pass
    finally:
        ctx.set_clock(0, 1.0, 0.0)


def nem_clock_jump(ctx: Ctx) -> None:
    """The wall clocks of a majority (nodes 0 and 1 of 3) jump 60 s forward every 1.5 s: every
    key on them expires at once, while the holder's validity (client monotonic clock) runs on."""
    offset = 0.0
    if not ctx.sleep(1.0):
        return
    while True:
        offset += 60.0
        for i in (0, 1):
            ctx.set_clock(i, 1.0, offset)
        ctx.count("clock_jumps")
        if not ctx.sleep(1.5):
            return


@dataclass
class Scenario:
    name: str
    nemesis: Callable[[Ctx], None]
    kind: str  # safe | must_fail | overrun | report | held | must_lose
    expect: str
    langs: Sequence[str] = ("py",) * 6
    nodes: int = 3
    quarantine: bool = True
    ttl_ms: int = 1000
    hold_ms: int = 100
    max_ttl_ms: int = 2000
    seconds: float = 12.0
    debug: bool = False
    clock: bool = False
    self_stop: Dict[int, int] = field(default_factory=dict)  # worker index -> acquisition no.
    keep: bool = False  # hold under auto-extension for hold_ms (longer than the ttl)
    reseat: bool = True
    limit: int = 0  # > 0: Python workers take permits of a semaphore of this limit (SPEC §11)
    fair: bool = False  # every worker's acquires wait in line (SPEC §10)
    # "fenced" / "unfenced": workers read-modify-write a counter in storage.py (the protected
    # resource), which refuses stale fences when fenced.
    storage: str = ""
    # "endpoint": one voter, a master and a replica behind a movable endpoint; "sentinel":
    # `nodes` voters, each a master and a replica under three sentinels.
    topology: str = ""
    # Read-write locks: each acquisition reads or writes (1 in rw_writes writes, then the writer
    # pauses rw_pause_ms so that readers get in past writer preference).
    rw: bool = False
    rw_writes: int = 4
    rw_pause_ms: int = 150
    # The negative control: workers (of every language) take their reads through a manager of
    # only the first rw_read_nodes nodes (readers that count themselves granted by a minority).
    rw_read_nodes: int = 0
    # Leader election: workers are candidates (worker.py: elect) and observers; worker index ->
    # the leadership (of its first life) at which it kills itself.
    elect: bool = False
    die_at: Dict[int, int] = field(default_factory=dict)


SAFE = "0 strict violations, 0 referee hits"
SAFE_K = ("semaphore, limit 3: never more than 3 valid holders at once (0 strict violations), "
          "0 referee hits")
MUST_FAIL = "quarantine off: strict violations > 0 (the suite can fail)"

HELD = "0 strict violations, 0 referee hits, 0 locks lost while held"
MUST_LOSE = ("reseat off: locks lost while held > 0 (the suite can fail); a holder learns of "
             "the loss after the fact, so overlaps may show")
# Long holds under auto-extension (ttl 1 s, held 5 s) while every node restarts once, 2.5 s apart.
ROLLING_HELD = dict(nemesis=nem_rolling_slow, langs=("py", "c", "node") * 2, ttl_ms=1000,
                    max_ttl_ms=1000, hold_ms=5000, seconds=14.0, keep=True)

# Restart scenarios hold the lock for most of its ttl so that a fault during a hold is likely.
RESTART = dict(ttl_ms=2000, hold_ms=1700, max_ttl_ms=2000, seconds=20.0)
FAILOVER = dict(RESTART, topology="endpoint", nodes=2, langs=("py", "node") * 2, seconds=18.0)
# A Sentinel failover takes 2-3 s (down after 1 s, then an election): holds must outlast it for
# the control to bite, so the ttl is 5 s (failover quarantine 8.05 s: 6.05 s and the old master's
# 2 s lease).
SENTINEL = dict(topology="sentinel", nodes=1, langs=("py", "node") * 2, ttl_ms=5000,
                hold_ms=4500, max_ttl_ms=5000, seconds=30.0)
# A cluster promotes a replica 1-2 s after its master dies (cluster-node-timeout 1 s).
CLUSTER = dict(SENTINEL, topology="cluster", seconds=40.0)


# Read-write locks on 5 nodes: 2 Python + 2 C + 2 Node workers each read or write one resource
# (1 in 4 writes), ttl 1 s (quarantine 2.01 s), holds of 100 ms.
RW = dict(rw=True, nodes=5, langs=("py", "c", "node") * 2, ttl_ms=1000, max_ttl_ms=1000,
          hold_ms=100, seconds=10.0)
# Leader election on 5 nodes: candidates campaign (ttl 1.5 s), lead 50-400 ms, then resign or
# die (SIGKILL of the worker while leading, 1 in 10 and the first three workers — one of each
# language — at their 2nd leadership; the runner starts them again); 2 Python + 2 C + 2 Node
# candidates.
ELECT = dict(elect=True, nodes=5, langs=("py", "c", "node") * 2, ttl_ms=1500, max_ttl_ms=2000,
             hold_ms=400, seconds=12.0, die_at={0: 2, 1: 2, 2: 2})
SAFE_RW = ("0 strict rw violations (a write valid with another read or write), 0 referee hits, "
           "reads and writes of every language, read-read overlaps > 0")


def scenarios() -> List[Scenario]:
    mixed = ("py", "py", "c", "c", "node", "node")
    return [
        Scenario("control", nem_none, "safe", SAFE, hold_ms=20),
        Scenario("control-c", nem_none, "safe", SAFE + " (C library workers)", langs=("c",) * 6,
                 hold_ms=20),
        Scenario("control-node", nem_none, "safe", SAFE + " (Node workers)",
                 langs=("node",) * 6, hold_ms=20),
        Scenario("kill-restart", nem_kill_restart, "safe", SAFE, **RESTART),
        Scenario("kill-restart", nem_kill_restart, "must_fail", MUST_FAIL, quarantine=False,
                 **RESTART),
        Scenario("kill-restart-churn", nem_churn, "safe",
                 SAFE + " while 2 of 5 nodes are always fresh", nodes=5, hold_ms=50,
                 max_ttl_ms=2000, seconds=16.0),
        Scenario("kill-restart-mixed", nem_kill_restart, "safe",
                 SAFE + " (2 Python + 2 C + 2 Node workers)", langs=mixed, **RESTART),
        Scenario("rolling-restart", nem_rolling, "safe", SAFE, **RESTART),
        Scenario("semaphore-kill-restart", nem_kill_restart, "safe", SAFE_K, nodes=5, limit=3,
                 langs=("py",) * 8, **RESTART),
        Scenario("fair-kill-restart", nem_kill_restart, "safe",
                 SAFE + " (fair: every acquire waits in line; 2 Python + 2 C + 2 Node workers)",
                 langs=mixed, fair=True, **RESTART),
        Scenario("fair-semaphore-flaky", nem_flaky, "safe",
                 SAFE_K + " (fair permits under flaky partitions)", nodes=5, limit=3,
                 langs=("py",) * 8, fair=True, hold_ms=200),
        Scenario("rolling-restart", nem_rolling, "must_fail", MUST_FAIL, quarantine=False,
                 **RESTART),
        Scenario("rolling-restart-held", kind="held", expect=HELD, **ROLLING_HELD),
        Scenario("rolling-restart-held-noreseat", kind="must_lose", expect=MUST_LOSE,
                 reseat=False, **ROLLING_HELD),
        Scenario("isolate-heal-restart", nem_isolate_then_restart, "safe", SAFE,
                 **{**RESTART, "seconds": 24.0}),
        # Only 5 restarts here: with quarantine off a violation is likely, not certain (0 in one
        # of four CI runs), so it is reported; kill-restart and rolling-restart prove the suite
        # can fail.
        Scenario("isolate-heal-restart", nem_isolate_then_restart, "report",
                 "reported only: quarantine off, violations likely (the restart scenarios above "
                 "must show them)", quarantine=False, **{**RESTART, "seconds": 24.0}),
        Scenario("failover-endpoint", nem_failover_endpoint, "safe",
                 SAFE + " (N = 1: a replica promoted under one redis:// endpoint, replication "
                 "cut first; 2 Python + 2 Node workers)", **FAILOVER),
        Scenario("failover-endpoint", nem_failover_endpoint, "must_fail",
                 "quarantine off: the promoted replica lacks the holder's key, strict "
                 "violations > 0 (the suite can fail)", quarantine=False, **FAILOVER),
        Scenario("failover-sentinel", nem_failover_sentinel, "safe",
                 SAFE + " (N = 1 Sentinel voter: its master killed after its replication was "
                 "cut; the sentinels fail over; 2 Python + 2 Node workers)", **SENTINEL),
        Scenario("failover-sentinel", nem_failover_sentinel, "must_fail",
                 "quarantine off: strict violations > 0 (the suite can fail)", quarantine=False,
                 **SENTINEL),
        Scenario("failover-sentinel-paused", nem_failover_sentinel_pause, "safe",
                 SAFE + " (N = 1 Sentinel voter: its master paused until the sentinels fail "
                 "over, then resumed, still a master until they demote it; 2 Python + 2 Node "
                 "workers)", **SENTINEL),
        Scenario("failover-sentinel-3", nem_failover_sentinel, "safe",
                 SAFE + " (N = 3 Sentinel voters, two failed over at once; Python, C and Node "
                 "workers)", **{**SENTINEL, "nodes": 3, "langs": mixed}),
        Scenario("failover-cluster", nem_failover_cluster, "safe",
                 SAFE + " (N = 1 Redis Cluster voter, 3 shards with a replica each: the "
                 "resource's shard master killed after its replication was cut; the cluster "
                 "promotes the replica; 2 Python + 2 Node workers)", **CLUSTER),
        # Reported, not judged: with quarantine off a violation is likely, not certain (2, 1 and
        # 0 in three 40 s runs: the cluster promotes at its own pace); failover-endpoint and
        # failover-sentinel prove that the failover suite can fail.
        Scenario("failover-cluster", nem_failover_cluster, "report",
                 "reported only: quarantine off, violations likely (the endpoint and Sentinel "
                 "failover controls must show them)", quarantine=False, **CLUSTER),
        Scenario("rw-kill-restart", nem_churn, "rw",
                 SAFE_RW + " (2 of 5 nodes always fresh)", **RW),
        Scenario("rw-flaky-partitions", nem_flaky, "rw", SAFE_RW + " (flaky partitions)", **RW),
        # The negative control of both: every worker's reads are granted by 2 of the 5 nodes (a
        # manager of nodes 0 and 1 only), while writes still need 3: a write on nodes 2-4 is
        # valid together with such a read. (Under churn, it bit only 3 times in one run: some
        # node is nearly always fresh, and a write on 2-4 needs all of them eligible.)
        Scenario("rw-minority-readers", nem_flaky, "rw_must_fail",
                 "readers admitted by a minority (reads on 2 of 5 nodes, writes on 3): strict rw "
                 "violations > 0 (the rw checker can fail)", rw_read_nodes=2, **RW),
        Scenario("election-kill-restart", nem_churn, "elect",
                 "at most one valid leader at a time (0 strict violations), terms increasing, 0 "
                 "referee hits; observers' terms never going back and agreeing; 2 Python + 2 C + "
                 "2 Node candidates resign, die (SIGKILL, restarted) or (C) drop the leadership "
                 "unresigned while 2 of 5 nodes are always fresh", **ELECT),
        Scenario("node-sigstop", nem_node_sigstop, "safe", SAFE, hold_ms=300),
        Scenario("node-stall", nem_stall, "safe", SAFE, hold_ms=300, debug=True),
        Scenario("flaky-partitions", nem_flaky, "safe", SAFE, nodes=5, hold_ms=200),
        Scenario("worker-pause", nem_worker_pause, "overrun",
                 "overruns > 0 but 0 strict violations; fenced writes reject the stale holder "
                 "(a Python and a C worker pause)",
                 langs=("py", "c", "py", "c"), hold_ms=150, self_stop={0: 2, 1: 5},
                 # In line (SPEC §10): every worker's n-th grant comes within seconds. Unfair, a
                 # worker can be starved for most of the run and pause too late for anyone to
                 # enter after its validity (one CI run: 1 pause, 0 overruns).
                 fair=True),
        # Kleppmann's storage example: read-modify-write of a counter in a separate storage
        # service under pauses past the validity, partitions and restarts. Unfenced, the paused
        # worker's stale write loses an update (the control); fenced, the service refuses it.
        Scenario("protected-resource", nem_protected, "protected",
                 "fenced storage: 0 lost updates, stale writes refused (pauses, partitions, "
                 "restarts)",
                 langs=("py",) * 4, hold_ms=150, self_stop={0: 2, 1: 5}, storage="fenced",
                 fair=True),
        Scenario("protected-resource-unfenced", nem_protected, "protected_control",
                 "unfenced storage (the control): lost updates > 0",
                 langs=("py",) * 4, hold_ms=150, self_stop={0: 2, 1: 5}, storage="unfenced",
                 fair=True),
        Scenario("clock-fast", nem_clock_fast, "report",
                 "reported only: violations expected whenever a grant's bare quorum includes "
                 "the fast node; outside what a client can prevent",
                 hold_ms=600, clock=True),
        Scenario("clock-jump", nem_clock_jump, "report",
                 "reported only: a majority's clocks jump; violations expected, "
                 "outside what a client can prevent", hold_ms=600, clock=True),
    ]


# --------------------------------------------------------------------------- checker

def over_limit(recs: List[Dict[str, Any]], limit: int) -> int:
    """Semaphores: acquisitions that entered while `limit` others were inside their validity
    ([enter, min(leave, deadline)]), i.e. more than `limit` valid holders at once."""
    bad = 0
    for i, b in enumerate(recs):
        inside = sum(1 for a in recs[:i] if a["enter"] <= b["enter"] < min(a["leave"], a["deadline"]))
        if inside >= limit and b["enter"] < min(b["leave"], b["deadline"]):
            bad += 1
    return bad


def check(records: List[Dict[str, Any]], limit: int = 0) -> Dict[str, int]:
    """strict: two holders' [enter, min(leave, deadline)] overlap; overrun: their [enter, leave]
    overlap but only after a validity ran out. Counted per pair of acquisitions. For a
    semaphore (`limit` > 0): strict counts holders beyond the limit, the referee may count up to
    the limit, and fences are not ordered by entry (several holders at once)."""
    recs = sorted(records, key=lambda r: r["enter"])
    if limit:
        tokens = [r["token"] for r in recs]
        return {
            "acquisitions": len(recs),
            "strict": over_limit(recs, limit),
            "overrun": 0,
            "referee": sum(1 for r in recs if "referee" in r and r["referee"] > limit),
            "duplicates": len(tokens) - len(set(tokens)),
            "regressions": sum(1 for r in recs if not isinstance(r.get("fence"), int)),
            "rejections": 0,
            "lost": sum(1 for r in recs if r.get("lost")),
            "quarantined": sum(1 for r in recs if "not_eligible" in r.get("votes", ())),
        }
    strict = overrun = 0
    for i, a in enumerate(recs):
        a_valid_end = min(a["leave"], a["deadline"])
        for b in recs[i + 1:]:
            if b["enter"] >= a["leave"]:
                break
            if b["enter"] < a_valid_end and b["enter"] < min(b["leave"], b["deadline"]):
                strict += 1
            else:
                overrun += 1
    tokens = [r["token"] for r in recs]
    fences = [r.get("fence") for r in recs]
    regressions = sum(1 for f in fences if not isinstance(f, int))
    prev = None
    for f in fences:
        if isinstance(f, int):
            if prev is not None and f <= prev:
                regressions += 1
            prev = f
    return {
        "acquisitions": len(recs),
        "strict": strict,
        "overrun": overrun,
        "referee": sum(1 for r in recs if "referee" in r and r["referee"] != 1),
        "duplicates": len(tokens) - len(set(tokens)),
        "regressions": regressions,
        "rejections": sum(1 for r in recs if r.get("fenced_write") == 0),
        "lost": sum(1 for r in recs if r.get("lost")),
        # grants (Python workers log their votes) while a node was quarantined
        "quarantined": sum(1 for r in recs if "not_eligible" in r.get("votes", ())),
    }


def check_rw(records: List[Dict[str, Any]]) -> Dict[str, int]:
    """Read-write locks. strict: a write's [enter, min(leave, deadline)] overlaps another read's
    or write's (counted per pair); overrun: such [enter, leave] intervals overlap only after a
    validity ran out; rr_overlaps: two reads valid at once (allowed, and expected: readers
    share); referee: acquisitions whose entry found a conflicting holder on the referee; fence
    regressions: a write's fence not above every fence entered before it, or a read's not above
    every earlier write's; access mismatches: the binding's `access` is not the side asked."""
    recs = sorted(records, key=lambda r: r["enter"])
    strict = overrun = rr = 0
    for i, a in enumerate(recs):
        a_valid_end = min(a["leave"], a["deadline"])
        for b in recs[i + 1:]:
            if b["enter"] >= a["leave"]:
                break
            valid = b["enter"] < a_valid_end and b["enter"] < min(b["leave"], b["deadline"])
            if a["access"] == "read" and b["access"] == "read":
                rr += 1 if valid else 0
            elif valid:
                strict += 1
            else:
                overrun += 1
    regressions = 0
    top_any = top_write = None
    for r in recs:
        f = r.get("fence")
        if not isinstance(f, int):
            regressions += 1
            continue
        bar = top_any if r["access"] == "write" else top_write
        if bar is not None and f <= bar:
            regressions += 1
        top_any = f if top_any is None else max(top_any, f)
        if r["access"] == "write":
            top_write = f if top_write is None else max(top_write, f)
    tokens = [r["token"] for r in recs]
    langs = {r["lang"] for r in recs}
    return {
        "acquisitions": len(recs),
        "reads": sum(1 for r in recs if r["access"] == "read"),
        "writes": sum(1 for r in recs if r["access"] == "write"),
        "rr_overlaps": rr,
        "strict": strict,
        "overrun": overrun,
        "referee": sum(1 for r in recs if r.get("referee", 0) != 0),
        "duplicates": len(tokens) - len(set(tokens)),
        "regressions": regressions,
        "rejections": sum(1 for r in recs if r.get("fenced_write") == 0),
        "mismatches": sum(1 for r in recs if r.get("access") != r.get("asked")),
        # sides each language was granted, e.g. {"c": 2, ...}: 2 = reads and writes
        "lang_sides": {lang: len({r["access"] for r in recs if r["lang"] == lang})
                       for lang in langs},
        "lost": 0,
        "quarantined": sum(1 for r in recs if "not_eligible" in r.get("votes", ())),
    }


def check_elect(records: List[Dict[str, Any]],
                observations: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Leader election. strict: two leaderships' [enter, min(leave, deadline)] overlap (two
    leaders at once; per pair); regressions: a term not above every term entered before it;
    referee: the leaders counter was not 1 on entry. Observers: each one's terms (null = nobody
    leads, skipped) must never go back (observer_regressions: a term below one it saw before),
    and a term must come with the same value in every observer and in the leader's own log
    (observer_mismatches); counted, not judged: observer_flaps, the same leader delivered again
    after a null (a read that saw fewer than a majority holding a leadership still valid: one
    holder slow past node_timeout or restarting), and observed_unlogged, observed terms of no
    logged leadership."""
    recs = sorted(records, key=lambda r: r["enter"])
    strict = overrun = 0
    for i, a in enumerate(recs):
        a_valid_end = min(a["leave"], a["deadline"])
        for b in recs[i + 1:]:
            if b["enter"] >= a["leave"]:
                break
            if b["enter"] < a_valid_end and b["enter"] < min(b["leave"], b["deadline"]):
                strict += 1
            else:
                overrun += 1
    regressions, top = 0, None
    for r in recs:
        if not isinstance(r.get("term"), int) or (top is not None and r["term"] <= top):
            regressions += 1
        if isinstance(r.get("term"), int):
            top = r["term"] if top is None else max(top, r["term"])
    values = {r["term"]: r["value"] for r in recs}
    seen: Dict[int, str] = {}
    obs_regressions = obs_mismatches = unlogged = flaps = 0
    streams: Dict[Tuple[int, int], List[Dict[str, Any]]] = {}
    for o in observations:
        if "observed" in o:
            streams.setdefault((o["worker"], o.get("life", 0)), []).append(o)
    for stream in streams.values():
        last = None
        for o in sorted(stream, key=lambda o: o["at"]):
            now = o["observed"]
            if now is None:
                continue
            term, value = now["term"], now["value"]
            if last is not None and term < last:
                obs_regressions += 1
            elif last is not None and term == last:
                flaps += 1  # only after a null: the observer delivers changes only
            last = term if last is None else max(last, term)
            if seen.setdefault(term, value) != value:
                obs_mismatches += 1
            if term not in values:
                unlogged += 1
            elif values[term] != value:
                obs_mismatches += 1
    tokens = [r["token"] for r in recs]
    return {
        "acquisitions": len(recs),
        "strict": strict,
        "overrun": overrun,
        "referee": sum(1 for r in recs if r.get("referee") != 1),
        "duplicates": len(tokens) - len(set(tokens)) + len(recs) - len(values),
        "regressions": regressions,
        "rejections": sum(1 for r in recs if r.get("fenced_write") == 0),
        "resigns": sum(1 for r in recs if r["ending"] == "resign"),
        "deaths": sum(1 for r in recs if r["ending"] == "die"),
        # C candidates also drop a leadership unresigned (ironlock_leadership_free) and go on
        "abandons": sum(1 for r in recs if r["ending"] == "abandon"),
        "lost_leaders": sum(1 for r in recs if r.get("lost")),
        "lost": 0,
        "observed": len(seen),  # distinct terms the observers saw
        "observer_regressions": obs_regressions,
        "observer_mismatches": obs_mismatches,
        "observer_flaps": flaps,
        "observed_unlogged": unlogged,
        "observer_errors": sum(1 for o in observations if "observer_error" in o),
        "langs_led": sorted({r["lang"] for r in recs}),
        "quarantined": 0,
    }


def history_events(p: str, resource: str, r: Dict[str, Any], fair: bool) -> List[Dict[str, Any]]:
    """One acquisition as history events: invoke and ok of the acquire, then its release; a side
    of a read-write lock carries its `access`."""
    side = {"access": r["access"]} if r.get("access") else {}
    return [
        dict(process=p, op="acquire", type="invoke", resource=resource,
             time=r.get("invoke", r["enter"]), fair=fair, **side),
        # keep-alive holds log the last deadline their extensions reached
        dict(process=p, op="acquire", type="ok", resource=resource, token=r["token"],
             fence=r.get("fence"), deadline=r["deadline"], time=r["enter"], **side),
        dict(process=p, op="release", type="invoke", resource=resource, token=r["token"],
             time=r["leave"]),
        dict(process=p, op="release", type="ok" if r.get("released") else "fail",
             resource=resource, token=r["token"], time=r["leave"]),
    ]


def write_history(path: Path, sc: Scenario, records: List[Dict[str, Any]],
                  fails: List[Dict[str, Any]]) -> None:
    """The run as a history for tests/history/check.py: one process per worker, its acquires
    (invoke, then ok with token, fence and validity deadline, or fail) and releases, on the
    workers' one CLOCK_MONOTONIC. Reads and writes carry their side: the checker lets reads
    share and judges every other pair."""
    ev: List[Dict[str, Any]] = []
    for r in fails:
        p = "w%d" % r["worker"]
        ev.append(dict(process=p, op="acquire", type="invoke", resource="r", time=r["invoke"],
                       fair=sc.fair))
        ev.append(dict(process=p, op="acquire", type="fail", resource="r", time=r["at"],
                       error=r["fail"]))
    for r in records:
        ev += history_events("w%d" % r["worker"], "r", r, sc.fair)
    ev.sort(key=lambda e: (e["time"], e["type"] != "invoke"))
    with path.open("w") as f:
        f.write(json.dumps(dict(header=True, scenario=sc.name, limit=sc.limit or 1,
                                fifo="reported", fifo_slack=0.2)) + "\n")
        for e in ev:
            f.write(json.dumps(e) + "\n")


def check_history(path: Path) -> Dict[str, Any]:
    out = subprocess.run([sys.executable, str(HISTORY_CHECKER), str(path), "--json"],
                         capture_output=True, text=True, timeout=120)
    try:
        return json.loads(out.stdout)["summary"]
    except (ValueError, KeyError):
        return {"ok": False, "error": (out.stderr or out.stdout)[-300:], "overlap": -1,
                "permits": -1, "fences": -1, "fifo": -1}


def history_verdict(sc: Scenario, h: Dict[str, Any]) -> List[str]:
    """What the independent checker must say: nothing wrong where the lock must hold, and the
    overlaps the negative controls must show."""
    if "error" in h:
        return ["history checker error: %s" % h["error"]]
    if sc.kind in ("safe", "held", "overrun", "rw", "elect") and not h["ok"]:
        return ["history checker: %d overlaps, %d over the limit, %d fence regressions"
                % (h["overlap"], h["permits"], h["fences"])]
    if sc.kind in ("must_fail", "rw_must_fail") and not h["overlap"]:
        return ["history checker saw no overlap"]
    return []


RW_WORDS = {"strict": "strict rw violations", "referee": "referee hits",
            "regressions": "fence regressions", "mismatches": "grants of the wrong side"}


def verdict(sc: Scenario, c: Dict[str, Any]) -> List[str]:
    """The failed criteria (empty = pass)."""
    bad = []
    if c["duplicates"]:
        bad.append("duplicate tokens")
    if sc.kind in ("safe", "overrun", "held") and c["regressions"]:
        bad.append("fence regressions")
    if sc.kind in ("safe", "held"):
        if c["strict"]:
            bad.append("strict violations")
        if c["referee"]:
            bad.append("referee hits")
        if sc.kind == "held" and c["lost"]:
            bad.append("locks lost while held")
        least = 2 if sc.kind == "held" else 3  # held: a few long holds
        if c["acquisitions"] < least:
            bad.append("fewer than %d acquisitions" % least)
    elif sc.kind == "rw":
        for what in ("strict", "referee", "regressions", "mismatches"):
            if c[what]:
                bad.append("%d %s" % (c[what], RW_WORDS[what]))
        if c["reads"] < 20 or c["writes"] < 5:
            bad.append("too few of a side (%d reads, %d writes)" % (c["reads"], c["writes"]))
        if not c["rr_overlaps"]:
            bad.append("no read-read overlap (readers did not share)")
        short = sorted(set(sc.langs) - {k for k, v in c["lang_sides"].items() if v == 2})
        if short:
            bad.append("%s not granted both sides" % "+".join(short))
    elif sc.kind == "elect":
        for what, words in (("strict", "times two leaders at once"), ("referee", "referee hits"),
                            ("regressions", "term regressions"),
                            ("observer_regressions", "observed terms out of order"),
                            ("observer_mismatches", "observed values disagreeing"),
                            ("observer_errors", "observer errors")):
            if c[what]:
                bad.append("%d %s" % (c[what], words))
        if c["acquisitions"] < 8 or not c["deaths"] or not c["resigns"]:
            bad.append("too few leaderships (%d: %d resigned, %d died)"
                       % (c["acquisitions"], c["resigns"], c["deaths"]))
        short = sorted(set(sc.langs) - set(c["langs_led"]))
        if short:
            bad.append("%s never led" % "+".join(short))
        if c["observed"] < c["acquisitions"] // 2:
            bad.append("observers saw %d leaders of %d" % (c["observed"], c["acquisitions"]))
    elif sc.kind == "rw_must_fail":
        if not c["strict"]:
            bad.append("no strict rw violation (the control did not bite)")
    elif sc.kind == "must_lose":
        if not c["lost"]:
            bad.append("no lock lost")
    elif sc.kind == "must_fail":
        if not c["strict"]:
            bad.append("no violation shown")
    elif sc.kind in ("protected", "protected_control"):
        if c.get("storage_lost") is None:
            bad.append("no storage figures")
        elif sc.kind == "protected":
            if c["strict"]:
                bad.append("strict violations")
            if c["storage_lost"]:
                bad.append("%d lost updates" % c["storage_lost"])
            if not c["storage_rejected"]:
                bad.append("no stale write refused")
        elif not c["storage_lost"]:
            bad.append("no lost update (the control did not bite)")
    elif sc.kind == "overrun":
        if c["strict"]:
            bad.append("strict violations")
        if not c["overrun"]:
            bad.append("no overrun shown")
        if not c["rejections"]:
            bad.append("no fenced rejection")
    return bad


# --------------------------------------------------------------------------- one scenario

def start_storage(mode: str, run_dir: Path) -> Tuple[subprocess.Popen, int]:
    portfile = run_dir / "storage.port"
    p = subprocess.Popen([sys.executable, str(HERE / "storage.py"), str(portfile), mode],
                         stdin=subprocess.PIPE, start_new_session=True)
    CLEANUP.add(lambda p=p: kill_proc(p))
    deadline = time.monotonic() + 10
    while not (portfile.exists() and portfile.read_text().strip()):
        if time.monotonic() > deadline or p.poll() is not None:
            raise RuntimeError("storage.py did not start")
        time.sleep(0.02)
    return p, int(portfile.read_text())


def stop_storage(storage: Optional[Tuple[subprocess.Popen, int]]) -> Optional[Dict[str, int]]:
    if storage is None:
        return None
    p, port = storage
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"STATS\n")
            stats = json.loads(conn.makefile("r").readline())
    finally:
        kill_proc(p)
    return stats


def worker_cmd(lang: str, c_worker: Optional[Path]) -> List[str]:
    if lang == "py":
        return [sys.executable, str(HERE / "worker.py")]
    if lang == "c":
        assert c_worker is not None
        return [str(c_worker)]
    if lang == "node":
        return ["node", str(HERE / "worker.mjs")]
    raise ValueError(lang)


def run_scenario(sc: Scenario, seconds: Optional[float], referee: Harness, fw: Firewall,
                 shim: Optional[Path], c_worker: Optional[Path], seed: int) -> Dict[str, Any]:
    dur = seconds if seconds is not None else sc.seconds
    label = "%s/%s" % (sc.name, "on" if sc.quarantine else "off")
    run_dir = BUILD / "runs" / label.replace("/", "-")
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    env = dict(os.environ)
    extra: List[str] = []
    if sc.debug:
        extra += ["--enable-debug-command", "yes"]
    if sc.clock:
        assert shim is not None
        env["REDIS_SERVER"] = str(shim)
        env["CHAOS_CLOCK_DIR"] = str(run_dir)
    log("scenario %s: %d nodes, %d workers, ttl %d ms, hold %d ms, %.0f s"
        % (label, sc.nodes, len(sc.langs), sc.ttl_ms, sc.hold_ms, dur))
    voters: List[Harness] = []
    if sc.topology == "cluster":
        h = Harness(0, (), env, cluster="3,1")
        urls = [h.cluster_url or ""]
    elif sc.topology == "sentinel":
        voters = [Harness(0, (), env, sentinel="1,3") for _ in range(sc.nodes)]
        h = voters[0]
        urls = [v.sentinel_url or "" for v in voters]
    else:
        h = Harness(sc.nodes, extra, env)
        urls = h.urls
    endpoint: Optional[Endpoint] = None
    if sc.topology == "endpoint":
        h.send("cmd 1 REPLICAOF 127.0.0.1 %d" % h.ports[0])
        deadline = time.monotonic() + 10
        while not replica_link_up(h, 1):
            if time.monotonic() > deadline:
                raise RuntimeError("the replica never linked")
            time.sleep(0.02)
        endpoint = Endpoint(h.ports[0])
        urls = ["redis://127.0.0.1:%d" % endpoint.port]
    workers: List["subprocess.Popen[Any]"] = []
    died: List[int] = []  # exit codes of the candidates that killed themselves
    died_at: List[int] = []  # and their worker slots
    stop = threading.Event()
    nem_thread: Optional[threading.Thread] = None
    nem_error: List[BaseException] = []
    storage = start_storage(sc.storage, run_dir) if sc.storage else None
    storage_port = storage[1] if storage else None
    try:
        if sc.quarantine:
            # Fresh nodes are quarantined for max_ttl + drift + 1 s: let them age past it.
            max_ttl = sc.max_ttl_ms / 1000.0
            time.sleep(max_ttl * 1.01 + 0.002 + 1.0 + 0.4)
        key = "chaos:%s:%d:%d" % (label, os.getpid(), time.time_ns())
        start = time.monotonic() + 1.0  # workers need a moment to start and connect
        end = start + dur
        def spawn(idx: int, life: int) -> "subprocess.Popen[Any]":
            wenv = dict(os.environ)
            wenv.update({
                "CHAOS_WORKER": str(idx),
                "CHAOS_INCARNATION": str(life),  # election candidates that died, restarted
                "CHAOS_ELECT": "1" if sc.elect else "0",
                "CHAOS_DIE_AT": str(sc.die_at.get(idx, 0)),
                # Space-separated: a Sentinel URL lists its sentinels with commas.
                "CHAOS_NODES": " ".join(urls),
                "CHAOS_RESOURCE": key,
                "CHAOS_TTL_MS": str(sc.ttl_ms),
                "CHAOS_HOLD_MS": str(sc.hold_ms),
                "CHAOS_WAIT_MS": "1000",
                "CHAOS_MARGIN_MS": str(MARGIN_MS),
                "CHAOS_MAX_TTL_MS": str(sc.max_ttl_ms),
                "CHAOS_QUARANTINE": "1" if sc.quarantine else "0",
                "CHAOS_KEEP": "1" if sc.keep else "0",
                "CHAOS_RESEAT": "1" if sc.reseat else "0",
                "CHAOS_LIMIT": str(sc.limit),
                "CHAOS_FAIR": "1" if sc.fair else "0",
                "CHAOS_SEED": str(seed),
                "CHAOS_RW": "1" if sc.rw else "0",
                "CHAOS_RW_WRITES": str(sc.rw_writes),
                "CHAOS_RW_PAUSE_MS": str(sc.rw_pause_ms),
                "CHAOS_RW_READ_NODES": str(sc.rw_read_nodes),
                "CHAOS_NODE_TIMEOUT_MS": "50",
                "CHAOS_REFEREE_PORT": str(referee.ports[0]),
                "CHAOS_COUNTER_KEY": key + ":counter",
                "CHAOS_FENCE_KEY": key + ":fenced",
                "CHAOS_START_MONO": repr(start),
                "CHAOS_END_MONO": repr(end),
                "CHAOS_SELF_STOP": str(sc.self_stop.get(idx, 0)),
                "CHAOS_STORAGE_PORT": str(storage_port or ""),
                "CHAOS_LOG": str(run_dir / ("worker-%d.jsonl" % idx)),
            })
            p = subprocess.Popen(worker_cmd(sc.langs[idx], c_worker), env=wenv, cwd=str(HERE),
                                 stdin=subprocess.DEVNULL, start_new_session=True)
            CLEANUP.add(lambda p=p: kill_proc(p))
            return p

        for idx in range(len(sc.langs)):
            workers.append(spawn(idx, 0))
        ctx = Ctx(h, fw, random.Random(seed), end, stop, workers, run_dir, key,
                  endpoint=endpoint, voters=voters,
                  # A Sentinel voter's failover quarantine is 2 s longer (its old master's lease).
                  quarantine_s=sc.max_ttl_ms / 1000.0 * 1.01 + 1.002
                  + (2.0 if sc.topology == "sentinel" else 0.0))

        def nemesis() -> None:
            try:
                wait = start - time.monotonic()
                if wait > 0:
                    stop.wait(wait)
                sc.nemesis(ctx)
            except BaseException as e:  # reported after the run
                nem_error.append(e)

        nem_thread = threading.Thread(target=nemesis, name="nemesis", daemon=True)
        nem_thread.start()
        limit = end + sc.ttl_ms / 1000.0 + 15.0
        while time.monotonic() < limit:
            if sc.elect:
                # A candidate that killed itself while leading is started again (a new life),
                # also after the end (it then only writes its summary).
                for idx, w in enumerate(workers):
                    if w.poll() == -signal.SIGKILL:
                        died.append(w.returncode)
                        workers[idx] = spawn(idx, sum(1 for d in died_at if d == idx) + 1)
                        died_at.append(idx)
                        ctx.count("leader_deaths")
            if all(w.poll() is not None for w in workers):
                break
            time.sleep(0.05)
        stop.set()
        nem_thread.join(timeout=15)
        hung = [w.pid for w in workers if w.poll() is None]
    finally:
        stop.set()
        if nem_thread is not None:
            nem_thread.join(timeout=15)
        fw.heal_all()
        if endpoint is not None:
            endpoint.close()
        for v in voters[1:]:
            v.close()
        for w in workers:
            if w.poll() is None:
                try:
                    os.kill(w.pid, signal.SIGCONT)
                except OSError:
                    pass
            kill_proc(w)
        h.close()
    storage_stats = stop_storage(storage)
    with (run_dir / "nemesis.jsonl").open("w") as f:
        for at, what, node in ctx.timeline:
            f.write(json.dumps({"at": at, "fault": what, "node": node}) + "\n")
    records: List[Dict[str, Any]] = []
    fails: List[Dict[str, Any]] = []
    observations: List[Dict[str, Any]] = []
    summaries = 0
    worker_errors: Dict[str, int] = {}
    for idx in range(len(sc.langs)):
        path = run_dir / ("worker-%d.jsonl" % idx)
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("summary"):
                summaries += 1
                for k, v in rec.get("errors", {}).items():
                    worker_errors[k] = worker_errors.get(k, 0) + v
            elif "fail" in rec:
                fails.append(rec)
            elif "observed" in rec or "observer_error" in rec:
                observations.append(rec)
            else:
                records.append(rec)
    if sc.elect:
        c = check_elect(records, observations)
        for r in records:  # the history checker judges a leadership as a lock fenced by its term
            r["fence"], r["released"] = r["term"], r.get("resigned", False)
    else:
        c = check_rw(records) if sc.rw else check(records, sc.limit)
    if storage_stats is not None:
        # Every accepted write meant +1 over what its writer read: an update lost is one
        # accepted write that the final value does not count.
        c["storage_lost"] = storage_stats["accepted"] - storage_stats["value"]
        c["storage_rejected"] = storage_stats["rejected"]
        c["storage_accepted"] = storage_stats["accepted"]
    bad = verdict(sc, c)
    history = run_dir / "history.jsonl"
    write_history(history, sc, records, fails)
    hist = check_history(history)
    bad += history_verdict(sc, hist)
    if nem_error:
        bad.append("nemesis error: %r" % (nem_error[0],))
    if hung:
        bad.append("%d worker(s) did not finish" % len(hung))
    paused = ctx.events.get("worker_sigstops", 0)
    if paused < len(sc.self_stop):
        bad.append("%d of %d workers paused themselves" % (paused, len(sc.self_stop)))
    codes = [w.returncode for w in workers]
    if summaries != len(sc.langs) or any(code != 0 for code in codes):
        bad.append("worker exit codes %s, %d/%d summaries" % (codes, summaries, len(sc.langs)))
    if sc.elect and len(died) != c["deaths"]:
        bad.append("%d candidates died, %d leaderships logged a death" % (len(died), c["deaths"]))
    faults = ", ".join("%d %s" % (v, k) for k, v in sorted(ctx.events.items())) or "none"
    res = {
        "scenario": sc.name, "quarantine": "on" if sc.quarantine else "off",
        "langs": "+".join(sorted(set(sc.langs))), "workers": len(sc.langs), "nodes": sc.nodes,
        "seconds": dur, "faults": faults, "worker_errors": worker_errors,
        "kind": sc.kind, "expect": sc.expect, "failed": bad, **c, "history": hist,
        "acq_per_s": c["acquisitions"] / dur,
    }
    log("  -> %s" % json.dumps({k: res[k] for k in (
        "acquisitions", "strict", "overrun", "referee", "duplicates", "regressions",
        "rejections", "lost", "quarantined", "faults", "worker_errors", "history", "failed")}
        | {k: c[k] for k in ("storage_accepted", "storage_lost", "storage_rejected", "reads",
                             "writes", "rr_overlaps", "mismatches", "lang_sides", "resigns",
                             "deaths", "abandons", "lost_leaders", "observed", "observer_regressions",
                             "observer_mismatches", "observer_flaps", "observed_unlogged", "observer_errors",
                             "langs_led") if k in c}))
    return res


def history_cell(h: Dict[str, Any]) -> str:
    if "error" in h:
        return "error"
    found = ", ".join("%d %s" % (h[k], k) for k in ("overlap", "permits", "fences", "fifo") if h[k])
    return "%d ops: %s" % (h["operations"], found or "clean")


def table(results: List[Dict[str, Any]]) -> str:
    head = ["scenario", "nodes", "workers", "quarantine", "faults injected", "acquisitions", "acq/s",
            "strict violations", "overruns", "referee hits", "duplicate tokens",
            "fence regressions", "fenced rejections", "lost while held",
            "grants beside a quarantined node", "history checker",
            "storage writes accepted / lost / refused",
            "reads / writes / read-read overlaps",
            "leaderships resigned / died / abandoned, terms observed (observer flaps)",
            "result", "expectation"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        result = "pass" if not r["failed"] else "FAIL: " + "; ".join(r["failed"])
        if r["kind"] == "report" and not r["failed"]:
            result = "reported"
        rows.append("| " + " | ".join(str(x) for x in [
            r["scenario"], r["nodes"], "%d %s" % (r["workers"], r["langs"]), r["quarantine"], r["faults"],
            r["acquisitions"], "%.1f" % r["acq_per_s"], r["strict"], r["overrun"],
            r["referee"], r["duplicates"], r["regressions"], r["rejections"], r["lost"],
            r["quarantined"] if "py" in r["langs"] else "n/a", history_cell(r["history"]),
            "%d / %d / %d" % (r["storage_accepted"], r["storage_lost"], r["storage_rejected"])
            if "storage_lost" in r else "",
            "%d / %d / %d" % (r["reads"], r["writes"], r["rr_overlaps"]) if "reads" in r else "",
            "%d / %d / %d, %d (%d)" % (r["resigns"], r["deaths"], r["abandons"], r["observed"],
                                      r["observer_flaps"])
            if "resigns" in r else "",
            result,
            r["expect"]]) + " |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated scenario names (all by default)")
    ap.add_argument("--seconds", type=float, help="fault phase per scenario (default: each own)")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "7")))
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    ap.add_argument("--json", help="also write the results as JSON to this file")
    args = ap.parse_args()
    # Ctrl-C raises KeyboardInterrupt even when started with SIGINT ignored (background jobs).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    chosen = scenarios()
    if args.list:
        for sc in chosen:
            print("%-22s quarantine %-3s %s" % (sc.name, "on" if sc.quarantine else "off",
                                                 sc.expect))
        return 0
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {sc.name for sc in chosen}
        if unknown:
            print("unknown scenario(s): %s" % ", ".join(sorted(unknown)), file=sys.stderr)
            return 2
        chosen = [sc for sc in chosen if sc.name in names]
    if not Path(HARNESS).exists():
        print("harness not found: %s (cargo build -p ironlock-harness)" % HARNESS,
              file=sys.stderr)
        return 2
    if CHAOS_ROOT.is_dir():
        for d in CHAOS_ROOT.iterdir():
            if d.is_dir() and d.name.isdigit() and not Path("/proc/" + d.name).exists():
                shutil.rmtree(d, ignore_errors=True)
    t0 = time.monotonic()
    results: List[Dict[str, Any]] = []
    log("logs: %s" % (BUILD / "runs"))
    try:
        fw = Firewall()
        if not fw.ok:
            log("iptables unusable here: isolations fall back to SIGSTOP of the node")
        shim = build_shim() if any(sc.clock for sc in chosen) else None
        needs_c = any("c" in sc.langs for sc in chosen)
        c_worker = build_c_worker() if needs_c else None
        referee = Harness(1)  # never faulted
        for i, sc in enumerate(chosen):
            results.append(run_scenario(sc, args.seconds, referee, fw, shim, c_worker,
                                        args.seed + i))
        referee.close()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        CLEANUP.run_all()
    print(table(results))
    failed = [r for r in results if r["failed"]]
    total = sum(r["acquisitions"] for r in results)
    print("\nchaos: %d scenarios, %d passed, %d failed, %d acquisitions checked in %.0f s%s"
          % (len(results), len(results) - len(failed), len(failed), total,
             time.monotonic() - t0,
             "" if fw.ok else " (iptables unusable: isolations were SIGSTOPs)"))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
