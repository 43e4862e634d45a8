//! Rust benchmark driver: `ironlock-bench --client lower|ironlock|rslock --workload a|b|c|d|e|f
//! --urls U1,U2,.. [--cycles N] [--concurrency C] [--prefix P] [--time-limit SECS]`.
//! (f), ironlock only: election failover — a leader stops (no resign) and the time until the
//! next candidate leads is measured, `--cycles` times.
//! (e) with `--keepalive-s D`, ironlock only: held-lock scale — `--cycles` locks of ttl
//! `--ttl-ms`, each auto-extended from its grant, held D seconds, then released.
//!
//! Prints one JSON line (the protocol every driver in bench/ shares, see bench/README.md).
//! `lower` is the hand-written lower bound: `SET NX PX` to all N nodes in parallel over one
//! multiplexed connection per node, return at a majority; then a compare-and-delete script
//! (EVALSHA) to all N, return at a majority, stragglers drained by a spawned task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;

const TTL_MS: u64 = 10_000;
const HOLD_TTL_MS: u64 = 60_000; // the longest ttl ironlock allows by default (max_ttl)
const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

struct Args {
    client: String,
    workload: String,
    urls: Vec<String>,
    cycles: usize,
    concurrency: usize,
    prefix: String,
    time_limit: f64,
    /// (c)/(d): hold each grant this long before releasing it.
    hold: Duration,
    /// ironlock only: fair (FIFO) acquisition (`--fair 1`).
    fair: bool,
    /// ironlock only: permits of a semaphore of this limit instead of the lock (`--limit K`).
    limit: Option<u32>,
    /// ironlock only: the `replica_acks` setting (`--replica-acks N`; bench/replica_acks.py).
    replica_acks: u32,
    /// ironlock only, (d): worker 0 takes write locks and the others read locks of the one key
    /// (`--rw 1`).
    rw: bool,
    /// ironlock only, (f): the standby polls with a try-once acquire every this many ms instead
    /// of waiting in the election's line (`--poll-ms MS`; 0 = wait in line).
    poll: Duration,
    /// (f): the election's ttl; (e) with `--keepalive-s`: the held locks' ttl (`--ttl-ms MS`).
    election_ttl: Duration,
    /// (e), ironlock only: hold every lock this long with auto-extension (`--keepalive-s D`).
    keepalive: Option<Duration>,
}

fn parse_args() -> Args {
    let mut a = Args {
        client: String::new(),
        workload: String::new(),
        urls: Vec::new(),
        cycles: 1000,
        concurrency: 1,
        prefix: format!("bench:{}", std::process::id()),
        time_limit: 30.0,
        hold: Duration::ZERO,
        fair: false,
        limit: None,
        replica_acks: 0,
        rw: false,
        poll: Duration::ZERO,
        election_ttl: Duration::from_millis(1000),
        keepalive: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it
            .next()
            .unwrap_or_else(|| fail(&format!("{k} needs a value")));
        match k.as_str() {
            "--client" => a.client = v,
            "--workload" => a.workload = v,
            "--urls" => a.urls = v.split(',').map(str::to_owned).collect(),
            "--cycles" => a.cycles = v.parse().unwrap_or_else(|_| fail("--cycles")),
            "--concurrency" => a.concurrency = v.parse().unwrap_or_else(|_| fail("--concurrency")),
            "--prefix" => a.prefix = v,
            "--time-limit" => a.time_limit = v.parse().unwrap_or_else(|_| fail("--time-limit")),
            "--hold-ms" => {
                a.hold = Duration::from_secs_f64(
                    v.parse::<f64>().unwrap_or_else(|_| fail("--hold-ms")) / 1000.0,
                )
            }
            "--fair" => a.fair = v == "1",
            "--limit" => a.limit = Some(v.parse().unwrap_or_else(|_| fail("--limit"))),
            "--replica-acks" => {
                a.replica_acks = v.parse().unwrap_or_else(|_| fail("--replica-acks"))
            }
            "--rw" => a.rw = v == "1",
            "--poll-ms" => {
                a.poll = Duration::from_millis(v.parse().unwrap_or_else(|_| fail("--poll-ms")))
            }
            "--ttl-ms" => {
                a.election_ttl =
                    Duration::from_millis(v.parse().unwrap_or_else(|_| fail("--ttl-ms")))
            }
            "--keepalive-s" => {
                a.keepalive = Some(Duration::from_secs_f64(
                    v.parse::<f64>().unwrap_or_else(|_| fail("--keepalive-s")),
                ))
            }
            _ => fail(&format!("unknown argument {k}")),
        }
    }
    if a.urls.is_empty() || a.concurrency == 0 {
        fail("--urls and a positive --concurrency are required");
    }
    a
}

