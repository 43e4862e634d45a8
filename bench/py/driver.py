"""Python benchmark driver (same command line and JSON line as bench/rust and bench/node).

python driver.py --client CLIENT --workload a|b|c|d|e --urls U1,U2,.. [--cycles N]
                 [--concurrency C] [--prefix P] [--time-limit SECS]
                 [--keepalive-s D --ttl-ms MS]

Clients: ironlock-sync, ironlock-async (the ironlock package), pottery-sync (pottery.Redlock),
pottery-aio (pottery.AIORedlock), aioredlock (aioredlock.Aioredlock), redis-py-sync and
redis-py-async (redis-py's own single-node Lock: one URL only).
Workloads (a)/(b): acquire+release cycles on distinct keys, C in flight. (c): C workers on one key,
library retry off, the driver retries after a uniform 0-2 ms. (d): the same with the library's
default retries (an exhausted acquire is called again). (e): hold N locks at once, peak RSS;
with --keepalive-s D (ironlock-sync only): held-lock scale, N locks of ttl --ttl-ms, each kept
alive by the core's auto-extension (``lock.keep_alive()``) from its grant, held D seconds.
"""

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time

TTL = 10.0
HOLD_TTL = 60.0  # the longest ttl ironlock allows by default (max_ttl)


def cpu_us():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1e6


def current_rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


class Refused(Exception):
    """One acquire call that did not get the lock (contended or retries exhausted)."""


# ---------------------------------------------------------------- clients (sync)


class IronlockSync:
    def __init__(self, urls, workload):
        import ironlock

        self.err = ironlock.IronlockError
        # Fresh nodes: quarantine off. (c): retry off. Otherwise the library's defaults.
        kw = {"restart_quarantine": False}
        if workload == "c":
            kw["retry_count"] = 0
        self.m = ironlock.LockManager(urls, **kw)

    def acquire(self, key, ttl):
        try:
            return self.m.acquire(key, ttl)
        except (self.err,) as e:
            if type(e).__name__ in ("LockContendedError", "QuorumUnavailableError"):
                raise Refused() from e
            raise

    def release(self, lock):
        lock.release()


class PotterySync:
    def __init__(self, urls, workload):
        from pottery import Redlock
        from redis import Redis

        self.Redlock = Redlock
        self.masters = {Redis.from_url(u) for u in urls}
        self.blocking = workload != "c"
        self.deadline = None

    def acquire(self, key, ttl):
        lock = self.Redlock(key=key, masters=self.masters, auto_release_time=ttl)
        if self.blocking:
            # pottery's default: block, retrying after uniform 0-200 ms; bounded by the run.
            ok = lock.acquire(timeout=max(0.01, self.deadline - time.monotonic()))
        else:
            ok = lock.acquire(blocking=False)
        if not ok:
            raise Refused()
        return lock

    def release(self, lock):
        lock.release()


def single_url(urls, client):
    if len(urls) != 1:
        raise SystemExit("%s: redis-py's Lock takes one node, got %d URLs" % (client, len(urls)))
    return urls[0]


class RedisPySync:
    """redis-py's ``Lock`` as its users run it: one ``Redis`` client (hiredis parser when
    installed), ``r.lock(name, timeout=ttl)``, blocking ``acquire()`` by default."""

    def __init__(self, urls, workload):
        from redis import Redis

        self.r = Redis.from_url(single_url(urls, "redis-py-sync"))
        self.blocking = workload != "c"

    def acquire(self, key, ttl):
        lock = self.r.lock(key, timeout=ttl)
        if not lock.acquire(blocking=self.blocking):
            raise Refused()
        return lock

    def release(self, lock):
        lock.release()


# ---------------------------------------------------------------- clients (asyncio)


class IronlockAsync:
    def __init__(self, urls, workload):
        import ironlock

        self.ironlock = ironlock
        self.urls = urls
        self.kw = {"restart_quarantine": False}
        if workload == "c":
            self.kw["retry_count"] = 0

    async def start(self):
        self.m = self.ironlock.AsyncLockManager(self.urls, **self.kw)

    async def acquire(self, key, ttl):
        try:
            return await self.m.acquire(key, ttl)
        except (self.ironlock.LockContendedError, self.ironlock.QuorumUnavailableError) as e:
            raise Refused() from e

    async def release(self, lock):
        await lock.release()


