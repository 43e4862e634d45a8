//! Acquire: the retry loop with release wake-ups, one round (votes, drift, validity, fencing),
//! and the rollback of a failed or cancelled round.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::config::{Config, quote_resources, validate_resources};
use crate::error::{Error, ErrorKind, Report, Result, Vote, with_summary};
use crate::lock::{Kind, Lock, LockInner, LockState, release_on, seated_at_acquire};
use crate::node::{Failure, Node};
use crate::quorum::{self, Reply, Round, Tally};
use crate::scripts;
use crate::stats::Event;
use crate::token;

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

/// Acquires `resources` (all of them, or none, on each node) for `ttl`, retrying per `options`
/// and the manager's settings.
///
/// Cancel-safe: if the returned future is dropped before it completes, the keys it may have set
/// are released in the background (on the manager's runtime, whichever thread drops it).
pub(crate) async fn acquire<S: AsRef<str>>(
    cluster: &Arc<Cluster>,
    resources: &[S],
    ttl: Duration,
    options: AcquireOptions,
) -> Result<Lock> {
    acquire_kind(cluster, resources, Kind::Lock, ttl, options).await
}

/// The largest semaphore limit (more permits than this is not a mutual exclusion problem).
pub const MAX_SEMAPHORE_LIMIT: u32 = 10_000;

/// Acquires one of `limit` permits of the semaphore `resource` (SPEC §11).
pub(crate) async fn acquire_permit(
    cluster: &Arc<Cluster>,
    resource: &str,
    limit: u32,
    ttl: Duration,
    options: AcquireOptions,
) -> Result<Lock> {
    if limit == 0 || limit > MAX_SEMAPHORE_LIMIT {
        return Err(Error::invalid(format!(
            "limit: must be between 1 and {MAX_SEMAPHORE_LIMIT}, got {limit}"
        )));
    }
    acquire_kind(cluster, &[resource], Kind::Permit { limit }, ttl, options).await
}