fn fail(msg: &str) -> ! {
    eprintln!("ironlock-bench: {msg}");
    std::process::exit(2);
}

/// A small xorshift generator for the driver's own 0–2 ms retry pause (not for tokens).
struct Rng(u64);
impl Rng {
    fn new() -> Rng {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).expect("os rng");
        Rng(u64::from_le_bytes(b) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

struct Lower {
    conns: Vec<MultiplexedConnection>,
    sha: String,
    /// Profiling variants (not in the tables): acquire through ironlock's own acquire script
    /// instead of `SET NX PX`, and release waiting for every node instead of a majority.
    acquire_sha: Option<String>,
    release_waits_for_all: bool,
    quorum: usize,
    token_prefix: String,
    seq: AtomicU64,
}

impl Lower {
    async fn connect(urls: &[String], lua_acquire: bool, release_waits_for_all: bool) -> Lower {
        let mut conns = Vec::new();
        let mut sha = String::new();
        let mut acquire_sha = None;
        for u in urls {
            let client = redis::Client::open(u.as_str()).unwrap_or_else(|e| fail(&e.to_string()));
            let mut c = client
                .get_multiplexed_async_connection()
                .await
                .unwrap_or_else(|e| fail(&e.to_string()));
            sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RELEASE_SCRIPT)
                .query_async(&mut c)
                .await
                .unwrap_or_else(|e| fail(&e.to_string()));
            if lua_acquire {
                acquire_sha = Some(
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(ironlock::scripts::ACQUIRE_SOURCE)
                        .query_async::<String>(&mut c)
                        .await
                        .unwrap_or_else(|e| fail(&e.to_string())),
                );
            }
            conns.push(c);
        }
        let mut b = [0u8; 12];
        getrandom::fill(&mut b).expect("os rng");
        Lower {
            quorum: conns.len() / 2 + 1,
            conns,
            sha,
            acquire_sha,
            release_waits_for_all,
            token_prefix: b.iter().map(|x| format!("{x:02x}")).collect(),
            seq: AtomicU64::new(0),
        }
    }

    fn token(&self) -> String {
        format!(
            "{}{:016x}",
            self.token_prefix,
            self.seq.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Sends `cmd` to every node at once; true once a majority answered `yes`, false once a
    /// majority can no longer be reached. Replies still outstanding are drained in the background.
    async fn fan_out(&self, cmd: redis::Cmd, yes: fn(&redis::Value) -> bool, all: bool) -> bool {
        let cmd = Arc::new(cmd);
        let mut futs: FuturesUnordered<_> = self
            .conns
            .iter()
            .map(|c| {
                let mut c = c.clone();
                let cmd = Arc::clone(&cmd);
                async move { cmd.query_async::<redis::Value>(&mut c).await }
            })
            .collect();
        let n = self.conns.len();
        let (mut ok, mut no) = (0, 0);
        let mut granted = false;
        while let Some(r) = futs.next().await {
            match r {
                Ok(v) if yes(&v) => ok += 1,
                _ => no += 1,
            }
            granted = ok >= self.quorum;
            if !all && (granted || no > n - self.quorum) {
                break;
            }
        }
        if !futs.is_empty() {
            tokio::spawn(async move { while futs.next().await.is_some() {} });
        }
        granted
    }

    async fn acquire(&self, key: &str, ttl_ms: u64) -> Option<String> {
        let token = self.token();
        let granted = if let Some(sha) = &self.acquire_sha {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(sha)
                .arg(1)
                .arg(key)
                .arg(&token)
                .arg(ttl_ms)
                .arg("0");
            self.fan_out(cmd, |v| matches!(v, redis::Value::Array(a) if matches!(a.first(), Some(redis::Value::Int(1)))), false)
                .await
        } else {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(&token).arg("NX").arg("PX").arg(ttl_ms);
            self.fan_out(
                cmd,
                |v| {
                    matches!(v, redis::Value::Okay)
                        || matches!(v, redis::Value::SimpleString(s) if s == "OK")
                },
                false,
            )
            .await
        };
        if granted {
            Some(token)
        } else {
            self.release(key, &token).await;
            None
        }
    }

    async fn release(&self, key: &str, token: &str) -> bool {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha).arg(1).arg(key).arg(token);
        self.fan_out(
            cmd,
            |v| matches!(v, redis::Value::Int(1)),
            self.release_waits_for_all,
        )
        .await
    }
}

enum Client {
    Lower(Lower),
    /// The manager, fair acquisition, and a semaphore limit (permits instead of the lock).
    Iron(ironlock::LockManager, bool, Option<u32>),
    Rs(rslock::LockManager),
}

#[derive(Clone, Copy)]
enum Side {
    Lock,
    Read,
    Write,
}

enum Held {
    Lower(String, String),
    Iron(ironlock::Lock),
    Rs(rslock::Lock),
}

impl Client {
    async fn new(args: &Args) -> Client {
        match args.client.as_str() {
            "lower" => Client::Lower(Lower::connect(&args.urls, false, false).await),
            "lower-lua-acquire" => Client::Lower(Lower::connect(&args.urls, true, false).await),
            "lower-release-all" => Client::Lower(Lower::connect(&args.urls, false, true).await),
            "ironlock" => {
                // Fresh nodes: restart quarantine off. (c): retry off (one round per call, the
                // driver retries). (d): the library's defaults (10 retries, 200 ± 100 ms, release
                // wake-ups). Otherwise defaults too (distinct keys never contend).
                let mut cfg = ironlock::Config::new(&args.urls)
                    .restart_quarantine(false)
                    .replica_acks(args.replica_acks);
                if args.workload == "c" {
                    cfg = cfg.retry_count(0);
                }
                match ironlock::LockManager::new(cfg).await {
                    Ok(m) => Client::Iron(m, args.fair, args.limit),
                    Err(e) => fail(&format!("ironlock: {e}")),
                }
            }
            "rslock" => {
                let mut m = rslock::LockManager::new(args.urls.clone());
                if args.workload == "c" {
                    // rslock counts tries, not retries: 1 = a single round.
                    m.set_retry(1, Duration::from_millis(200));
                }
                Client::Rs(m)
            }
            other => fail(&format!("unknown client {other}")),
        }
    }

    async fn acquire(&self, key: &str, ttl_ms: u64) -> Result<Option<Held>, String> {
        self.acquire_as(key, ttl_ms, Side::Lock).await
    }

    /// `side`: a plain lock, or (ironlock only) one side of the read-write lock `key`.
    async fn acquire_as(&self, key: &str, ttl_ms: u64, side: Side) -> Result<Option<Held>, String> {
        match self {
            Client::Lower(l) => Ok(l
                .acquire(key, ttl_ms)
                .await
                .map(|t| Held::Lower(key.to_owned(), t))),
            Client::Iron(m, fair, limit) => match {
                let ttl = Duration::from_millis(ttl_ms);
                let options = ironlock::AcquireOptions::default().fair(*fair);
                match (limit, side) {
                    (Some(k), _) => m.semaphore(key, *k).acquire_with(ttl, options).await,
                    (None, Side::Read) => m.rw_lock(key).read_with(ttl, options).await,
                    (None, Side::Write) => m.rw_lock(key).write_with(ttl, options).await,
                    (None, Side::Lock) => m.acquire_with(&[key], ttl, options).await,
                }
            } {
                Ok(lock) => Ok(Some(Held::Iron(lock))),
                Err(e) if matches!(e.kind(), ironlock::ErrorKind::Contended) => Ok(None),
                Err(e) => Err(e.to_string()),
            },
            Client::Rs(m) => match m.lock(key, Duration::from_millis(ttl_ms)).await {
                Ok(lock) => Ok(Some(Held::Rs(lock))),
                Err(rslock::LockError::Unavailable) => Ok(None),
                Err(e) => Err(e.to_string()),
            },
        }
    }

    async fn release(&self, held: Held) {
        match (self, held) {
            (Client::Lower(l), Held::Lower(k, t)) => {
                l.release(&k, &t).await;
            }
            (_, Held::Iron(lock)) => {
                lock.release().await;
            }
            (Client::Rs(m), Held::Rs(lock)) => m.unlock(&lock).await,
            _ => unreachable!("a lock goes back to the client that made it"),
        }
    }
}

#[derive(Default)]
struct Outcome {
    ok: usize,
    failed: usize,
    lat_us: Vec<u32>,
    first_error: Option<String>,
    /// (c), (d): each worker's successful acquisitions (for Jain's fairness index).
    per_worker: Vec<usize>,
}

fn cpu_us() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn max_rss_kb() -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as u64
}

fn current_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4)
}

