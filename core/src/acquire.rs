//! Acquire: the retry loop with release wake-ups, one round (votes, drift, validity, fencing),
//! and the rollback of a failed or cancelled round.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::config::{Config, cut, quote_resources, validate_resource, validate_resources};
use crate::error::{Error, ErrorKind, Report, Result, Vote, with_summary};
use crate::lock::{Kind, Lock, LockInner, LockState, release_on, seated_at_acquire};
use crate::node::{Failure, Node};
use crate::quorum::{self, Reply, Round, Tally, full_to_explain, split_vote};
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
    /// Compute and return a fencing token.
    pub fencing: bool,
    /// Wait in line (FIFO); `None` takes the manager's `fair` setting.
    pub fair: Option<bool>,
    /// Who holds the lock, for operators (e.g. `host:pid`): carried in the token after its
    /// random part (`<40 hex>.<holder>`), so that inspecting the key shows it
    /// ([`holder_of`](crate::holder_of)). 1 to 128 printable ASCII characters, no space.
    pub holder: Option<String>,
    /// Hold the lock at least this long after the grant: a release before then leaves the keys
    /// to expire when it has passed (a job that finished early is not run again meanwhile by a
    /// machine whose schedule is a little behind). At most the ttl; `None` or zero releases at
    /// once. Locks only (not semaphore permits).
    pub min_hold: Option<Duration>,
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

    /// Wait in line (FIFO) or not, whatever the manager's `fair` setting says.
    #[must_use]
    pub fn fair(mut self, on: bool) -> Self {
        self.fair = Some(on);
        self
    }

    /// Name who holds the lock in its token (see [`AcquireOptions::holder`]).
    #[must_use]
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// Hold the lock at least `hold` after the grant (see [`AcquireOptions::min_hold`]).
    #[must_use]
    pub fn min_hold(mut self, hold: Duration) -> Self {
        self.min_hold = Some(hold);
        self
    }
}