class PotteryAio:
    def __init__(self, urls, workload):
        self.urls = urls
        self.blocking = workload != "c"
        self.deadline = None

    async def start(self):
        from pottery import AIORedlock
        from redis.asyncio import Redis

        self.AIORedlock = AIORedlock
        self.masters = {Redis.from_url(u) for u in self.urls}

    async def acquire(self, key, ttl):
        lock = self.AIORedlock(key=key, masters=self.masters, auto_release_time=ttl)
        if self.blocking:
            ok = await lock.acquire(timeout=max(0.01, self.deadline - time.monotonic()))
        else:
            ok = await lock.acquire(blocking=False)
        if not ok:
            raise Refused()
        return lock

    async def release(self, lock):
        await lock.release()


class AioRedlock:
    def __init__(self, urls, workload):
        self.urls = urls
        self.workload = workload

    async def start(self):
        from aioredlock import Aioredlock, LockError

        self.LockError = LockError
        # retry_count counts attempts: 1 = a single round. Default 3, 0.1-0.3 s apart.
        kw = {"retry_count": 1} if self.workload == "c" else {}
        self.m = Aioredlock(self.urls, **kw)

    async def acquire(self, key, ttl):
        try:
            return await self.m.lock(key, lock_timeout=ttl)
        except self.LockError as e:
            raise Refused() from e

    async def release(self, lock):
        await self.m.unlock(lock)


class RedisPyAsync:
    """``redis.asyncio``'s ``Lock``, as ``RedisPySync``."""

    def __init__(self, urls, workload):
        self.url = single_url(urls, "redis-py-async")
        self.blocking = workload != "c"

    async def start(self):
        from redis.asyncio import Redis

        self.r = Redis.from_url(self.url)

    async def acquire(self, key, ttl):
        lock = self.r.lock(key, timeout=ttl)
        if not await lock.acquire(blocking=self.blocking):
            raise Refused()
        return lock

    async def release(self, lock):
        await lock.release()


SYNC = {"ironlock-sync": IronlockSync, "pottery-sync": PotterySync, "redis-py-sync": RedisPySync}
ASYNC = {
    "ironlock-async": IronlockAsync,
    "pottery-aio": PotteryAio,
    "aioredlock": AioRedlock,
    "redis-py-async": RedisPyAsync,
}


# ---------------------------------------------------------------- workloads


class Outcome:
    def __init__(self):
        self.ok = 0
        self.failed = 0
        self.lat_us = []
        self.error = None
        self.held = []
        self.lock = threading.Lock()

    def add(self, ok=0, failed=0, lat=None, error=None):
        with self.lock:
            self.ok += ok
            self.failed += failed
            if lat is not None:
                self.lat_us.append(lat)
            if error is not None and self.error is None:
                self.error = error


def sync_worker(client, args, out, keys, deadline, contended, done, target):
    rng = random.Random()
    if not contended:
        while time.monotonic() < deadline:
            try:
                key = next(keys)
            except StopIteration:
                return
            t0 = time.perf_counter()
            try:
                lock = client.acquire(key, args.ttl)
                if args.workload == "e":
                    out.add(ok=1)
                    with out.lock:
                        out.held.append(lock)
                    continue
                client.release(lock)
                out.add(ok=1, lat=(time.perf_counter() - t0) * 1e6)
            except Exception as e:  # noqa: BLE001 - recorded and reported
                out.add(failed=1, error=f"{type(e).__name__}: {e}")
        return
    driver_pause = args.workload == "c"
    while done[0] < target and time.monotonic() < deadline:
        t0 = time.perf_counter()
        while True:
            try:
                lock = client.acquire(keys, args.ttl)
                if args.hold_ms:
                    time.sleep(args.hold_ms / 1000)
                client.release(lock)
                with out.lock:
                    done[0] += 1
                out.add(ok=1, lat=(time.perf_counter() - t0) * 1e6)
                break
            except Refused:
                out.add(failed=1)
            if done[0] >= target or time.monotonic() >= deadline:
                return
            if driver_pause:
                time.sleep(rng.uniform(0, 0.002))