/// (a), (b): `cycles` acquire+release cycles on distinct keys, `concurrency` at a time.
async fn run_cycles(
    client: Arc<Client>,
    args: &Args,
    deadline: Instant,
    prefix: &str,
    cycles: usize,
) -> Outcome {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (client, next, prefix) = (Arc::clone(&client), Arc::clone(&next), prefix.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut out = Outcome::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= cycles || Instant::now() >= deadline {
                    break;
                }
                let key = format!("{prefix}:{i}");
                let t0 = Instant::now();
                match client.acquire(&key, TTL_MS).await {
                    Ok(Some(h)) => {
                        client.release(h).await;
                        out.ok += 1;
                        out.lat_us.push(t0.elapsed().as_micros() as u32);
                    }
                    Ok(None) => out.failed += 1,
                    Err(e) => {
                        out.failed += 1;
                        out.first_error.get_or_insert(e);
                    }
                }
            }
            out
        }));
    }
    merge(tasks).await
}

/// The critical section of (c)/(d): `hold` of work, as exactly as a thread sleep goes (tens of
/// µs late). Not `tokio::time::sleep`: the runtime's timer has a 1 ms tick and fires a 2 ms
/// sleep 2 to 4 ms later (measured: p50 2.9 ms, and 3.3 ms while other tasks are busy), which
/// made the hold, and so every contended row, depend on the client's other work.
async fn hold_for(hold: Duration) {
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(hold)).await;
}

