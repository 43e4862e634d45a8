//! The lock manager: acquire with retries and release wake-ups, extend, release, auto-extension.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::config::{Config, validate_resources};
use crate::error::{Error, ErrorKind, Report, Result, Vote};
use crate::lock::{Lock, LockInner, LockState, Released};
use crate::node::{Failure, Node};
use crate::notify::Notifier;
use crate::quorum::{self, Reply, Round, Tally};
use crate::scripts;
use crate::token;

/// State shared by a manager and every lock it granted.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) quorum: usize,
    notifier: Arc<Notifier>,
    rounds: AtomicU64,
    granted: AtomicU64,
    closed: AtomicBool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.notifier.shutdown();
    }
}

/// Per-acquire options beyond the manager's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcquireOptions {
    /// Keep retrying until this much time has passed (instead of `retry_count` rounds); no round
    /// starts after the deadline.
    pub wait: Option<Duration>,
    /// Overrides the manager's `retry_count` for this call (`Some(0)` = a single round).
    pub retry_count: Option<u32>,
    /// Compute and return a fencing token (SPEC §3.3).
    pub fencing: bool,
}

impl AcquireOptions {
    /// One round only (try-lock).
    pub fn try_once() -> Self {
        AcquireOptions {
            retry_count: Some(0),
            ..Default::default()
        }
    }

    /// Retry until `wait` has passed.
    pub fn wait(wait: Duration) -> Self {
        AcquireOptions {
            wait: Some(wait),
            ..Default::default()
        }
    }

    /// Also compute a fencing token.
    #[must_use]
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }
}

/// Counters since the manager started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Acquire rounds run.
    pub rounds: u64,
    /// Locks granted.
    pub granted: u64,
    /// Waits ended early by a release notification.
    pub wakeups: u64,
}

/// One node as the manager sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// URL with the password redacted.
    pub url: String,
    /// A connection is open.
    pub connected: bool,
    /// Connected and out of restart quarantine: its "yes" votes count.
    pub eligible: bool,
    /// Time left in restart quarantine.
    pub quarantine_remaining: Duration,
    /// `run_id` from `INFO server` at the last connection.
    pub run_id: String,
    /// Server version from `INFO server`.
    pub version: String,
    /// Server uptime (estimated from the last `INFO server`).
    pub uptime: Duration,
    /// The last connection error, if any.
    pub last_error: Option<String>,
    /// Counted "yes" votes.
    pub votes_for: u64,
    /// "No" votes.
    pub votes_against: u64,
    /// Errors (including "not connected").
    pub errors: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// "Yes" votes refused by restart quarantine.
    pub not_eligible: u64,
    /// Successful reconnections.
    pub reconnects: u64,
}

/// What one node holds for one key (for `ironlock status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// URL with the password redacted.
    pub url: String,
    /// The token stored under the key, if any.
    pub token: Option<String>,
    /// Remaining time to live, if the key exists.
    pub ttl: Option<Duration>,
    /// The error, if the node could not be asked.
    pub error: Option<String>,
}

/// Takes and manages Redlock locks over N independent Redis masters. Cheap to clone.
#[derive(Clone)]
pub struct LockManager {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field(
                "nodes",
                &self
                    .shared
                    .nodes
                    .iter()
                    .map(|n| &n.display)
                    .collect::<Vec<_>>(),
            )
            .field("quorum", &self.shared.quorum)
            .finish()
    }
}