/// `min_hold` checked against the ttl and the kind: `None` when there is none (or zero).
fn checked_min_hold(
    kind: Kind,
    ttl: Duration,
    min_hold: Option<Duration>,
) -> Result<Option<Duration>> {
    let Some(hold) = min_hold.filter(|h| !h.is_zero()) else {
        return Ok(None);
    };
    if matches!(kind, Kind::Permit { .. }) {
        return Err(Error::invalid(
            "min_hold: applies to locks, not to semaphore permits",
        ));
    }
    if hold > ttl {
        return Err(Error::invalid(format!(
            "min_hold: must not exceed the ttl ({} ms), got {} ms",
            ttl.as_millis(),
            hold.as_millis()
        )));
    }
    Ok(Some(hold))
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

/// Acquires one of `limit` permits of the semaphore `resource`.
pub(crate) async fn acquire_permit(
    cluster: &Arc<Cluster>,
    resource: &str,
    limit: u32,
    ttl: Duration,
    options: AcquireOptions,
) -> Result<Lock> {
    validate_resource(resource)?;
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
    let min_hold = checked_min_hold(kind, ttl, options.min_hold)?;
    cluster.check_open()?;
    let resources: Arc<[String]> = resources.iter().map(|r| r.as_ref().to_owned()).collect();
    let keys: Arc<[String]> = resources
        .iter()
        .map(|r| match kind {
            Kind::Lock => cluster.key(r),
            Kind::Permit { .. } => scripts::semaphore_key(&cluster.key(r)),
        })
        .collect();
    let fair = options
        .fair
        .unwrap_or(cluster.config.fair)
        .then(|| Fair::new(&keys, cluster.config.effective_queue_timeout()));
    let request = Arc::new(AcquireRequest {
        min_hold,
        ..AcquireRequest::new(
            keys.clone(),
            kind,
            kind.quorum(cluster.nodes.len()),
            match &options.holder {
                Some(h) => token::token_with_holder(h)?,
                None => token::new_token()?,
            }
            .into(),
            ttl,
            options.fencing,
            fair,
        )
    });
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
    // Rounds that re-tried a split vote at once; they do not count against `retries`.
    let mut quick = 0u32;
    loop {
        round_no += 1;
        if let Some(w) = &watch {
            w.waiter.consumed();
        }
        let round_started = Instant::now();
        let (err, split) = match acquire_round(cluster, &request, &resources, round_no).await {
            Ok(lock) => {
                guard.armed = false;
                cluster.stats.note(Event::Granted);
                cluster.stats.acquire_took(started.elapsed());
                return Ok(lock);
            }
            Err(RoundFailed { error, split }) => (error, split),
        };
        let now = Instant::now();
        let last_round = now - round_started;
        if let (Some(w), Some(fair)) = (&watch, &request.fair) {
            w.waiter.rank(fair.rank(), &request.token);
        }
        if err.kind() == ErrorKind::InvalidArgument {
            // A semaphore in use with another limit: no round will change that soon.
            return Err(give_up(cluster, &mut guard, started, err).await);
        }
        if split && quick < SPLIT_RETRIES && deadline.is_none_or(|d| now < d) {
            // A split vote among concurrent requests (a permit may be free): try again after a
            // short random pause, so that the requests reach the nodes one after another,
            // whatever the retry settings — a try-once too, which stays quick.
            quick += 1;
            let spread = (2 * last_round).clamp(SPLIT_SPREAD_MIN, SPLIT_SPREAD_MAX);
            let mut pause = spread.mul_f64(token::random_unit());
            if let Some(d) = deadline {
                pause = pause.min(d - now);
            }
            tokio::time::sleep(pause).await;
            continue;
        }
        if round_no - quick > retries || deadline.is_some_and(|d| now >= d) {
            return Err(give_up(cluster, &mut guard, started, err).await);
        }
        // Subscribe once we know we have to wait; a release then ends the pause early.
        let w = watch.get_or_insert_with(|| {
            let w = cluster
                .notifier
                .watch(keys.iter().map(|k| scripts::release_channel(k)).collect());
            if let Some(fair) = &request.fair {
                w.waiter.rank(fair.rank(), &request.token);
            }
            w
        });
        let mut pause = retry_pause(&cluster.config);
        if let Some(fair) = &request.fair {
            // Each round is also the waiter's heartbeat: at least two per queue timeout. The
            // waiter next in line (the nodes said so, or it leads this process's line) also
            // checks often: a release wakes it, and this bounds what a lost wake-up (or a
            // holder that expired instead of releasing) costs the queue.
            pause = pause.min(fair.timeout / 2);
            let next = fair.is_next(request.quorum);
            if (next || w.leads()) && !fair.stepped_out() {
                pause = pause.min(NEXT_POLL);
            }
        }
        let mut last_chance = false;
        if let Some(d) = deadline {
            let left = d - now;
            if pause >= left {
                pause = left;
                last_chance = true;
            }
        }
        let sleep = tokio::time::sleep(pause);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => {
                    if last_chance {
                        return Err(give_up(cluster, &mut guard, started, err).await);
                    }
                    break;
                }
                _ = w.waiter.notify.notified() => {
                    w.record_wakeup();
                    // Waiters in other processes hear the same release: a short random spread
                    // (up to two of our rounds, at most WAKE_SPREAD) lets one of them win all
                    // nodes instead of all of them splitting the votes. A fair waiter needs
                    // none: the queue says who may try.
                    if request.fair.is_none() {
                        let spread = WAKE_SPREAD.min(2 * last_round);
                        tokio::time::sleep(spread.mul_f64(token::random_unit())).await;
                    }
                    break;
                }
                // The waiter ahead of this one in its process was granted or left: now first
                // in line, it checks as often as the next in line does (a lost wake-up then
                // costs the queue NEXT_POLL, not the rest of a pause chosen while it was
                // behind).
                _ = w.waiter.nudge.notified(), if request.fair.is_some() => {
                    let at = tokio::time::Instant::now() + NEXT_POLL;
                    let in_line = request.fair.as_ref().is_some_and(|f| !f.stepped_out());
                    if at < sleep.deadline() && in_line && w.leads() {
                        sleep.as_mut().reset(at);
                        last_chance = false;
                    }
                }
            }
        }
    }
}

/// Ends a failed acquire: a fair waiter leaves the queue on every node first (a waiter
/// that gives up leaves no entry behind); then the failure is counted and returned.
async fn give_up(
    cluster: &Arc<Cluster>,
    guard: &mut CancelGuard,
    started: Instant,
    err: Error,
) -> Error {
    if guard.request.fair.is_some() {
        guard
            .request
            .leave_queue(&cluster.nodes, QueueOp::Leave)
            .await;
    }
    guard.armed = false;
    count_failure(cluster, started, err)
}

/// Counts a failed acquire call by its kind and returns its error.
fn count_failure(cluster: &Cluster, started: Instant, err: Error) -> Error {
    match err.kind() {
        ErrorKind::Contended => cluster.stats.note(Event::Contended),
        // A semaphore in use with another limit: refused input, not a round lost.
        ErrorKind::InvalidArgument => {}
        _ => cluster.stats.note(Event::Unavailable),
    }
    cluster.stats.acquire_took(started.elapsed());
    err
}

/// A round that granted nothing: its error, and whether it was a split vote that a quick
/// re-try may win ([`quorum::split_vote`]).
struct RoundFailed {
    error: Error,
    split: bool,
}

impl From<Error> for RoundFailed {
    fn from(error: Error) -> Self {
        RoundFailed {
            error,
            split: false,
        }
    }
}