async fn acquire_kind<S: AsRef<str>>(
    cluster: &Arc<Cluster>,
    resources: &[S],
    kind: Kind,
    ttl: Duration,
    options: AcquireOptions,
) -> Result<Lock> {
    validate_resources(resources)?;
    cluster.config.check_ttl("ttl", ttl)?;
    cluster.check_open()?;
    let resources: Vec<String> = resources.iter().map(|r| r.as_ref().to_owned()).collect();
    let keys: Vec<String> = resources
        .iter()
        .map(|r| match kind {
            Kind::Lock => cluster.key(r),
            Kind::Permit { .. } => scripts::semaphore_key(&cluster.key(r)),
        })
        .collect();
    let request = Arc::new(AcquireRequest::new(
        &keys,
        kind,
        kind.quorum(cluster.nodes.len()),
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
        (None, None) => cluster.config.retry_count,
    };
    let mut guard = CancelGuard {
        cluster: cluster.clone(),
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
        let err = match acquire_round(cluster, &request, &resources, round_no).await {
            Ok(lock) => {
                guard.armed = false;
                cluster.stats.note(Event::Granted);
                cluster.stats.acquire_took(started.elapsed());
                return Ok(lock);
            }
            Err(e) => e,
        };
        let now = Instant::now();
        let last_round = now - round_started;
        if round_no > retries || deadline.is_some_and(|d| now >= d) {
            guard.armed = false;
            return Err(count_failure(cluster, started, err));
        }
        let mut pause = retry_pause(&cluster.config);
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
            cluster
                .notifier
                .watch(keys.iter().map(|k| scripts::release_channel(k)).collect())
        });
        tokio::select! {
            _ = tokio::time::sleep(pause) => {
                if last_chance {
                    guard.armed = false;
                    return Err(count_failure(cluster, started, err));
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

/// Counts a failed acquire call by its kind and returns its error.
fn count_failure(cluster: &Cluster, started: Instant, err: Error) -> Error {
    cluster.stats.note(if err.kind() == ErrorKind::Contended {
        Event::Contended
    } else {
        Event::Unavailable
    });
    cluster.stats.acquire_took(started.elapsed());
    err
}

async fn acquire_round(
    cluster: &Arc<Cluster>,
    req: &Arc<AcquireRequest>,
    resources: &[String],
    round_no: u32,
) -> Result<Lock> {
    let config = &cluster.config;
    cluster.stats.note(Event::Round);
    if round_no > 1 {
        cluster.stats.note(Event::Retry);
    }
    // Read before the round: a node that reconnects to a restarted process during the round
    // must look restarted to the first extension.
    let seated = seated_at_acquire(cluster);
    let t1 = Instant::now();
    let q = req.quorum;
    let round = quorum::run(&cluster.nodes, Tally::Eligible, q, t1, |node| {
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
    cluster.stats.round_took(round.decided_at - t1);
    let drift = config.drift(req.ttl);
    let mut ok = round.granted >= q;
    let mut decided_at = round.decided_at;
    let mut elapsed_report = round.report.elapsed;
    let mut fence = None;
    // The fence round's report explains a failed write-back; otherwise the acquire's does.
    let mut fence_failure: Option<Report> = None;
    if ok && req.fencing {
        let f = (round.max_payload + 1).max(unix_micros());
        let written = write_fence(cluster, req, f, t1).await;
        decided_at = written.decided_at;
        elapsed_report = written.report.elapsed;
        ok = written.granted >= q;
        if ok {
            fence = Some(f);
        } else {
            fence_failure = Some(written.report);
        }
    }
    let elapsed = decided_at - t1;
    let validity = quorum::validity(req.ttl, elapsed, drift);
    let validity_left = validity.is_some_and(|v| v > config.min_validity);
    if ok && quorum::classify_with(q, round.granted, round.refused, validity_left).is_ok() {
        tracing::debug!(resources = ?resources, ?elapsed, "lock granted");
        let mut report = round.report;
        report.rounds = round_no;
        report.elapsed = elapsed_report;
        let (lost_tx, _) = watch::channel(false);
        return Ok(Lock {
            inner: Arc::new(LockInner {
                cluster: cluster.clone(),
                kind: req.kind,
                quorum: q,
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
                    seated,
                }),
                lost: AtomicBool::new(false),
                lost_tx,
            }),
        });
    }
    // Roll back everywhere a key of ours may exist: every node except those that refused
    // (all-or-nothing per node: a refusing node set nothing).
    let rollback: Vec<Arc<Node>> = cluster
        .nodes
        .iter()
        .zip(&round.report.nodes)
        .filter(|(_, r)| r.vote != Vote::Against)
        .map(|(n, _)| n.clone())
        .collect();
    if !rollback.is_empty() {
        release_on(&rollback, req.kind, q, &req.keys, &req.token, false).await;
    }
    let kind = quorum::classify_with(q, round.granted, round.refused, false)
        .err()
        .unwrap_or(ErrorKind::Unavailable);
    let mut report = fence_failure.unwrap_or(round.report);
    report.rounds = round_no;
    let n = cluster.nodes.len();
    let (what, why, against) = match req.kind {
        Kind::Lock => (
            quote_resources(resources),
            if round.granted >= q {
                "a quorum answered but no validity was left (or the fence write-back failed)"
                    .to_owned()
            } else if kind == ErrorKind::Contended {
                "the lock is held elsewhere".to_owned()
            } else {
                "no quorum of eligible nodes answered".to_owned()
            },
            "held by another client",
        ),
        Kind::Permit { limit } => (
            format!(
                "a permit of semaphore {} (limit {limit})",
                quote_resources(resources)
            ),
            if round.granted >= q {
                "a quorum admitted it but no validity was left (or the fence write-back failed)"
                    .to_owned()
            } else if kind == ErrorKind::Contended {
                format!("all {limit} permits are held elsewhere")
            } else {
                // SPEC §11: the quorum grows with the limit; say how many nodes it takes.
                format!(
                    "not enough eligible nodes answered: a limit of {limit} needs {q} of the {n} nodes to admit it, so at most {} may be down",
                    n - q
                )
            },
            "full",
        ),
    };
    tracing::debug!(resources = ?resources, round = round_no, %kind, "acquire round failed");
    Err(Error::new(
        kind,
        format!(
            "could not acquire {what}: {why} ({} of {n} nodes granted, quorum {q}){}",
            round.granted,
            with_summary(report.summary("grant", against)),
        ),
    )
    .with_report(report))
}

async fn write_fence(cluster: &Cluster, req: &Arc<AcquireRequest>, f: u64, t1: Instant) -> Round {
    let f = f.to_string();
    let script = match req.kind {
        Kind::Lock => &scripts::FENCE,
        Kind::Permit { .. } => &scripts::SEM_FENCE,
    };
    let cmd = Arc::new(scripts::evalsha(
        script,
        &req.script_keys,
        &[req.token.as_str(), f.as_str()],
    ));
    quorum::run_flag(&cluster.nodes, req.quorum, t1, cmd).await
}

/// Everything one acquire call sends, prepared once and cluster by its rounds.
struct AcquireRequest {
    kind: Kind,
    /// [`Kind::quorum`] of the manager's nodes.
    quorum: usize,
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
    fn new(
        keys: &[String],
        kind: Kind,
        quorum: usize,
        token: String,
        ttl: Duration,
        fencing: bool,
    ) -> Self {
        let mut script_keys = keys.to_vec();
        if fencing {
            script_keys.extend(keys.iter().map(|k| scripts::fence_key(k)));
        }
        let ttl_ms = ttl.as_millis().to_string();
        let flag = if fencing { "1" } else { "0" };
        let script = match kind {
            Kind::Lock => {
                scripts::evalsha(&scripts::ACQUIRE, &script_keys, &[&token, &ttl_ms, flag])
            }
            Kind::Permit { limit } => scripts::evalsha(
                &scripts::SEM_ACQUIRE,
                &script_keys,
                &[&token, &ttl_ms, flag, &limit.to_string()],
            ),
        };
        let plain_lock = kind == Kind::Lock && keys.len() == 1 && !fencing;
        let set_nx_get = plain_lock.then(|| {
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
            kind,
            quorum,
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
    cluster: Arc<Cluster>,
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
        let (cluster, req) = (self.cluster.clone(), self.request.clone());
        self.cluster.rt.spawn(async move {
            release_on(
                &cluster.nodes,
                req.kind,
                req.quorum,
                &req.keys,
                &req.token,
                false,
            )
            .await;
        });
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