impl LockManager {
    /// Validates the configuration and connects to every node at once (each bounded by
    /// `connect_timeout`). A node that is down does not stop the manager from starting: it is
    /// a failing voter until a background reconnection succeeds.
    pub async fn new(config: Config) -> Result<LockManager> {
        let specs = config.validate()?;
        let quarantine = config
            .restart_quarantine
            .then(|| config.max_ttl + config.drift(config.max_ttl) + Duration::from_secs(1));
        let mut nodes = Vec::with_capacity(specs.len());
        for (i, spec) in specs.into_iter().enumerate() {
            let display = spec.display.clone();
            let ca = config.tls_ca_cert.as_deref();
            let node = Node::new(
                spec,
                config.node_timeout,
                config.connect_timeout,
                quarantine,
                ca,
            )
            .map_err(|e| match e.strip_prefix("tls_ca_cert: ") {
                Some(why) => Error::invalid(format!("tls_ca_cert: unusable CA certificate: {why}")),
                None => Error::new(ErrorKind::Connection, format!("nodes[{i}]: {display}: {e}")),
            })?;
            nodes.push(node);
        }
        resolve_hosts(&config, &nodes).await?;
        futures_util::future::join_all(nodes.iter().map(|n| n.connect_or_schedule())).await;
        let quorum = quorum::quorum(nodes.len());
        let notifier = Notifier::new(nodes.clone());
        Ok(LockManager {
            shared: Arc::new(Shared {
                config,
                nodes,
                quorum,
                notifier,
                rounds: AtomicU64::new(0),
                granted: AtomicU64::new(0),
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// The settings this manager runs with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Q = floor(N / 2) + 1.
    pub fn quorum(&self) -> usize {
        self.shared.quorum
    }

    /// Counters since start.
    pub fn stats(&self) -> Stats {
        Stats {
            rounds: self.shared.rounds.load(Ordering::Relaxed),
            granted: self.shared.granted.load(Ordering::Relaxed),
            wakeups: self.shared.notifier.wakeups.load(Ordering::Relaxed),
        }
    }

    /// Every node's connection, eligibility and vote counters.
    pub fn node_status(&self) -> Vec<NodeStatus> {
        self.shared.nodes.iter().map(|n| n.status()).collect()
    }

    /// Waits until the requests that rounds stopped waiting for (a release returns once a
    /// quorum deleted the keys; an acquire once its outcome is decided) have been answered or
    /// have timed out: at most `node_timeout` plus a little. Call it before a short-lived
    /// process exits right after a release, so that the last deletes reach every node.
    pub async fn flush(&self) {
        let limit = Instant::now() + self.shared.config.node_timeout + Duration::from_millis(100);
        while self.shared.nodes.iter().any(|n| n.draining_now() > 0) && Instant::now() < limit {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Stops background tasks; later operations fail with `Unavailable`. Locks already granted
    /// are not released (release them first).
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.notifier.shutdown();
    }

    /// Acquires `resources` for `ttl` with the manager's retry settings.
    pub async fn acquire<S: AsRef<str>>(&self, resources: &[S], ttl: Duration) -> Result<Lock> {
        self.acquire_with(resources, ttl, AcquireOptions::default())
            .await
    }

    /// Acquires `resources` (all of them, or none, on each node) for `ttl`.
    ///
    /// Cancel-safe: if the returned future is dropped before it completes, the keys it may have
    /// set are released in the background.
    pub async fn acquire_with<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
        options: AcquireOptions,
    ) -> Result<Lock> {
        let shared = &self.shared;
        validate_resources(resources)?;
        shared.config.check_ttl("ttl", ttl)?;
        self.check_open()?;
        let resources: Vec<String> = resources.iter().map(|r| r.as_ref().to_owned()).collect();
        let keys: Vec<String> = resources
            .iter()
            .map(|r| format!("{}{r}", shared.config.key_prefix))
            .collect();
        let request = Arc::new(AcquireRequest::new(
            &keys,
            token::new_token()?,
            ttl,
            options.fencing,
        ));
        let started = Instant::now();
        // A wait too long to represent is no deadline at all.
        let deadline = options.wait.and_then(|w| started.checked_add(w));
        let retries = match (options.retry_count, options.wait) {
            (Some(n), _) => n,
            (None, Some(_)) => u32::MAX,
            (None, None) => shared.config.retry_count,
        };
        let mut guard = CancelGuard {
            shared: shared.clone(),
            request: request.clone(),
            armed: true,
        };
        let mut watch: Option<crate::notify::Watch> = None;
        let mut round_no = 0u32;
        loop {
            round_no += 1;
            if let Some(w) = &watch {
                w.waiter.consumed();
            }
            let round_started = Instant::now();
            let err = match self.acquire_round(&request, &resources, round_no).await {
                Ok(lock) => {
                    guard.armed = false;
                    return Ok(lock);
                }
                Err(e) => e,
            };
            let now = Instant::now();
            let last_round = now - round_started;
            if round_no > retries || deadline.is_some_and(|d| now >= d) {
                guard.armed = false;
                return Err(err);
            }
            let mut pause = retry_pause(&shared.config);
            let mut last_chance = false;
            if let Some(d) = deadline {
                let left = d - now;
                if pause >= left {
                    pause = left;
                    last_chance = true;
                }
            }
            // Subscribe once we know we have to wait; a release then ends the pause early.
            let w = watch.get_or_insert_with(|| {
                shared
                    .notifier
                    .watch(keys.iter().map(|k| scripts::release_channel(k)).collect())
            });
            tokio::select! {
                _ = tokio::time::sleep(pause) => {
                    if last_chance {
                        guard.armed = false;
                        return Err(err);
                    }
                }
                _ = w.waiter.notify.notified() => {
                    w.record_wakeup();
                    // Waiters in other processes hear the same release: a short random spread
                    // (up to two of our rounds, at most WAKE_SPREAD) lets one of them win all
                    // nodes instead of all of them splitting the votes.
                    let spread = WAKE_SPREAD.min(2 * last_round);
                    tokio::time::sleep(spread.mul_f64(token::random_unit())).await;
                }
            }
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "the lock manager is closed",
            ));
        }
        Ok(())
    }

    async fn acquire_round(
        &self,
        req: &Arc<AcquireRequest>,
        resources: &[String],
        round_no: u32,
    ) -> Result<Lock> {
        let shared = &self.shared;
        let config = &shared.config;
        shared.rounds.fetch_add(1, Ordering::Relaxed);
        let t1 = Instant::now();
        let round = quorum::run(&shared.nodes, Tally::Eligible, t1, |node| {
            let req = req.clone();
            async move {
                if let Some(set) = req.set_nx_get.as_ref().filter(|_| node.has_set_nx_get()) {
                    // One key, no fencing: a plain SET NX costs the server a fraction of a script.
                    return match node.query::<Option<String>>(set).await {
                        Ok(None) => Reply::Yes(0),
                        // Our own key from an earlier round: its expiry is older than this
                        // round's, so it cannot count; the rollback deletes it.
                        Ok(Some(v)) if v == req.token => Reply::Failed(Failure::Error(
                            "holds this lock's key from an earlier round".to_owned(),
                        )),
                        Ok(Some(_)) => Reply::No,
                        Err(f) => Reply::Failed(f),
                    };
                }
                match node.query::<(i64, i64)>(&req.script).await {
                    Ok((1, fence)) => Reply::Yes(fence.max(0) as u64),
                    Ok(_) => Reply::No,
                    Err(f) => Reply::Failed(f),
                }
            }
        })
        .await;
        let drift = config.drift(req.ttl);
        let mut ok = round.granted >= shared.quorum;
        let mut decided_at = round.decided_at;
        let mut elapsed_report = round.report.elapsed;
        let mut fence = None;
        // The fence round's report explains a failed write-back; otherwise the acquire's does.
        let mut fence_failure: Option<Report> = None;
        if ok && req.fencing {
            let f = (round.max_payload + 1).max(unix_micros());
            let written = self.write_fence(req, f, t1).await;
            decided_at = written.decided_at;
            elapsed_report = written.report.elapsed;
            ok = written.granted >= shared.quorum;
            if ok {
                fence = Some(f);
            } else {
                fence_failure = Some(written.report);
            }
        }
        let elapsed = decided_at - t1;
        let validity = quorum::validity(req.ttl, elapsed, drift);
        let validity_left = validity.is_some_and(|v| v > config.min_validity);
        if ok
            && quorum::classify(
                shared.nodes.len(),
                round.granted,
                round.refused,
                validity_left,
            )
            .is_ok()
        {
            shared.granted.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(resources = ?resources, ?elapsed, "lock granted");
            let mut report = round.report;
            report.rounds = round_no;
            report.elapsed = elapsed_report;
            let (lost_tx, _) = watch::channel(false);
            return Ok(Lock {
                inner: Arc::new(LockInner {
                    shared: shared.clone(),
                    resources: resources.to_vec(),
                    keys: req.keys.clone(),
                    token: req.token.clone(),
                    fence,
                    state: Mutex::new(LockState {
                        ttl: req.ttl,
                        deadline: t1 + req.ttl - drift,
                        extensions: 0,
                        released: false,
                        report,
                    }),
                    lost: AtomicBool::new(false),
                    lost_tx,
                }),
            });
        }
        // Roll back everywhere a key of ours may exist: every node except those that refused
        // (all-or-nothing per node: a refusing node set nothing).
        let rollback: Vec<Arc<Node>> = shared
            .nodes
            .iter()
            .zip(&round.report.nodes)
            .filter(|(_, r)| r.vote != Vote::Against)
            .map(|(n, _)| n.clone())
            .collect();
        if !rollback.is_empty() {
            release_on(&rollback, &req.keys, &req.token, false).await;
        }
        let kind = quorum::classify(shared.nodes.len(), round.granted, round.refused, false)
            .err()
            .unwrap_or(ErrorKind::Unavailable);
        let mut report = fence_failure.unwrap_or(round.report);
        report.rounds = round_no;
        let why = if round.granted >= shared.quorum {
            "a quorum answered but no validity was left (or the fence write-back failed)"
        } else if kind == ErrorKind::Contended {
            "the lock is held elsewhere"
        } else {
            "no quorum of eligible nodes answered"
        };
        tracing::debug!(resources = ?resources, round = round_no, %kind, "acquire round failed");
        Err(Error::new(
            kind,
            format!(
                "could not acquire {resources:?}: {why} ({} of {} nodes granted, quorum {})",
                round.granted,
                shared.nodes.len(),
                shared.quorum
            ),
        )
        .with_report(report))
    }

    async fn write_fence(&self, req: &Arc<AcquireRequest>, f: u64, t1: Instant) -> Round {
        let f = f.to_string();
        let cmd = Arc::new(scripts::evalsha(
            &scripts::FENCE,
            &req.script_keys,
            &[req.token.as_str(), f.as_str()],
        ));
        quorum::run(&self.shared.nodes, Tally::Eligible, t1, |node| {
            let cmd = cmd.clone();
            async move {
                match node.query::<i64>(&cmd).await {
                    Ok(1) => Reply::Yes(0),
                    Ok(_) => Reply::No,
                    Err(e) => Reply::Failed(e),
                }
            }
        })
        .await
    }

    /// Acquires, runs `work` while the lock is extended in the background, then releases.
    /// `work` receives the lock: select on [`Lock::lost`] to stop at once when it is lost.
    /// Returns `Lost` (and discards the work's output) if the lock was lost during the work.
    pub async fn using<S, F, Fut, T>(&self, resources: &[S], ttl: Duration, work: F) -> Result<T>
    where
        S: AsRef<str>,
        F: FnOnce(Lock) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let lock = self.acquire(resources, ttl).await?;
        let keeper = lock.keep_alive();
        let out = work(lock.clone()).await;
        keeper.stop();
        let lost = lock.is_lost() || !lock.is_valid();
        let released = lock.release().await;
        if lost {
            return Err(lock
                .lost_error("the lock was lost while the work ran")
                .with_report(released.report));
        }
        Ok(out)
    }

    /// Deletes `resources` on every node where they still hold `token` (e.g. a lock taken by
    /// another process, whose token you were given).
    pub async fn release_token<S: AsRef<str>>(
        &self,
        resources: &[S],
        token: &str,
    ) -> Result<Released> {
        validate_resources(resources)?;
        if token.is_empty() {
            return Err(Error::invalid("token: empty"));
        }
        let keys: Vec<String> = resources
            .iter()
            .map(|r| format!("{}{}", self.shared.config.key_prefix, r.as_ref()))
            .collect();
        let round = release_round(&self.shared.nodes, &keys, token, true, Tally::ReleaseAll).await;
        Ok(released(&self.shared, round))
    }

    /// Who holds `resource` on each node, and for how long.
    pub async fn inspect(&self, resource: &str) -> Result<Vec<Holder>> {
        validate_resources(&[resource])?;
        let key = format!("{}{resource}", self.shared.config.key_prefix);
        let asks = self.shared.nodes.iter().map(|node| {
            let key = key.clone();
            async move {
                let mut cmd = redis::pipe();
                cmd.get(&key).pttl(&key);
                let mut holder = Holder {
                    url: node.display.clone(),
                    token: None,
                    ttl: None,
                    error: None,
                };
                match node.query_pipe::<(Option<String>, i64)>(&cmd).await {
                    Ok((token, pttl)) => {
                        holder.token = token;
                        holder.ttl = (pttl >= 0).then(|| Duration::from_millis(pttl as u64));
                    }
                    Err(f) => holder.error = Some(f.text()),
                }
                holder
            }
        });
        Ok(futures_util::future::join_all(asks).await)
    }
}

/// Everything one acquire call sends, prepared once and shared by its rounds.
struct AcquireRequest {
    keys: Vec<String>,
    /// Lock keys, then (with fencing) their fence counter keys.
    script_keys: Vec<String>,
    token: String,
    ttl: Duration,
    fencing: bool,
    /// The acquire script (all-or-nothing per node, fence counters).
    script: redis::Cmd,
    /// One key and no fencing: `SET key token NX PX ttl GET`, sent instead of the script to
    /// nodes that take it (Redis 7+).
    set_nx_get: Option<redis::Cmd>,
}

impl AcquireRequest {
    fn new(keys: &[String], token: String, ttl: Duration, fencing: bool) -> Self {
        let mut script_keys = keys.to_vec();
        if fencing {
            script_keys.extend(keys.iter().map(|k| scripts::fence_key(k)));
        }
        let ttl_ms = ttl.as_millis().to_string();
        let flag = if fencing { "1" } else { "0" };
        let script = scripts::evalsha(&scripts::ACQUIRE, &script_keys, &[&token, &ttl_ms, flag]);
        let set_nx_get = (keys.len() == 1 && !fencing).then(|| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&keys[0])
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(&ttl_ms)
                .arg("GET");
            cmd
        });
        AcquireRequest {
            keys: keys.to_vec(),
            script_keys,
            token,
            ttl,
            fencing,
            script,
            set_nx_get,
        }
    }
}