async def async_worker(client, args, out, keys, deadline, contended, done, target):
    rng = random.Random()
    if not contended:
        while time.monotonic() < deadline:
            try:
                key = next(keys)
            except StopIteration:
                return
            t0 = time.perf_counter()
            try:
                lock = await client.acquire(key, args.ttl)
                if args.workload == "e":
                    out.ok += 1
                    out.held.append(lock)
                    continue
                await client.release(lock)
                out.ok += 1
                out.lat_us.append((time.perf_counter() - t0) * 1e6)
            except Exception as e:  # noqa: BLE001 - recorded and reported
                out.failed += 1
                out.error = out.error or f"{type(e).__name__}: {e}"
        return
    driver_pause = args.workload == "c"
    while done[0] < target and time.monotonic() < deadline:
        t0 = time.perf_counter()
        while True:
            try:
                lock = await client.acquire(keys, args.ttl)
                if args.hold_ms:
                    await asyncio.sleep(args.hold_ms / 1000)
                await client.release(lock)
                done[0] += 1
                out.ok += 1
                out.lat_us.append((time.perf_counter() - t0) * 1e6)
                break
            except Refused:
                out.failed += 1
            if done[0] >= target or time.monotonic() >= deadline:
                return
            if driver_pause:
                await asyncio.sleep(rng.uniform(0, 0.002))


