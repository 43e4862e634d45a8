//! Acquire: the retry loop with release wake-ups, one round (votes, drift, validity, fencing),
//! and the rollback of a failed or cancelled round.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::config::{Config, cut, quote_resources, validate_resource, validate_resources};
use crate::error::{Error, ErrorKind, Result, Vote, with_summary};
use crate::fair::{Fair, FairRound, LateReplies, QueueOp, Unanswered, dequeue_on};
use crate::lock::{Kind, Lock, LockInner, LockState, loss_margin, release_on, seated_at_acquire};
use crate::node::{Failure, Node};
use crate::quorum::{self, Reply, Round, Tally, full_to_explain, split_vote};
use crate::request::{AcquireRequest, write_fence};
use crate::scripts;
use crate::stats::Event;
use crate::token;
use crate::verdict::{Counts, lock_failure, permit_failure, rw_failure};

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
    match kind {
        Kind::Lock => {}
        Kind::Permit { .. } => {
            return Err(Error::invalid(
                "min_hold: applies to locks, not to semaphore permits",
            ));
        }
        Kind::Read | Kind::Write => {
            return Err(Error::invalid(
                "min_hold: applies to locks, not to read-write locks",
            ));
        }
        Kind::Leader => {
            return Err(Error::invalid(
                "min_hold: applies to locks, not to elections",
            ));
        }
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
    acquire_kind(cluster, resources, Kind::Lock, ttl, options, None).await
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
    acquire_kind(
        cluster,
        &[resource],
        Kind::Permit { limit },
        ttl,
        options,
        None,
    )
    .await
}

/// Waits in line (fair, fenced) for the leadership of election `name`, for at most `wait`
/// (`None`: as long as it takes); the grant writes `value` with its term.
pub(crate) async fn acquire_leadership(
    cluster: &Arc<Cluster>,
    name: &str,
    value: Arc<str>,
    ttl: Duration,
    wait: Option<Duration>,
) -> Result<Lock> {
    crate::config::validate_election_name(name)?;
    let options = AcquireOptions {
        wait: Some(wait.unwrap_or(Duration::MAX)),
        fencing: true,
        fair: Some(true),
        ..AcquireOptions::default()
    };
    acquire_kind(cluster, &[name], Kind::Leader, ttl, options, Some(value)).await
}

pub(crate) async fn acquire_kind<S: AsRef<str>>(
    cluster: &Arc<Cluster>,
    resources: &[S],
    kind: Kind,
    ttl: Duration,
    options: AcquireOptions,
    value: Option<Arc<str>>,
) -> Result<Lock> {
    validate_resources(resources)?;
    cluster.config.check_ttl("ttl", ttl)?;
    let min_hold = checked_min_hold(kind, ttl, options.min_hold)?;
    cluster.check_open()?;
    let resources: Arc<[String]> = resources.iter().map(|r| r.as_ref().to_owned()).collect();
    let keys: Arc<[String]> = resources
        .iter()
        .map(|r| match kind {
            Kind::Lock | Kind::Read | Kind::Write | Kind::Leader => cluster.key(r),
            Kind::Permit { .. } => scripts::semaphore_key(&cluster.key(r)),
        })
        .collect();
    let fair = options
        .fair
        .unwrap_or(cluster.config.fair)
        .then(|| Fair::new(&keys, cluster.config.effective_queue_timeout()));
    let request = Arc::new(AcquireRequest {
        min_hold,
        mark_ttl: cluster.config.effective_queue_timeout(),
        value,
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
        if request.kind == Kind::Write {
            // Each round renews the writer's mark, which lives a queue timeout.
            pause = pause.min(request.mark_ttl / 2);
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
/// that gives up leaves no entry behind), a writer takes its mark away; then the failure is
/// counted and returned.
async fn give_up(
    cluster: &Arc<Cluster>,
    guard: &mut CancelGuard,
    started: Instant,
    err: Error,
) -> Error {
    let req = &guard.request;
    if req.fair.is_some() || req.kind == Kind::Write {
        // A failed round already rolled its keys back; a queue entry or a writer's mark (which
        // holds readers back) is still there.
        req.abandon(&cluster.nodes).await;
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
        Kind::Lock | Kind::Read | Kind::Write | Kind::Leader => Tally::Eligible,
        Kind::Permit { limit } => Tally::Permit {
            explained: full_to_explain(n, q, limit),
        },
    };
    // A semaphore's limit as recorded by each node that refused because its holders use
    // another one (0: none).
    let in_use: Arc<[AtomicU32]> = match req.kind {
        Kind::Lock | Kind::Read | Kind::Write | Kind::Leader => Arc::new([]),
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
                    deadline: t1 + req.ttl - drift - loss_margin(req.kind, req.ttl),
                    extensions: 0,
                    released: false,
                    report: Arc::new(report),
                    seated,
                }),
                hold_until: req.min_hold.map(|h| decided_at + h),
                kept: AtomicU64::new(0),
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
        Kind::Read => format!("a read lock of {}", quote_resources(resources)),
        Kind::Write => format!("the write lock of {}", quote_resources(resources)),
        Kind::Leader => format!("the leadership of election {}", quote_resources(resources)),
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
        Kind::Lock | Kind::Leader => {
            lock_failure(q, &counts, req.fair.as_ref().is_some_and(Fair::was_behind))
        }
        Kind::Read | Kind::Write => rw_failure(
            req.kind,
            q,
            &counts,
            req.fair.as_ref().is_some_and(Fair::was_behind),
        ),
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
        Kind::Lock | Kind::Write | Kind::Leader => "held by another client",
        Kind::Read => "held or awaited by a writer",
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
            req.abandon(&cluster.nodes).await;
        });
    }
}

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

pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}