/// (c), (d): `concurrency` workers on ONE key until `cycles` successful acquisitions. A refused
/// round is retried by the driver after a uniform 0–2 ms pause; with a library's own retries
/// (d) an exhausted acquire is simply called again.
async fn run_contended(client: Arc<Client>, args: &Args, deadline: Instant) -> Outcome {
    let done = Arc::new(AtomicUsize::new(0));
    let key = format!("{}:hot", args.prefix);
    let target = args.cycles;
    let driver_pause = args.workload == "c" || matches!(*client, Client::Lower(_));
    let hold = args.hold;
    let mut tasks = Vec::new();
    for worker in 0..args.concurrency {
        let (client, done, key) = (Arc::clone(&client), Arc::clone(&done), key.clone());
        // --rw: worker 0 writes, every other worker reads.
        let side = match (args.rw, worker) {
            (false, _) => Side::Lock,
            (true, 0) => Side::Write,
            (true, _) => Side::Read,
        };
        tasks.push(tokio::spawn(async move {
            let mut out = Outcome::default();
            let mut rng = Rng::new();
            'outer: while done.load(Ordering::Relaxed) < target && Instant::now() < deadline {
                let t0 = Instant::now();
                loop {
                    match client.acquire_as(&key, TTL_MS, side).await {
                        Ok(Some(h)) => {
                            if !hold.is_zero() {
                                hold_for(hold).await;
                            }
                            client.release(h).await;
                            done.fetch_add(1, Ordering::Relaxed);
                            out.ok += 1;
                            out.lat_us.push(t0.elapsed().as_micros() as u32);
                            break;
                        }
                        Ok(None) => out.failed += 1,
                        Err(e) => {
                            out.failed += 1;
                            out.first_error.get_or_insert(e);
                        }
                    }
                    if done.load(Ordering::Relaxed) >= target || Instant::now() >= deadline {
                        break 'outer;
                    }
                    if driver_pause {
                        tokio::time::sleep(Duration::from_micros(rng.below(2001))).await;
                    }
                }
            }
            // Failed rounds are the normal path here, not errors.
            out.first_error = None;
            out
        }));
    }
    merge(tasks).await
}

async fn merge(tasks: Vec<tokio::task::JoinHandle<Outcome>>) -> Outcome {
    let mut all = Outcome::default();
    for t in tasks {
        let o = t.await.expect("bench task panicked");
        all.per_worker.push(o.ok);
        all.ok += o.ok;
        all.failed += o.failed;
        all.lat_us.extend(o.lat_us);
        if all.first_error.is_none() {
            all.first_error = o.first_error;
        }
    }
    all
}

/// (e): hold `cycles` locks at once (taken 64 at a time), read the peak RSS, release them all.
async fn run_hold(client: Arc<Client>, args: &Args, deadline: Instant) -> (Outcome, u64, u64) {
    let base = current_rss_kb();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (client, next, prefix, total) = (
            Arc::clone(&client),
            Arc::clone(&next),
            args.prefix.clone(),
            args.cycles,
        );
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            let mut failed = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total || Instant::now() >= deadline {
                    break;
                }
                match client
                    .acquire(&format!("{prefix}:held:{i}"), HOLD_TTL_MS)
                    .await
                {
                    Ok(Some(h)) => held.push(h),
                    _ => failed += 1,
                }
            }
            (held, failed)
        }));
    }
    let mut all = Vec::new();
    let mut out = Outcome::default();
    for t in tasks {
        let (h, f) = t.await.expect("bench task panicked");
        all.extend(h);
        out.failed += f;
    }
    out.ok = all.len();
    let peak = max_rss_kb().max(current_rss_kb());
    let client2 = Arc::clone(&client);
    let mut rel: FuturesUnordered<_> = FuturesUnordered::new();
    for h in all {
        rel.push(client2.release(h));
        if rel.len() >= 64 {
            rel.next().await;
        }
    }
    while rel.next().await.is_some() {}
    (out, base, peak)
}