/// Releases the keys of an acquire whose future was dropped mid-flight.
struct CancelGuard {
    shared: Arc<Shared>,
    request: Arc<AcquireRequest>,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // A cancelled acquire must leave no key behind. Release is a message to Redis, so it is
        // handed to the runtime; commands on each connection stay ordered after the acquire.
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            let (shared, req) = (self.shared.clone(), self.request.clone());
            h.spawn(async move {
                release_on(&shared.nodes, &req.keys, &req.token, false).await;
            });
        }
    }
}

/// The longest random pause between a release wake-up and the next round (the pause is also at
/// most two of the waiter's own rounds: on a fast network the spread stays short).
const WAKE_SPREAD: Duration = Duration::from_millis(2);

fn retry_pause(config: &Config) -> Duration {
    let delay = config.retry_delay.as_secs_f64();
    let jitter = config.retry_jitter.as_secs_f64();
    let u = token::random_unit();
    // Both are at most a day (validated), so this cannot overflow.
    Duration::from_secs_f64((delay + jitter * (2.0 * u - 1.0)).max(0.0))
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Compare-and-delete on `nodes`: returns once a quorum of them deleted the keys (or every
/// node answered, or `node_timeout` passed); the other deletes finish in the background.
async fn release_on(nodes: &[Arc<Node>], keys: &[String], token: &str, announce: bool) -> Round {
    release_round(nodes, keys, token, announce, Tally::Release).await
}

async fn release_round(
    nodes: &[Arc<Node>],
    keys: &[String],
    token: &str,
    announce: bool,
    tally: Tally,
) -> Round {
    let flag = if announce { "1" } else { "0" };
    let cmd = Arc::new(scripts::evalsha(&scripts::RELEASE, keys, &[token, flag]));
    quorum::run(nodes, tally, Instant::now(), |node| {
        let cmd = cmd.clone();
        async move {
            match node.query::<i64>(&cmd).await {
                Ok(n) if n > 0 => Reply::Yes(n as u64),
                Ok(_) => Reply::No,
                Err(f) => Reply::Failed(f),
            }
        }
    })
    .await
}

fn released(shared: &Shared, round: Round) -> Released {
    Released {
        held: round.granted >= shared.quorum,
        deleted_on: round.granted,
        report: round.report,
    }
}

pub(crate) async fn release(lock: &Lock) -> Released {
    let inner = &lock.inner;
    let round = release_on(&inner.shared.nodes, &inner.keys, &inner.token, true).await;
    let result = released(&inner.shared, round);
    let mut st = lock.state();
    st.released = true;
    st.report = result.report.clone();
    drop(st);
    inner
        .lost_tx
        .send_replace(inner.lost.load(Ordering::Acquire));
    result
}

pub(crate) async fn extend(lock: &Lock, ttl: Duration) -> Result<()> {
    let inner = &lock.inner;
    let shared = &inner.shared;
    let config = &shared.config;
    config.check_ttl("ttl", ttl)?;
    {
        let st = lock.state();
        if st.released {
            return Err(lock.lost_error("it was released"));
        }
        if let Some(max) = config.max_extensions {
            if st.extensions >= max {
                return Err(Error::invalid(format!(
                    "extend: this lock reached max_extensions ({max})"
                )));
            }
        }
    }
    if lock.is_lost() {
        return Err(lock.lost_error("it was lost earlier"));
    }
    if Instant::now() >= lock.deadline() {
        lock.mark_lost();
        return Err(lock.lost_error("its validity ran out before the extension"));
    }
    let ttl_ms = ttl.as_millis().to_string();
    let cmd = Arc::new(scripts::evalsha(
        &scripts::EXTEND,
        &inner.keys,
        &[&inner.token, &ttl_ms],
    ));
    let t1 = Instant::now();
    let round = quorum::run(&shared.nodes, Tally::Eligible, t1, |node| {
        let cmd = cmd.clone();
        async move {
            match node.query::<i64>(&cmd).await {
                Ok(1) => Reply::Yes(0),
                Ok(_) => Reply::No,
                Err(f) => Reply::Failed(f),
            }
        }
    })
    .await;
    let drift = config.drift(ttl);
    let validity = quorum::validity(ttl, round.decided_at - t1, drift);
    let mut st = lock.state();
    if round.granted >= shared.quorum && validity.is_some() {
        st.report = round.report;
        st.deadline = t1 + ttl - drift;
        st.ttl = ttl;
        st.extensions += 1;
        drop(st);
        inner.lost_tx.send_replace(false);
        return Ok(());
    }
    st.report = round.report.clone();
    drop(st);
    if shared.nodes.len() - round.refused < shared.quorum {
        lock.mark_lost();
        return Err(lock
            .lost_error("a majority of nodes no longer hold its token")
            .with_report(round.report));
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!(
            "could not extend {:?}: {} of {} nodes extended, quorum {}; the lock stays valid until its previous deadline",
            inner.resources,
            round.granted,
            shared.nodes.len(),
            shared.quorum
        ),
    )
    .with_report(round.report))
}

pub(crate) async fn keep_alive(lock: Lock) {
    let config = &lock.inner.shared.config;
    let mut rx = lock.inner.lost_tx.subscribe();
    loop {
        if lock.is_lost() || lock.is_released() {
            return;
        }
        let ttl = lock.ttl();
        let threshold = config.extension_threshold.unwrap_or(ttl / 3).min(ttl / 2);
        let deadline = lock.deadline();
        let at = deadline.checked_sub(threshold).unwrap_or(deadline);
        tokio::select! {
            _ = tokio::time::sleep_until(at.into()) => {}
            changed = rx.changed() => {
                if changed.is_err() { return; }
                continue;
            }
        }
        if lock.is_lost() || lock.is_released() {
            return;
        }
        if Instant::now() >= lock.deadline() {
            lock.mark_lost();
            return;
        }
        match extend(&lock, ttl).await {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Lost => return,
            Err(e) if e.kind() == ErrorKind::InvalidArgument => {
                // max_extensions reached: the lock runs out at its deadline.
                tokio::time::sleep_until(lock.deadline().into()).await;
                if !lock.is_released() {
                    lock.mark_lost();
                }
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "auto-extension failed; retrying");
                let pause =
                    (threshold / 4).clamp(Duration::from_millis(5), Duration::from_millis(500));
                let until = (Instant::now() + pause).min(lock.deadline());
                tokio::time::sleep_until(until.into()).await;
            }
        }
    }
}

/// Fails fast with `Connection` when a TCP host name cannot be resolved at all.
async fn resolve_hosts(config: &Config, nodes: &[Arc<Node>]) -> Result<()> {
    for (i, node) in nodes.iter().enumerate() {
        let addr = node.client().get_connection_info().addr();
        let (host, port) = match addr {
            redis::ConnectionAddr::Tcp(h, p) => (h, *p),
            redis::ConnectionAddr::TcpTls { host, port, .. } => (host, *port),
            _ => continue,
        };
        let lookup = tokio::time::timeout(
            config.connect_timeout,
            tokio::net::lookup_host((host.as_str(), port)),
        )
        .await;
        if let Ok(Err(e)) = lookup {
            return Err(Error::new(
                ErrorKind::Connection,
                format!(
                    "nodes[{i}]: cannot resolve {host:?} in {}: {e}",
                    node.display
                ),
            ));
        }
    }
    Ok(())
}