async fn acquire_round(
    cluster: &Arc<Cluster>,
    req: &Arc<AcquireRequest>,
    resources: &Arc<[String]>,
    round_no: u32,
) -> Result<Lock, RoundFailed> {
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
    let fair_round = req.fair.as_ref().map(|f| {
        Arc::new(FairRound {
            cmd: f.acquire_cmd(req),
            late: LateReplies::new(cluster.nodes.len()),
        })
    });
    let n = cluster.nodes.len();
    let tally = match req.kind {
        _ if fair_round.is_some() => Tally::Fair,
        Kind::Lock => Tally::Eligible,
        Kind::Permit { limit } => Tally::Permit {
            explained: full_to_explain(n, q, limit),
        },
    };
    // A semaphore's limit as recorded by each node that refused because its holders use
    // another one (0: none).
    let in_use: Arc<[AtomicU32]> = match req.kind {
        Kind::Lock => Arc::new([]),
        Kind::Permit { .. } => (0..n).map(|_| AtomicU32::new(0)).collect(),
    };
    let mut round = quorum::run(&cluster.nodes, tally, q, t1, |node| {
        let req = req.clone();
        let fair_round = fair_round.clone();
        let i = cluster.nodes.iter().position(|n| Arc::ptr_eq(n, &node));
        let in_use = in_use.clone();
        let limit_in_use = move |recorded: i64| {
            if let Some(slot) = i.and_then(|i| in_use.get(i)) {
                slot.store(
                    recorded.clamp(1, i64::from(u32::MAX)) as u32,
                    Ordering::Relaxed,
                );
            }
            Reply::No
        };
        async move {
            if let (Some(fr), Some(fair)) = (fair_round.clone(), req.fair.as_ref()) {
                // A reply that never comes (the background drain gave up on it) after the
                // round was granted without it: dequeue there all the same.
                let mut unanswered = i.map(|i| Unanswered {
                    round: fr.clone(),
                    i,
                    node: node.clone(),
                    req: req.clone(),
                    answered: false,
                });
                let reply = match node.query::<(i64, i64, i64)>(&fr.cmd).await {
                    Ok((-1, recorded, _)) => limit_in_use(recorded),
                    Ok((granted, why, ticket)) => {
                        fair.saw_ticket(ticket);
                        if granted == 1 {
                            Reply::Yes(why.max(0) as u64)
                        } else {
                            fair.refused(why);
                            Reply::No
                        }
                    }
                    Err(f) => Reply::Failed(f),
                };
                if let Some(u) = unanswered.as_mut() {
                    u.answered = true;
                }
                let granted = matches!(reply, Reply::Yes(_));
                if i.is_some_and(|i| fr.late.left_behind(i, granted)) {
                    // The lock was granted without this node, which kept our queue entry.
                    dequeue_on(&req, vec![node]);
                }
                drop(unanswered);
                return reply;
            }
            if let Some(set) = req.set_nx_get.as_ref().filter(|_| node.has_set_nx_get()) {
                // One key, no fencing: a plain SET NX costs the server a fraction of a script.
                return match node.query::<Option<String>>(set).await {
                    Ok(None) => Reply::Yes(0),
                    // Our own key from an earlier round: its expiry is older than this
                    // round's, so it cannot count; the rollback deletes it.
                    Ok(Some(v)) if *v == *req.token => Reply::Failed(Failure::Error(
                        "holds this lock's key from an earlier round".to_owned(),
                    )),
                    Ok(Some(_)) => Reply::No,
                    Err(f) => Reply::Failed(f),
                };
            }
            match node.query::<(i64, i64)>(req.script()).await {
                Ok((1, fence)) => Reply::Yes(fence.max(0) as u64),
                Ok((-1, recorded)) => limit_in_use(recorded),
                Ok(_) => Reply::No,
                Err(f) => Reply::Failed(f),
            }
        }
    })
    .await;
    cluster.stats.round_took(round.decided_at - t1);
    // (recorded limit, nodes) of the refusals because the holders use another limit.
    let mut other_limit: Option<(u32, usize)> = None;
    for (r, slot) in round.report.nodes.iter_mut().zip(in_use.iter()) {
        let recorded = slot.load(Ordering::Relaxed);
        if recorded > 0 && r.vote == Vote::Against {
            r.error = Some(format!("in use with limit {recorded}"));
            let (_, on) = other_limit.get_or_insert((recorded, 0));
            *on += 1;
        }
    }
    let drift = config.drift(req.ttl);
    let mut ok = round.granted >= q;
    let mut decided_at = round.decided_at;
    let mut elapsed_report = round.report.elapsed;
    let mut fence = None;
    // The fence round's report explains a failed write-back; otherwise the acquire's does.
    let mut fence_failure: Option<Round> = None;
    if ok && req.fencing {
        let f = quorum::fence(round.max_payload, unix_micros());
        let written = write_fence(cluster, req, f, t1).await;
        decided_at = written.decided_at;
        elapsed_report = written.report.elapsed;
        ok = written.granted >= q;
        if ok {
            fence = Some(f);
        } else {
            fence_failure = Some(written);
        }
    }
    let elapsed = decided_at - t1;
    let validity = quorum::validity(req.ttl, elapsed, drift);
    let validity_left = validity.is_some_and(|v| v > config.min_validity);
    if ok && quorum::classify_with(q, round.granted, round.refused, validity_left).is_ok() {
        tracing::debug!(resources = ?resources, ?elapsed, "lock granted");
        if let Some(fr) = &fair_round {
            // The nodes that granted dropped our queue entries; the others still hold them, and
            // an entry ahead of the next waiter would stall the queue.
            let votes: Vec<Vote> = round.report.nodes.iter().map(|r| r.vote).collect();
            let rest: Vec<Arc<Node>> = (fr.late.settle(&votes).into_iter())
                .map(|i| cluster.nodes[i].clone())
                .collect();
            dequeue_on(req, rest);
        }
        let mut report = round.report;
        report.rounds = round_no;
        report.elapsed = elapsed_report;
        let (lost_tx, _) = watch::channel(false);
        return Ok(Lock {
            inner: Arc::new(LockInner {
                cluster: cluster.clone(),
                kind: req.kind,
                quorum: q,
                resources: resources.clone(),
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
                hold_until: req.min_hold.map(|h| decided_at + h),
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
    // Fewer nodes answered than a quorum: this request could not have been granted whatever
    // they said (a client cut off from some nodes, or nodes down).
    let out_of_reach = round.granted + round.refused < q;
    if req
        .fair
        .as_ref()
        .is_some_and(|f| f.out_of_reach(out_of_reach, t1))
    {
        // Out of reach of a quorum round after round for a whole queue timeout: to the waiters
        // behind it on the nodes it still reaches, this waiter is no different from a dead
        // one, and its place would stall them (a semaphore's larger quorum makes this the
        // likely case). It leaves every queue until a round reaches a quorum again, joining
        // with its ticket only for the length of each round. One slow round does not count:
        // under load a node's reply may miss a round, and leaving then would let later
        // tickets pass.
        req.leave_queue(&cluster.nodes, QueueOp::Leave).await;
    } else if !rollback.is_empty() {
        if req.fair.is_some() {
            // Undo the keys but keep our place in line.
            req.leave_queue(&rollback, QueueOp::Requeue).await;
        } else {
            release_on(&rollback, req.kind, q, &req.keys, &req.token, false).await;
        }
    }
    let mut report = round.report;
    report.rounds = round_no;
    let what = match req.kind {
        Kind::Lock => quote_resources(resources),
        Kind::Permit { limit } => format!(
            "a permit of semaphore {} (limit {limit})",
            quote_resources(resources)
        ),
    };
    if let (Kind::Permit { limit }, Some((recorded, on)), true) =
        (req.kind, other_limit, round.granted < q)
    {
        // SPEC §11: every holder of a semaphore uses one limit; it may change once none holds.
        let e = Error::invalid(format!(
            "limit: the semaphore {} is in use with limit {recorded} on {on} of {n} nodes; got {limit} (every holder must use the same limit; it may change once no permit is held)",
            cut(&format!("{:?}", resources[0]))
        ));
        return Err(e.with_report(report).into());
    }
    let counts = Counts::of(&report, round.granted);
    let failure = match req.kind {
        Kind::Lock => lock_failure(q, &counts, req.fair.as_ref().is_some_and(Fair::was_behind)),
        Kind::Permit { limit } => permit_failure(
            q,
            limit,
            &counts,
            req.fair.as_ref().is_some_and(Fair::was_behind),
        ),
    };
    let (kind, why) = failure.unwrap_or_else(|| {
        let why = if fence_failure.is_some() {
            "the fence write-back did not reach a quorum"
        } else {
            "a quorum granted it but no validity was left"
        };
        (ErrorKind::Unavailable, why.to_owned())
    });
    // A fair waiter's refusals may be its place in line, not seats: the queue orders it.
    let split = match req.kind {
        Kind::Permit { limit } if req.fair.is_none() => {
            let explained = full_to_explain(n, q, limit);
            split_vote(q, explained, counts.granted, counts.full, counts.unknown)
        }
        _ => false,
    };
    let against = match req.kind {
        Kind::Lock => "held by another client",
        Kind::Permit { .. } => "full",
    };
    let mut message = format!(
        "could not acquire {what}: {why} ({} of {n} nodes granted, quorum {q}){}",
        round.granted,
        with_summary(report.summary("grant", against)),
    );
    if let Some(written) = fence_failure {
        // Its own counts: the write-back's nodes, not the acquire's.
        use std::fmt::Write as _;
        let _ = write!(
            message,
            "; the fence write-back: {} of {n} nodes wrote it{}",
            written.granted,
            with_summary(
                written
                    .report
                    .summary("write the fence", "no longer holds its token")
            ),
        );
        report = written.report;
        report.rounds = round_no;
    }
    tracing::debug!(resources = ?resources, round = round_no, %kind, split, "acquire round failed");
    Err(RoundFailed {
        error: Error::new(kind, message).with_report(report),
        split,
    })
}

/// How the nodes of a failed round answered, for its error.
struct Counts {
    n: usize,
    /// Eligible "yes" votes.
    granted: usize,
    /// "No": held by another client, or full.
    full: usize,
    /// Error, timeout, or no answer before the round was decided.
    unknown: usize,
}

impl Counts {
    fn of(report: &Report, granted: usize) -> Counts {
        Counts {
            n: report.nodes.len(),
            granted,
            full: report.count(Vote::Against),
            unknown: report.count(Vote::Error)
                + report.count(Vote::Timeout)
                + report.count(Vote::Pending),
        }
    }
}

/// Why a lock round that did not reach a quorum failed: its kind and words; `None`
/// when a quorum granted (no validity left, then).
fn lock_failure(q: usize, c: &Counts, behind: bool) -> Option<(ErrorKind, String)> {
    if c.granted >= q {
        return None;
    }
    Some(if c.full == 0 {
        (
            ErrorKind::Unavailable,
            "no quorum of eligible nodes answered".to_owned(),
        )
    } else if behind {
        (
            ErrorKind::Contended,
            "the lock is held elsewhere or earlier fair waiters are in line".to_owned(),
        )
    } else {
        (
            ErrorKind::Contended,
            "the lock is held elsewhere".to_owned(),
        )
    })
}

/// Why a permit round that did not reach Q(limit) failed. Full nodes make it
/// Contended, as a lock held elsewhere does; but only as many full nodes as `limit` permits
/// held elsewhere would fill ([`full_to_explain`]) show that every permit is held. Fewer, when
/// enough nodes answered to grant it had they agreed, is a split vote among concurrent
/// requests: a permit may be free, and a retry may get it.
fn permit_failure(q: usize, limit: u32, c: &Counts, behind: bool) -> Option<(ErrorKind, String)> {
    let n = c.n;
    if c.granted >= q {
        return None;
    }
    if c.full == 0 {
        // SPEC §11: the quorum grows with the limit; say how many nodes it takes.
        return Some((
            ErrorKind::Unavailable,
            format!(
                "not enough eligible nodes answered: a limit of {limit} needs {q} of the {n} nodes to admit it, so at most {} may be down",
                n - q
            ),
        ));
    }
    let explained = full_to_explain(n, q, limit);
    let (g, f, u) = (c.granted, c.full, c.unknown);
    let why = if behind {
        format!("all {limit} permits are held or promised to earlier fair waiters")
    } else if f >= explained {
        format!("all {limit} permits are held elsewhere")
    } else if split_vote(q, explained, g, f, u) {
        format!(
            "the nodes disagreed: {g} of {n} admitted it and {f} of {n} {} full, fewer than the {explained} that {limit} permits held elsewhere would fill: concurrent requests took the seats, so a permit may be free; retry",
            if f == 1 { "was" } else { "were" }
        )
    } else if g + f < q {
        format!(
            "{f} of {n} nodes {} full and too few others could admit it: a limit of {limit} needs {q} of the {n} nodes to admit it, so at most {} may be down",
            if f == 1 { "was" } else { "were" },
            n - q
        )
    } else {
        format!(
            "all {limit} permits may be held elsewhere: {f} of {n} nodes {} full and {u} did not answer",
            if f == 1 { "was" } else { "were" }
        )
    };
    Some((ErrorKind::Contended, why))
}

async fn write_fence(cluster: &Cluster, req: &Arc<AcquireRequest>, f: u64, t1: Instant) -> Round {
    let f = f.to_string();
    let script = match req.kind {
        Kind::Lock => &scripts::FENCE,
        Kind::Permit { .. } => &scripts::SEM_FENCE,
    };
    let cmd = Arc::new(scripts::evalsha(
        script,
        &req.script_keys(),
        &[&req.token, f.as_str()],
    ));
    quorum::run_flag(&cluster.nodes, req.quorum, t1, cmd).await
}

/// Everything one acquire call sends, prepared once and cluster by its rounds.
struct AcquireRequest {
    kind: Kind,
    /// [`Kind::quorum`] of the manager's nodes.
    quorum: usize,
    /// Shared with the lock it grants (no copy per call).
    keys: Arc<[String]>,
    token: Arc<str>,
    ttl: Duration,
    fencing: bool,
    /// The acquire script (all-or-nothing per node, fence counters), built when a node first
    /// needs it: a single-key lock on Redis 7+ never does.
    script: OnceLock<redis::Cmd>,
    /// One key and no fencing: `SET key token NX PX ttl GET`, sent instead of the script to
    /// nodes that take it (Redis 7+).
    set_nx_get: Option<redis::Cmd>,
    /// A fair acquire's place in line.
    fair: Option<Fair>,
    /// The lock's minimum hold (checked: at most the ttl, a lock).
    min_hold: Option<Duration>,
}

impl AcquireRequest {
    fn new(
        keys: Arc<[String]>,
        kind: Kind,
        quorum: usize,
        token: Arc<str>,
        ttl: Duration,
        fencing: bool,
        fair: Option<Fair>,
    ) -> Self {
        let plain_lock = kind == Kind::Lock && keys.len() == 1 && !fencing && fair.is_none();
        let set_nx_get = plain_lock.then(|| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&keys[0])
                .arg(&*token)
                .arg("NX")
                .arg("PX")
                .arg(ttl.as_millis() as u64)
                .arg("GET");
            cmd
        });
        AcquireRequest {
            kind,
            quorum,
            keys,
            token,
            ttl,
            fencing,
            script: OnceLock::new(),
            set_nx_get,
            fair,
            min_hold: None,
        }
    }

    /// The lock keys, then (with fencing) their fence counter keys.
    fn script_keys(&self) -> Vec<String> {
        let mut keys = self.keys.to_vec();
        if self.fencing {
            keys.extend(self.keys.iter().map(|k| scripts::fence_key(k)));
        }
        keys
    }

    /// The acquire script for this request (see `script`).
    fn script(&self) -> &redis::Cmd {
        self.script.get_or_init(|| {
            let mut keys = self.script_keys();
            if let Kind::Permit { .. } = self.kind {
                // The semaphore key, its limit key, then (with fencing) its fence counter key.
                keys.insert(1, scripts::limit_key(&self.keys[0]));
            }
            let ttl_ms = self.ttl.as_millis().to_string();
            let flag = if self.fencing { "1" } else { "0" };
            match self.kind {
                Kind::Lock => {
                    scripts::evalsha(&scripts::ACQUIRE, &keys, &[&self.token, &ttl_ms, flag])
                }
                Kind::Permit { limit } => scripts::evalsha(
                    &scripts::SEM_ACQUIRE,
                    &keys,
                    &[&self.token, &ttl_ms, flag, &limit.to_string()],
                ),
            }
        })
    }

    /// Sends a [`QueueOp`] of this request's queue entries to `nodes` and waits for the round.
    async fn leave_queue(&self, nodes: &[Arc<Node>], mode: QueueOp) {
        let Some(fair) = &self.fair else { return };
        let cmd = Arc::new(fair.leave_cmd(self, mode));
        quorum::run(
            nodes,
            Tally::ReleaseAll,
            self.quorum,
            Instant::now(),
            |node| {
                let cmd = cmd.clone();
                async move {
                    match node.query::<i64>(&cmd).await {
                        Ok(_) => Reply::Yes(0),
                        Err(f) => Reply::Failed(f),
                    }
                }
            },
        )
        .await;
    }
}

/// What [`scripts::FAIR_LEAVE_SOURCE`] does with a waiter's queue entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueueOp {
    /// The rollback of a failed round: the keys go, the place in line stays.
    Requeue,
    /// A waiter that gives up or is cancelled: the keys and the queue entries go.
    Leave,
    /// After a grant, where the grant left entries behind.
    Dequeue,
}

/// One fair round: its command, and who deals with the replies that come after the grant.
struct FairRound {
    cmd: redis::Cmd,
    late: LateReplies,
}

/// A fair round's replies, per node, between the round and its late replies: after a grant,
/// whichever sees a node's refusal last (the granted round, or the reply that came after it)
/// takes the waiter's entries out of that node's queue, once. A reply still out at the grant
/// is usually a grant too, which needs nothing: no dequeue is sent on speculation.
struct LateReplies(Vec<AtomicU8>);

impl LateReplies {
    const OPEN: u8 = 0;
    const FOR: u8 = 1;
    const NOT: u8 = 2;
    /// The round was granted before this node answered.
    const GRANTED: u8 = 3;

    fn new(n: usize) -> Self {
        LateReplies((0..n).map(|_| AtomicU8::new(Self::OPEN)).collect())
    }

    /// Records node `i`'s reply; true when the round was granted without it and the node did
    /// not grant (the caller dequeues there).
    fn left_behind(&self, i: usize, granted: bool) -> bool {
        let mine = if granted { Self::FOR } else { Self::NOT };
        self.0.get(i).is_some_and(|slot| {
            slot.compare_exchange(Self::OPEN, mine, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
                && !granted
        })
    }

    /// At a grant: the nodes that answered without granting (or failed), and those whose reply
    /// arrived unseen with a refusal; replies still out are left to [`Self::left_behind`].
    fn settle(&self, votes: &[Vote]) -> Vec<usize> {
        votes
            .iter()
            .zip(&self.0)
            .enumerate()
            .filter(|(_, (vote, slot))| match vote {
                Vote::For => false,
                Vote::Pending => slot
                    .compare_exchange(
                        Self::OPEN,
                        Self::GRANTED,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_err_and(|seen| seen != Self::FOR),
                _ => true,
            })
            .map(|(i, _)| i)
            .collect()
    }
}

/// Takes a granted fair request's entries out of the queues of `nodes`, in the background.
fn dequeue_on(req: &Arc<AcquireRequest>, nodes: Vec<Arc<Node>>) {
    let Some(rt) = nodes.first().map(|n| n.runtime().clone()) else {
        return;
    };
    let req = req.clone();
    rt.spawn(async move { req.leave_queue(&nodes, QueueOp::Dequeue).await });
}

/// A fair round's request to one node, while its reply is out.
struct Unanswered {
    round: Arc<FairRound>,
    i: usize,
    node: Arc<Node>,
    req: Arc<AcquireRequest>,
    answered: bool,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let granted_without = !self.answered
            && self.round.late.0.get(self.i).is_some_and(|slot| {
                slot.compare_exchange(
                    LateReplies::GRANTED,
                    LateReplies::NOT,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            });
        if granted_without {
            dequeue_on(&self.req, vec![self.node.clone()]);
        }
    }
}

/// A fair acquire's place in line: the queue, heartbeat and ticket keys of each lock key, and
/// the ticket (0 until a node has handed one out; then the largest seen, so that every node
/// ranks the waiter alike from its second round on).
struct Fair {
    /// The lock keys, their queue keys, heartbeat keys and ticket counter keys.
    keys: Vec<String>,
    timeout: Duration,
    ticket: AtomicU64,
    /// A node refused because an earlier ticket was in line (not only because of a holder).
    behind: AtomicBool,
    /// Nodes of the last round on which the waiter headed the queue behind the holder.
    next_on: AtomicUsize,
    /// Since when (the start of the first of them) and for how many rounds in a row the
    /// waiter's rounds reached fewer nodes than the quorum.
    unreachable: Mutex<Option<(Instant, u32)>>,
    /// The last round stepped the waiter out of line (see [`Fair::out_of_reach`]).
    out: AtomicBool,
}

impl Fair {
    fn new(keys: &[String], timeout: Duration) -> Fair {
        let mut all = keys.to_vec();
        all.extend(keys.iter().map(|k| scripts::queue_key(k)));
        all.extend(keys.iter().map(|k| scripts::beats_key(k)));
        all.extend(keys.iter().map(|k| scripts::ticket_key(k)));
        Fair {
            keys: all,
            timeout,
            ticket: AtomicU64::new(0),
            behind: AtomicBool::new(false),
            next_on: AtomicUsize::new(0),
            unreachable: Mutex::new(None),
            out: AtomicBool::new(false),
        }
    }

    /// Notes whether the round that started at `started` reached fewer nodes than the quorum,
    /// and says whether the waiter steps out of line: at least [`STEP_OUT_ROUNDS`] such rounds
    /// in a row, the first of them a whole queue timeout ago.
    fn out_of_reach(&self, out_of_reach: bool, started: Instant) -> bool {
        let mut u = self.unreachable.lock().unwrap_or_else(|p| p.into_inner());
        let out = if out_of_reach {
            let (since, rounds) = u.get_or_insert((started, 0));
            *rounds += 1;
            *rounds >= STEP_OUT_ROUNDS && Instant::now().duration_since(*since) >= self.timeout
        } else {
            *u = None;
            false
        };
        self.out.store(out, Ordering::Release);
        out
    }

    /// Whether the last round stepped the waiter out of line (see [`Fair::out_of_reach`]).
    fn stepped_out(&self) -> bool {
        self.out.load(Ordering::Acquire)
    }

    /// The ticket by which this process ranks the waiter among its own fair waiters: a waiter
    /// out of line comes after every other (the wake-up of a release goes to one that can use
    /// it).
    fn rank(&self) -> u64 {
        if self.stepped_out() {
            u64::MAX
        } else {
            self.ticket()
        }
    }

    /// Notes a node's refusal: 0 = held, and this waiter is next; 1 = free, but earlier tickets
    /// wait; 2 = held, and earlier tickets wait.
    fn refused(&self, why: i64) {
        if why == 0 {
            self.next_on.fetch_add(1, Ordering::AcqRel);
        } else {
            self.behind.store(true, Ordering::Release);
        }
    }

    /// Whether a quorum of the last round's nodes had this waiter next in line (resets).
    fn is_next(&self, quorum: usize) -> bool {
        self.next_on.swap(0, Ordering::AcqRel) >= quorum
    }

    fn was_behind(&self) -> bool {
        self.behind.swap(false, Ordering::AcqRel)
    }

    fn ticket(&self) -> u64 {
        self.ticket.load(Ordering::Acquire)
    }

    fn saw_ticket(&self, ticket: i64) {
        if ticket > 0 {
            self.ticket.fetch_max(ticket as u64, Ordering::AcqRel);
        }
    }

    fn timeout_ms(&self) -> String {
        self.timeout.as_millis().max(1).to_string()
    }

    /// This round's fair acquire: the ticket known so far (0 in the first round).
    fn acquire_cmd(&self, req: &AcquireRequest) -> redis::Cmd {
        let n = req.keys.len().to_string();
        let mut keys = self.keys.clone();
        if req.fencing {
            keys.extend(req.keys.iter().map(|k| scripts::fence_key(k)));
        }
        let ttl_ms = req.ttl.as_millis().to_string();
        let flag = if req.fencing { "1" } else { "0" };
        let ticket = self.ticket().to_string();
        let clock = unix_micros().to_string();
        let timeout = self.timeout_ms();
        let mut args = vec![
            &req.token,
            ttl_ms.as_str(),
            timeout.as_str(),
            n.as_str(),
            flag,
            ticket.as_str(),
            clock.as_str(),
        ];
        let limit;
        let script = match req.kind {
            Kind::Lock => &scripts::FAIR_ACQUIRE,
            Kind::Permit { limit: l } => {
                limit = l.to_string();
                args.push(limit.as_str());
                keys.push(scripts::limit_key(&req.keys[0]));
                &scripts::SEM_FAIR_ACQUIRE
            }
        };
        scripts::evalsha(script, &keys, &args)
    }

    fn leave_cmd(&self, req: &AcquireRequest, mode: QueueOp) -> redis::Cmd {
        let n = req.keys.len().to_string();
        let ticket = self.ticket().to_string();
        let mode = match mode {
            QueueOp::Requeue => "requeue",
            QueueOp::Leave => "leave",
            QueueOp::Dequeue => "dequeue",
        };
        let kind = match req.kind {
            Kind::Lock => "lock",
            Kind::Permit { .. } => "permit",
        };
        let timeout = self.timeout_ms();
        scripts::evalsha(
            &scripts::FAIR_LEAVE,
            &self.keys,
            &[&req.token, mode, &timeout, &n, &ticket, kind],
        )
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
            if req.fair.is_some() {
                req.leave_queue(&cluster.nodes, QueueOp::Leave).await;
                return;
            }
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

/// How many rounds in a row (spanning a queue timeout) a fair waiter must fail to reach a quorum
/// before it steps out of line.
const STEP_OUT_ROUNDS: u32 = 3;

/// The longest pause of the fair waiter next in line between two rounds.
const NEXT_POLL: Duration = Duration::from_millis(20);

/// How many times one acquire call re-tries a split vote at once ([`quorum::split_vote`]),
/// beyond its `retry_count` (a try-once included).
const SPLIT_RETRIES: u32 = 3;

/// The random pause before re-trying a split vote is drawn from zero to twice the round that
/// split, that bound kept between these two: long enough for the rounds of requests that split
/// to reach the nodes one after another, short enough that a try-once stays quick (at most
/// [`SPLIT_RETRIES`] × 5 ms besides its rounds).
const SPLIT_SPREAD_MIN: Duration = Duration::from_millis(1);
const SPLIT_SPREAD_MAX: Duration = Duration::from_millis(5);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_dequeues_each_node_that_did_not_grant_exactly_once() {
        let late = LateReplies::new(5);
        // Node 2 answered "no" before the grant but unseen by the round; 3 and 4 are still out.
        assert!(!late.left_behind(2, false));
        let votes = [
            Vote::For,
            Vote::Against,
            Vote::Pending,
            Vote::Pending,
            Vote::Pending,
        ];
        assert_eq!(late.settle(&votes), vec![1, 2]);
        // The late replies: a grant needs nothing, a refusal is dequeued by its reply.
        assert!(!late.left_behind(3, true));
        assert!(late.left_behind(4, false));
        // A failed round's late replies dequeue nothing (its rollback covered them).
        let failed = LateReplies::new(2);
        assert!(!failed.left_behind(0, false) && !failed.left_behind(1, true));
    }

    #[test]
    fn a_fair_waiter_steps_out_only_after_rounds_out_of_reach_for_a_queue_timeout() {
        let timeout = Duration::from_millis(40);
        let fair = Fair::new(&["k".to_owned()], timeout);
        fair.saw_ticket(7);
        let t0 = Instant::now();
        // Rounds out of reach, but fewer than a queue timeout ago: the waiter keeps its place.
        assert!(!fair.out_of_reach(true, t0));
        assert!(!fair.out_of_reach(true, t0));
        assert!(!fair.out_of_reach(true, t0));
        assert!(!fair.stepped_out());
        assert_eq!(fair.rank(), 7);
        // A round that reaches a quorum starts the count again.
        assert!(!fair.out_of_reach(false, t0));
        std::thread::sleep(timeout);
        let t1 = Instant::now();
        assert!(!fair.out_of_reach(true, t1));
        std::thread::sleep(timeout);
        // Two rounds spanning the timeout are not enough: one slow round must not count.
        assert!(!fair.out_of_reach(true, Instant::now()));
        assert!(fair.out_of_reach(true, Instant::now()));
        assert!(fair.stepped_out());
        assert_eq!(fair.rank(), u64::MAX, "last of its process's line");
        // Back in reach: back in line with its ticket.
        assert!(!fair.out_of_reach(false, Instant::now()));
        assert!(!fair.stepped_out());
        assert_eq!(fair.rank(), 7);
    }
}