/// What (e) with `--keepalive-s` measured beyond the common fields: the acquisition's wall time
/// and CPU (the common `seconds` and `cpu_us_per_cycle`), the JSON fields of the hold phase, and
/// why the run failed (locks lost, keys left on the nodes), if it did.
struct KeepAliveReport {
    acquire_secs: f64,
    acquire_cpu_us: f64,
    fields: String,
    failure: Option<String>,
}

/// user+system CPU seconds of the redis-server nodes at `urls` (`INFO cpu`, through redis-cli as
/// bench.py reads it), or None when a node did not answer.
fn server_cpu_s(urls: &[String]) -> Option<f64> {
    let mut total = 0.0;
    for u in urls {
        let out = std::process::Command::new("redis-cli")
            .args(["-u", u, "INFO", "cpu"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        total += field("used_cpu_user")? + field("used_cpu_sys")?;
    }
    Some(total)
}

/// Keys matching `pattern` over the nodes at `urls` (`redis-cli --scan`), or None when a node
/// did not answer.
fn keys_matching(urls: &[String], pattern: &str) -> Option<usize> {
    let mut n = 0;
    for u in urls {
        let out = std::process::Command::new("redis-cli")
            .args(["-u", u, "--scan", "--pattern", pattern])
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        n += String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .count();
    }
    Some(n)
}

/// Runs a blocking probe (redis-cli) off the runtime's worker threads.
async fn probe<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("probe task")
}

/// (e) with `--keepalive-s D`: held-lock scale. `cycles` locks `<prefix>:<i>` of ttl `--ttl-ms`
/// are acquired `concurrency` at a time, each put under auto-extension (`keep_alive`) as soon
/// as it is granted; then all are held D seconds (the hold phase, the only one whose client
/// CPU, server CPU and extensions are measured), checked (lost signal, validity) and released,
/// and the nodes are checked for leftover keys. Only the public API: extensions are the
/// manager's `stats().extensions`.
async fn run_keepalive(
    client: Arc<Client>,
    args: &Args,
    deadline: Instant,
    hold: Duration,
) -> (Outcome, KeepAliveReport) {
    let Client::Iron(m, ..) = &*client else {
        fail("--keepalive-s is ironlock's only")
    };
    let ttl = args.election_ttl;
    let rss_before = current_rss_kb();
    let cpu_a = cpu_us();
    let t_a = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (m, next, prefix, total) = (
            m.clone(),
            Arc::clone(&next),
            args.prefix.clone(),
            args.cycles,
        );
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            let mut out = Outcome::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total || Instant::now() >= deadline {
                    break;
                }
                let name = format!("{prefix}:{i}");
                let t0 = Instant::now();
                match m.acquire(&[name.as_str()], ttl).await {
                    Ok(lock) => {
                        let keeper = lock.keep_alive();
                        out.lat_us.push(t0.elapsed().as_micros() as u32);
                        held.push((lock, keeper));
                    }
                    Err(e) => {
                        out.failed += 1;
                        out.first_error.get_or_insert(e.to_string());
                    }
                }
            }
            (held, out)
        }));
    }
    let mut held = Vec::with_capacity(args.cycles);
    let mut out = Outcome::default();
    for t in tasks {
        let (h, o) = t.await.expect("bench task panicked");
        held.extend(h);
        out.failed += o.failed;
        out.lat_us.extend(o.lat_us);
        if out.first_error.is_none() {
            out.first_error = o.first_error;
        }
    }
    out.ok = held.len();
    let acquire_secs = t_a.elapsed().as_secs_f64();
    let acquire_cpu_us = cpu_us() - cpu_a;
    let rss_held = current_rss_kb();

    // The hold phase.
    let urls = args.urls.clone();
    let srv0 = probe(move || server_cpu_s(&urls)).await;
    let st0 = m.stats();
    let cpu0 = cpu_us();
    let t0 = Instant::now();
    tokio::time::sleep(hold).await;
    let cpu1 = cpu_us();
    let hold_secs = t0.elapsed().as_secs_f64();
    let st1 = m.stats();
    let urls = args.urls.clone();
    let srv1 = probe(move || server_cpu_s(&urls)).await;

    // Lost: the lost signal fired, or the lock is no longer valid, or the release no longer
    // found it held on a quorum (more than N - Q nodes answered that the token was gone). A
    // release that found fewer than a quorum holding it only because nodes did not answer in
    // time (timeouts, errors) is unconfirmed, not lost: the key check below sees its keys go.
    let mut bad = vec![0u8; held.len()];
    let (mut lost_signal, mut invalid) = (0, 0);
    for (i, (lock, _)) in held.iter().enumerate() {
        if lock.is_lost() {
            lost_signal += 1;
            bad[i] = 1;
        } else if !lock.is_valid() {
            invalid += 1;
            bad[i] = 1;
        }
    }
    let t_r = Instant::now();
    let (mut not_held, mut unconfirmed) = (0, 0);
    let (mut first_not_held, mut first_unconfirmed) = (None, None);
    let mut rel: FuturesUnordered<_> = FuturesUnordered::new();
    let mut results = Vec::with_capacity(held.len());
    for (i, (lock, _)) in held.iter().enumerate() {
        rel.push(async move {
            let r = lock.release().await;
            let n = r.report.nodes.len();
            let against = r
                .report
                .nodes
                .iter()
                .filter(|v| v.vote == ironlock::Vote::Against)
                .count();
            let gone = !r.held && against > n - lock.quorum();
            (i, r.held, gone, (!r.held).then(|| r.report.to_string()))
        });
        if rel.len() >= args.concurrency {
            results.extend(rel.next().await);
        }
    }
    while let Some(r) = rel.next().await {
        results.push(r);
    }
    drop(rel);
    for (i, was_held, gone, report) in results {
        if gone {
            not_held += 1;
            bad[i] = 1;
            first_not_held = first_not_held.or(report);
        } else if !was_held {
            unconfirmed += 1;
            first_unconfirmed = first_unconfirmed.or(report);
        }
    }
    let release_secs = t_r.elapsed().as_secs_f64();
    drop(held);
    let lost = bad.iter().filter(|&&b| b == 1).count();

    // Nothing left on the nodes: a release returns at a quorum, the other deletes finish within
    // node_timeout; look again for up to 3 s.
    let pattern = format!("{}:*", args.prefix);
    let mut keys_left = None;
    for _ in 0..30 {
        let (urls, pattern) = (args.urls.clone(), pattern.clone());
        keys_left = probe(move || keys_matching(&urls, &pattern)).await;
        if keys_left == Some(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let extensions = st1.extensions - st0.extensions;
    let hold_cpu_pct = (cpu1 - cpu0) / 1e6 / hold_secs * 100.0;
    let server_s = match (srv0, srv1) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let json_opt = |v: Option<f64>| v.map_or("null".to_owned(), |x| format!("{x:.3}"));
    let fields = format!(
        ",\"acquire_s\":{acquire_secs:.3},\"hold_s\":{hold_secs:.3},\"ttl_ms\":{},\"hold_cpu_pct\":{hold_cpu_pct:.2},\"extensions\":{extensions},\"extension_failures\":{},\"extensions_per_lock\":{:.3},\"server_cpu_hold_us\":{},\"server_us_per_extension\":{},\"lost\":{lost},\"lost_signal\":{lost_signal},\"invalid_at_end\":{invalid},\"not_held_at_release\":{not_held},\"release_unconfirmed\":{unconfirmed},\"lost_before_hold\":{},\"lost_stat\":{},\"rss_before_kb\":{rss_before},\"rss_held_kb\":{rss_held},\"bytes_per_lock\":{:.1},\"release_s\":{release_secs:.3},\"keys_left\":{}",
        ttl.as_millis(),
        st1.extension_failures - st0.extension_failures,
        extensions as f64 / out.ok.max(1) as f64,
        json_opt(server_s.map(|s| s * 1e6)),
        json_opt(
            server_s
                .filter(|_| extensions > 0)
                .map(|s| s * 1e6 / extensions as f64)
        ),
        st0.lost,
        st1.lost,
        (rss_held as f64 - rss_before as f64) * 1024.0 / out.ok.max(1) as f64,
        keys_left.map_or("null".to_owned(), |k| k.to_string()),
    );
    let mut failure = Vec::new();
    if lost > 0 {
        failure.push(format!(
            "{lost} of {} locks lost (lost signal {lost_signal}, invalid at the end {invalid}, not held at release {not_held}{})",
            out.ok,
            first_not_held.map_or(String::new(), |r| format!("; a release not held: {r}"))
        ));
    }
    match keys_left {
        Some(0) => {}
        Some(k) => failure.push(format!(
            "{k} keys left on the nodes after the release{}",
            first_unconfirmed.map_or(String::new(), |r| format!(
                " ({unconfirmed} releases unconfirmed, e.g. {r})"
            ))
        )),
        None => failure.push("could not count the keys left on the nodes".to_owned()),
    }
    let report = KeepAliveReport {
        acquire_secs,
        acquire_cpu_us,
        fields,
        failure: (!failure.is_empty()).then(|| failure.join("; ")),
    };
    (out, report)
}

/// (f): `cycles` failovers of the election `<prefix>:election`. Each time a leader is granted, a
/// standby starts waiting (in the election's line, or polling with a try-once acquire every
/// `--poll-ms`), and the leader then stops without resigning, as a killed process would: its
/// extensions stop and its keys stay until they expire. Measured: from that stop to the standby
/// leading (`lat_us`), and that time less what the election's key still had to live on the
/// first node when the leader stopped (`overhead_us`: how long the standby took to notice).
async fn run_failover(client: Arc<Client>, args: &Args, deadline: Instant) -> (Outcome, Vec<u32>) {
    let Client::Iron(m, ..) = &*client else {
        fail("workload f is ironlock's only")
    };
    let name = format!("{}:election", args.prefix);
    let election = m.election(name.as_str());
    let ttl = args.election_ttl;
    let mut probe = redis::Client::open(args.urls[0].as_str())
        .and_then(|c| Ok(c.get_connection()?))
        .unwrap_or_else(|e| fail(&format!("probe connection: {e}")));
    let mut out = Outcome::default();
    let mut overhead = Vec::new();
    let mut rng = Rng::new();
    while out.ok < args.cycles && Instant::now() < deadline {
        let leader = match election.campaign("leader", ttl).await {
            Ok(l) => l,
            Err(e) => {
                out.failed += 1;
                out.first_error.get_or_insert(e.to_string());
                continue;
            }
        };
        // The standby comes at a random moment of the leader's term: a poller that started with
        // the grant would poll in step with the key's expiry (a ttl that is a multiple of the
        // poll interval) and notice it at once, which a real failover does not arrange.
        tokio::time::sleep(Duration::from_micros(rng.below(250_001))).await;
        let standby = {
            let (m, name, poll) = (m.clone(), name.clone(), args.poll);
            tokio::spawn(async move {
                if poll.is_zero() {
                    let l = m.election(name.as_str()).campaign("standby", ttl).await?;
                    return Ok::<_, ironlock::Error>(l.lock().token().to_owned());
                }
                loop {
                    let once = ironlock::AcquireOptions {
                        retry_count: Some(0),
                        ..Default::default()
                    };
                    match m.acquire_with(&[name.as_str()], ttl, once).await {
                        Ok(l) => {
                            let token = l.token().to_owned();
                            l.release().await;
                            return Ok(token);
                        }
                        Err(e) if e.kind() == ironlock::ErrorKind::Contended => {
                            tokio::time::sleep(poll).await
                        }
                        Err(e) => return Err(e),
                    }
                }
            })
        };
        // The standby is waiting (in line, or between polls) before the leader stops.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let left: i64 = redis::cmd("PTTL")
            .arg(&name)
            .query(&mut probe)
            .unwrap_or(-1);
        let stopped = Instant::now();
        drop(leader);
        match standby.await.expect("standby task") {
            Ok(token) => {
                let took = stopped.elapsed();
                out.ok += 1;
                out.lat_us.push(took.as_micros() as u32);
                let key_left = Duration::from_millis(left.max(0) as u64);
                overhead.push(took.saturating_sub(key_left).as_micros() as u32);
                // The standby stands down: release by token (line mode: its leadership, still
                // extended by the campaign's keep-alive, was moved out of the task).
                let _ = m.release_token(&[name.as_str()], &token).await;
            }
            Err(e) => {
                out.failed += 1;
                out.first_error.get_or_insert(e.to_string());
            }
        }
    }
    (out, overhead)
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64
}

fn main() {
    let args = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let client = Arc::new(Client::new(&args).await);
        // Warm-up: connections, scripts loaded, code paths hot. Not measured.
        let warm = run_cycles(
            Arc::clone(&client),
            &args,
            Instant::now() + Duration::from_secs(5),
            &format!("{}:warm", args.prefix),
            (args.concurrency * 4).max(50),
        )
        .await;
        if warm.ok == 0 {
            fail(&format!("warm-up failed: {}", warm.first_error.unwrap_or_default()));
        }
        let deadline = Instant::now() + Duration::from_secs_f64(args.time_limit);
        let cpu0 = cpu_us();
        let t0 = Instant::now();
        let mut failover = None;
        let mut keepalive = None;
        let (mut out, rss) = match args.workload.as_str() {
            "a" | "b" => (run_cycles(Arc::clone(&client), &args, deadline, &args.prefix, args.cycles).await, None),
            "c" | "d" => (run_contended(Arc::clone(&client), &args, deadline).await, None),
            "e" if args.keepalive.is_some() => {
                let hold = args.keepalive.unwrap_or_default();
                let (o, r) = run_keepalive(Arc::clone(&client), &args, deadline, hold).await;
                keepalive = Some(r);
                (o, None)
            }
            "e" => {
                let (o, base, peak) = run_hold(Arc::clone(&client), &args, deadline).await;
                (o, Some((base, peak)))
            }
            "f" => {
                let (o, mut overhead) = run_failover(Arc::clone(&client), &args, deadline).await;
                overhead.sort_unstable();
                failover = Some(overhead);
                (o, None)
            }
            w => fail(&format!("unknown workload {w}")),
        };
        // (e) with --keepalive-s: the common fields describe the acquisition of the locks.
        let (secs, cpu) = match &keepalive {
            Some(r) => (r.acquire_secs, r.acquire_cpu_us),
            None => (t0.elapsed().as_secs_f64(), cpu_us() - cpu0),
        };
        out.lat_us.sort_unstable();
        let target = args.cycles;
        let complete = out.ok >= target;
        let mut line = format!(
            "{{\"ok\":{},\"failed\":{},\"target\":{},\"complete\":{},\"seconds\":{:.6},\"cps\":{:.3},\"p50_us\":{:.1},\"p99_us\":{:.1},\"cpu_us_per_cycle\":{:.3}",
            out.ok,
            out.failed,
            target,
            complete,
            secs,
            out.ok as f64 / secs,
            pct(&out.lat_us, 0.50),
            pct(&out.lat_us, 0.99),
            if out.ok > 0 { cpu / out.ok as f64 } else { 0.0 },
        );
        if let Some((base, peak)) = rss {
            line.push_str(&format!(",\"rss_base_kb\":{base},\"rss_peak_kb\":{peak}"));
        }
        if let Some(r) = &keepalive {
            line.push_str(&r.fields);
            if let Some(f) = &r.failure {
                out.first_error = Some(match out.first_error.take() {
                    Some(e) => format!("{f}; first failed acquire: {e}"),
                    None => f.clone(),
                });
            }
        }
        if let Some(overhead) = &failover {
            line.push_str(&format!(
                ",\"ttl_ms\":{},\"overhead_p50_us\":{:.1},\"overhead_p99_us\":{:.1}",
                args.election_ttl.as_millis(),
                pct(overhead, 0.50),
                pct(overhead, 0.99)
            ));
        }
        if matches!(args.workload.as_str(), "c" | "d") && !out.per_worker.is_empty() {
            // Jain's index (Σx)² / (n·Σx²): 1 when every worker got the same share.
            let sum: f64 = out.per_worker.iter().map(|&x| x as f64).sum();
            let sq: f64 = out.per_worker.iter().map(|&x| (x as f64).powi(2)).sum();
            let jain = if sq > 0.0 { sum * sum / (out.per_worker.len() as f64 * sq) } else { 0.0 };
            line.push_str(&format!(",\"jain\":{jain:.4},\"per_worker\":{:?}", out.per_worker));
        }
        if let Client::Iron(m, ..) = &*client {
            // Where the rounds go (warm-up included): rounds and wake-ups per grant.
            let st = m.stats();
            let per = |x: u64| x as f64 / st.granted.max(1) as f64;
            line.push_str(&format!(
                ",\"rounds_per_grant\":{:.2},\"wakeups_per_grant\":{:.2}",
                per(st.rounds),
                per(st.wakeups)
            ));
        }
        if let Some(e) = &out.first_error {
            line.push_str(&format!(",\"error\":{:?}", e));
        }
        line.push('}');
        println!("{line}");
        let failed_check = keepalive.as_ref().is_some_and(|r| r.failure.is_some());
        std::process::exit(if failed_check {
            4
        } else if complete {
            0
        } else {
            3
        });
    });
}