def server_cpu_s(urls):
    """user+system CPU seconds of the redis-server nodes at `urls` (INFO cpu through redis-cli, as
    bench.py reads it), or None when a node did not answer."""
    total = 0.0
    for u in urls:
        try:
            out = subprocess.run(["redis-cli", "-u", u, "INFO", "cpu"], capture_output=True, text=True,
                                 timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        vals = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        if "used_cpu_sys" not in vals or "used_cpu_user" not in vals:
            return None
        total += float(vals["used_cpu_user"]) + float(vals["used_cpu_sys"])
    return total


def keys_matching(urls, pattern):
    """Keys matching `pattern` over the nodes (redis-cli --scan), or None when a node did not answer."""
    n = 0
    for u in urls:
        try:
            p = subprocess.run(["redis-cli", "-u", u, "--scan", "--pattern", pattern], capture_output=True,
                               text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if p.returncode != 0:
            return None
        n += sum(1 for line in p.stdout.splitlines() if line)
    return n


def run_keepalive(client, args, urls, deadline):
    """(e) with --keepalive-s: held-lock scale through the sync API. `cycles` locks
    `<prefix>:<i>` of ttl --ttl-ms are acquired by `concurrency` threads, each put under the
    core's auto-extension (``lock.keep_alive()``) as soon as it is granted; then all are held
    D seconds (the hold phase: the only one whose client CPU, server CPU and extensions are
    measured), checked (lost flag, validity) and released, and the nodes are checked for leftover
    keys. Extensions are the manager's ``stats()["extensions"]``. Returns (Outcome, acquisition
    seconds, acquisition CPU µs, extra fields, failure or None)."""
    m = client.m
    ttl = args.ttl_ms / 1000
    rss_before = current_rss_kb()
    out = Outcome()
    held = [None] * args.cycles
    nxt = [0]
    take = threading.Lock()

    def worker():
        lat, failed, error = [], 0, None
        while time.monotonic() < deadline:
            with take:
                i = nxt[0]
                nxt[0] += 1
            if i >= args.cycles:
                break
            t0 = time.perf_counter()
            try:
                lock = m.acquire(f"{args.prefix}:{i}", ttl)
            except Exception as e:  # noqa: BLE001 - recorded and reported
                failed += 1
                error = error or f"{type(e).__name__}: {e}"
                continue
            held[i] = (lock, lock.keep_alive())
            lat.append((time.perf_counter() - t0) * 1e6)
        with out.lock:
            out.lat_us.extend(lat)
            out.failed += failed
            out.error = out.error or error

    cpu_a, t_a = cpu_us(), time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = [h for h in held if h is not None]
    out.ok = len(held)
    acquire_s, acquire_cpu = time.perf_counter() - t_a, cpu_us() - cpu_a
    rss_held = current_rss_kb()

    # The hold phase.
    srv0 = server_cpu_s(urls)
    st0 = m.stats()
    cpu0, t0 = cpu_us(), time.perf_counter()
    time.sleep(args.keepalive_s)
    cpu1, hold_s = cpu_us(), time.perf_counter() - t0
    st1 = m.stats()
    srv1 = server_cpu_s(urls)

    # Lost: the lost flag is set, or the lock is no longer valid, or the release no longer found
    # it held on a quorum (more than N - Q nodes answered that the token was gone). A release that
    # found fewer than a quorum holding it only because nodes did not answer in time (timeouts,
    # errors) is unconfirmed, not lost: the key check below sees its keys go.
    bad = [False] * len(held)
    lost_signal = invalid = 0
    for i, (lock, _) in enumerate(held):
        if lock.lost.is_set():
            lost_signal += 1
            bad[i] = True
        elif not lock.valid:
            invalid += 1
            bad[i] = True
    not_held, unconfirmed, first_unconfirmed = [0], [0], []
    n_nodes, quorum = len(urls), m.quorum
    nxt[0] = 0
    t_r = time.perf_counter()

    def releaser():
        while True:
            with take:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(held):
                return
            lock = held[i][0]
            try:
                if lock.release():
                    continue
                against = sum(1 for r in lock.report if r.vote == "against")
                why = "; ".join(f"{r.url}={r.vote}" + (f" ({r.error})" if r.error else "") for r in lock.report)
            except Exception as e:  # noqa: BLE001 - recorded: the key check decides
                against, why = 0, f"{type(e).__name__}: {e}"
            with take:
                if against > n_nodes - quorum:
                    not_held[0] += 1
                    bad[i] = True
                else:
                    unconfirmed[0] += 1
                    if not first_unconfirmed:
                        first_unconfirmed.append(why)

    threads = [threading.Thread(target=releaser) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    release_s = time.perf_counter() - t_r
    lost = sum(bad)
    for _, keeper in held:
        keeper.stop()

    # Nothing left on the nodes: a release returns at a quorum, the other deletes finish within
    # node_timeout; look again for up to 3 s.
    keys_left = None
    for _ in range(30):
        keys_left = keys_matching(urls, f"{args.prefix}:*")
        if keys_left == 0:
            break
        time.sleep(0.1)

    extensions = st1["extensions"] - st0["extensions"]
    server_s = srv1 - srv0 if srv0 is not None and srv1 is not None else None
    extra = {
        "acquire_s": round(acquire_s, 3),
        "hold_s": round(hold_s, 3),
        "ttl_ms": args.ttl_ms,
        "hold_cpu_pct": round((cpu1 - cpu0) / 1e6 / hold_s * 100, 2),
        "extensions": extensions,
        "extension_failures": st1["extension_failures"] - st0["extension_failures"],
        "extensions_per_lock": round(extensions / max(out.ok, 1), 3),
        "server_cpu_hold_us": round(server_s * 1e6, 3) if server_s is not None else None,
        "server_us_per_extension": (round(server_s * 1e6 / extensions, 3)
                                    if server_s is not None and extensions else None),
        "lost": lost,
        "lost_signal": lost_signal,
        "invalid_at_end": invalid,
        "not_held_at_release": not_held[0],
        "release_unconfirmed": unconfirmed[0],
        "lost_before_hold": st0["lost"],
        "lost_stat": st1["lost"],
        "rss_before_kb": rss_before,
        "rss_held_kb": rss_held,
        "bytes_per_lock": round((rss_held - rss_before) * 1024 / max(out.ok, 1), 1),
        "release_s": round(release_s, 3),
        "keys_left": keys_left,
    }
    failure = []
    if lost:
        failure.append(f"{lost} of {out.ok} locks lost (lost signal {lost_signal}, invalid at the end {invalid}, "
                       f"not held at release {not_held[0]})")
    if keys_left is None:
        failure.append("could not count the keys left on the nodes")
    elif keys_left:
        failure.append(f"{keys_left} keys left on the nodes after the release"
                       + (f" ({unconfirmed[0]} releases unconfirmed, e.g. {first_unconfirmed[0]})"
                          if first_unconfirmed else ""))
    return out, acquire_s, acquire_cpu, extra, "; ".join(failure) or None


def key_iter(prefix, n):
    return iter([f"{prefix}:{i}" for i in range(n)])


def run_sync(client, args, prefix, cycles, deadline):
    out = Outcome()
    contended = args.workload in ("c", "d")
    keys = f"{args.prefix}:hot" if contended else key_iter(prefix, cycles)
    done = [0]
    if hasattr(client, "deadline"):
        client.deadline = deadline
    lock = threading.Lock()

    if not contended:
        it = keys

        class Locked:
            def __next__(self):
                with lock:
                    return next(it)

        keys = Locked()
    threads = [
        threading.Thread(
            target=sync_worker, args=(client, args, out, keys, deadline, contended, done, cycles)
        )
        for _ in range(args.concurrency)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


async def run_async(client, args, prefix, cycles, deadline):
    out = Outcome()
    contended = args.workload in ("c", "d")
    keys = f"{args.prefix}:hot" if contended else key_iter(prefix, cycles)
    if hasattr(client, "deadline"):
        client.deadline = deadline
    done = [0]
    await asyncio.gather(
        *(
            async_worker(client, args, out, keys, deadline, contended, done, cycles)
            for _ in range(args.concurrency)
        )
    )
    return out


def pct(sorted_lat, p):
    if not sorted_lat:
        return 0.0
    return sorted_lat[round((len(sorted_lat) - 1) * p)]


def report(args, out, secs, cpu, extra):
    out.lat_us.sort()
    complete = out.ok >= args.cycles
    line = {
        "ok": out.ok,
        "failed": out.failed,
        "target": args.cycles,
        "complete": complete,
        "seconds": secs,
        "cps": out.ok / secs if secs > 0 else 0.0,
        "p50_us": pct(out.lat_us, 0.5),
        "p99_us": pct(out.lat_us, 0.99),
        "cpu_us_per_cycle": cpu / out.ok if out.ok else 0.0,
    }
    line.update(extra)
    if out.error and args.workload not in ("c", "d"):
        line["error"] = out.error
    print(json.dumps(line), flush=True)
    return 0 if complete else 3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--client", required=True, choices=sorted([*SYNC, *ASYNC]))
    p.add_argument("--workload", required=True, choices=list("abcde"))
    p.add_argument("--urls", required=True)
    p.add_argument("--cycles", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--prefix", default=f"bench:{os.getpid()}")
    p.add_argument("--time-limit", type=float, default=30.0)
    p.add_argument("--hold-ms", type=float, default=0.0, help="(c)/(d): hold each grant this long")
    p.add_argument("--keepalive-s", type=float, default=0.0,
                   help="(e), ironlock-sync: hold every lock this long under auto-extension")
    p.add_argument("--ttl-ms", type=int, default=3000, help="(e) with --keepalive-s: the locks' ttl")
    args = p.parse_args()
    if args.keepalive_s and (args.workload != "e" or args.client != "ironlock-sync"):
        raise SystemExit("--keepalive-s: workload e with the ironlock-sync client only")
    args.ttl = HOLD_TTL if args.workload == "e" else TTL
    urls = args.urls.split(",")
    warm_n = max(50, args.concurrency * 4)

    if args.client in SYNC:
        client = SYNC[args.client](urls, args.workload)
        warm_args = argparse.Namespace(**{**vars(args), "workload": "a", "ttl": TTL})
        warm = run_sync(client, warm_args, f"{args.prefix}:warm", warm_n, time.monotonic() + 10)
        if warm.ok == 0:
            print(f"warm-up failed: {warm.error}", file=sys.stderr)
            return 1
        if args.keepalive_s:
            deadline = time.monotonic() + args.time_limit
            out, secs, cpu, extra, failure = run_keepalive(client, args, urls, deadline)
            if failure:
                out.error = failure + (f"; first failed acquire: {out.error}" if out.error else "")
            rc = report(args, out, secs, cpu, extra)
            return 4 if failure else rc
        base = current_rss_kb()
        deadline = time.monotonic() + args.time_limit
        c0, t0 = cpu_us(), time.perf_counter()
        out = run_sync(client, args, args.prefix, args.cycles, deadline)
        secs, cpu = time.perf_counter() - t0, cpu_us() - c0
        extra = {}
        if args.workload == "e":
            extra = {"rss_base_kb": base, "rss_peak_kb": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, current_rss_kb())}
            for lock in out.held:
                try:
                    client.release(lock)
                except Exception:  # noqa: BLE001 - a lock that expired meanwhile is no error here
                    pass
        return report(args, out, secs, cpu, extra)

    async def amain():
        client = ASYNC[args.client](urls, args.workload)
        await client.start()
        warm_args = argparse.Namespace(**{**vars(args), "workload": "a", "ttl": TTL})
        warm = await run_async(client, warm_args, f"{args.prefix}:warm", warm_n, time.monotonic() + 10)
        if warm.ok == 0:
            print(f"warm-up failed: {warm.error}", file=sys.stderr)
            return 1
        base = current_rss_kb()
        deadline = time.monotonic() + args.time_limit
        c0, t0 = cpu_us(), time.perf_counter()
        out = await run_async(client, args, args.prefix, args.cycles, deadline)
        secs, cpu = time.perf_counter() - t0, cpu_us() - c0
        extra = {}
        if args.workload == "e":
            extra = {"rss_base_kb": base, "rss_peak_kb": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, current_rss_kb())}
            for i in range(0, len(out.held), 64):
                # return_exceptions: a lock that expired meanwhile is no error here.
                await asyncio.gather(*(client.release(lk) for lk in out.held[i : i + 64]), return_exceptions=True)
        return report(args, out, secs, cpu, extra)

    return asyncio.run(amain())


if __name__ == "__main__":
    sys.exit(main())
