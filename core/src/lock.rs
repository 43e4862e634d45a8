//! A held lock: its resources, token, validity deadline and fence; release and the loss rule
//! (extension and auto-extension are in `extend`). No I/O happens when it is dropped: release
//! is explicit (bindings' context managers are sugar over it).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::config::quote_resources;
use crate::error::{Error, ErrorKind, Report, Result};
use crate::keeper::{self, Keeper, Kept};
use crate::node::Node;
use crate::quorum::{self, Reply, Round, Tally};
use crate::scripts;
use crate::stats::Event;

mod extend;

use self::extend::{extend, keep_alive};
pub(crate) use self::extend::{keep_alive_own, release_lost};

pub(crate) struct LockState {
    pub(crate) ttl: Duration,
    pub(crate) deadline: Instant,
    pub(crate) extensions: u32,
    pub(crate) released: bool,
    pub(crate) report: Arc<Report>,
    /// Per node, the lifetime of its data ([`Node::data_epoch`]) that the lock last knew: the one
    /// at acquire, then the one of its last "yes" (0: the node was never reached). A node whose
    /// data epoch moved on since then restarted after the lock was acquired, and an extension
    /// that finds the keys absent there may write them back. Empty when re-seating is
    /// off.
    pub(crate) seated: Vec<u64>,
}

/// [`LockState::seated`] at acquire: every node's data epoch then, whatever it answered. A node
/// that was down or held another client's key when the lock was granted and restarts later is
/// re-seated like the others: it restarted after the acquire, and the key is written only where
/// it is absent.
pub(crate) fn seated_at_acquire(cluster: &Cluster) -> Vec<u64> {
    if !cluster.config.reseat {
        return Vec::new();
    }
    cluster.nodes.iter().map(|node| node.data_epoch()).collect()
}

/// What a [`Lock`] holds: the lock of its resources, one permit of a semaphore, the shared
/// (read) or exclusive (write) side of a read-write lock, or the leadership of an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    Permit { limit: u32 },
    Read,
    Write,
    Leader,
}

impl Kind {
    /// The nodes that must agree: the majority for a lock, Q(limit) for a permit.
    pub(crate) fn quorum(self, nodes: usize) -> usize {
        match self {
            Kind::Lock | Kind::Read | Kind::Write | Kind::Leader => quorum::quorum(nodes),
            Kind::Permit { limit } => quorum::semaphore_quorum(nodes, limit),
        }
    }

    /// The release (or rollback, `announce` false) of `token` from `keys`.
    pub(crate) fn release_cmd(self, keys: &[String], token: &str, announce: bool) -> redis::Cmd {
        let flag = if announce { "1" } else { "0" };
        match self {
            Kind::Lock => scripts::evalsha(&scripts::RELEASE, keys, &[token, flag]),
            Kind::Permit { .. } => {
                scripts::evalsha(&scripts::SEM_RELEASE, &permit_keys(keys), &[token, flag])
            }
            Kind::Read => {
                scripts::evalsha(&scripts::READ_RELEASE, &read_keys(keys), &[token, flag])
            }
            Kind::Write => {
                scripts::evalsha(&scripts::WRITE_RELEASE, &write_keys(keys), &[token, flag])
            }
            Kind::Leader => {
                scripts::evalsha(&scripts::LEADER_RELEASE, &leader_keys(keys), &[token, flag])
            }
        }
    }

    /// The extension of `token` on `keys` to `ttl_ms`, re-seating where it is absent (`reseat`).
    /// Plain locks and writers are extended in batches instead (`Node::extend`).
    fn extend_cmd(self, keys: &[String], token: &str, ttl_ms: &str, reseat: bool) -> redis::Cmd {
        let flag = if reseat { "1" } else { "0" };
        match self {
            Kind::Lock | Kind::Write => {
                scripts::evalsha(&scripts::EXTEND, keys, &[token, ttl_ms, flag])
            }
            Kind::Permit { limit } => scripts::evalsha(
                &scripts::SEM_EXTEND,
                &permit_keys(keys),
                &[token, ttl_ms, flag, &limit.to_string()],
            ),
            Kind::Read => scripts::evalsha(
                &scripts::READ_EXTEND,
                &read_keys(keys),
                &[token, ttl_ms, flag],
            ),
            Kind::Leader => scripts::evalsha(
                &scripts::LEADER_EXTEND,
                &leader_keys(keys),
                &[token, ttl_ms, flag],
            ),
        }
    }

    /// The read or write side of a read-write lock.
    pub(crate) fn access(self) -> Option<Access> {
        match self {
            Kind::Read => Some(Access::Read),
            Kind::Write => Some(Access::Write),
            Kind::Lock | Kind::Permit { .. } | Kind::Leader => None,
        }
    }
}

/// Which side of a read-write lock ([`LockManager::rw_lock`](crate::LockManager::rw_lock)) a
/// [`Lock`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Shared with other readers; excludes writers and plain locks of the same name.
    Read,
    /// Exclusive: excludes readers, other writers and plain locks of the same name.
    Write,
}

impl Access {
    /// `"read"` or `"write"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// A read's script keys: the lock key and its readers key ([`scripts::readers_key`]).
pub(crate) fn read_keys(keys: &[String]) -> [String; 2] {
    let key = keys.first().cloned().unwrap_or_default();
    let readers = scripts::readers_key(&key);
    [key, readers]
}

/// A leader's script keys: the election's key and its leader record ([`scripts::leader_key`]).
pub(crate) fn leader_keys(keys: &[String]) -> [String; 2] {
    let key = keys.first().cloned().unwrap_or_default();
    let record = scripts::leader_key(&key);
    [key, record]
}

/// A write's release keys: the lock key and its writer mark key ([`scripts::writer_mark_key`]).
pub(crate) fn write_keys(keys: &[String]) -> [String; 2] {
    let key = keys.first().cloned().unwrap_or_default();
    let mark = scripts::writer_mark_key(&key);
    [key, mark]
}

/// A permit's script keys: the semaphore key and its limit key ([`scripts::limit_key`]).
fn permit_keys(keys: &[String]) -> [String; 2] {
    let key = keys.first().cloned().unwrap_or_default();
    let limit = scripts::limit_key(&key);
    [key, limit]
}

pub(crate) struct LockInner {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) kind: Kind,
    /// [`Kind::quorum`] of the manager's nodes.
    pub(crate) quorum: usize,
    pub(crate) resources: Arc<[String]>,
    pub(crate) keys: Arc<[String]>,
    pub(crate) token: Arc<str>,
    pub(crate) fence: Option<u64>,
    pub(crate) state: Mutex<LockState>,
    pub(crate) lost: AtomicBool,
    pub(crate) lost_tx: watch::Sender<bool>,
    /// With a minimum hold: the moment before which a release leaves the keys in place (to
    /// expire then) instead of deleting them.
    pub(crate) hold_until: Option<Instant>,
    /// Its place in the manager's keeper while kept alive there (0: not kept; `keeper.rs`).
    pub(crate) kept: AtomicU64,
}

/// How long before the end of its validity (ttl − elapsed − drift) a lock of `kind` counts as
/// ended: zero for locks; a leadership ends a tenth of its ttl (at most a second) early, so that
/// a leader is told it lost before its validity ends.
pub(crate) fn loss_margin(kind: Kind, ttl: Duration) -> Duration {
    match kind {
        Kind::Leader => (ttl / 10).min(Duration::from_secs(1)),
        _ => Duration::ZERO,
    }
}

/// A lock granted by a quorum. Cheap to clone; clones share state (an extension through one is
/// seen by all). Dropping it does not release it: call [`Lock::release`].
#[derive(Clone)]
pub struct Lock {
    pub(crate) inner: Arc<LockInner>,
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// True when a quorum of nodes still held the keys with our token and deleted them: the
    /// lock had not been lost before the release.
    pub held: bool,
    /// Nodes that had answered "deleted" when the release returned. A release returns as soon
    /// as a quorum deleted the keys (the lock is gone then: no quorum can see it), so this is at
    /// least the quorum when `held`; the deletes still in flight finish in the background
    /// (bounded by `node_timeout`), and their nodes show as `pending` in the report.
    pub deleted_on: usize,
    /// The per-node report.
    pub report: Report,
}

impl Lock {
    /// For a semaphore's permit ([`LockManager::semaphore`](crate::LockManager::semaphore)):
    /// the semaphore's limit; `None` for a lock.
    pub fn limit(&self) -> Option<u32> {
        match self.inner.kind {
            Kind::Permit { limit } => Some(limit),
            Kind::Lock | Kind::Read | Kind::Write | Kind::Leader => None,
        }
    }

    /// For a read-write lock ([`LockManager::rw_lock`](crate::LockManager::rw_lock)): whether
    /// this is a read or a write; `None` for a lock or a permit.
    pub fn access(&self) -> Option<Access> {
        self.inner.kind.access()
    }

    /// The nodes that must agree for this lock (or permit) to be granted, extended and held.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The resource names, as given.
    pub fn resources(&self) -> &[String] {
        &self.inner.resources
    }

    /// The Redis keys (resource names with the key prefix).
    pub fn keys(&self) -> &[String] {
        &self.inner.keys
    }

    /// The random token (40 lowercase hex chars) stored as the value of every key.
    pub fn token(&self) -> &str {
        &self.inner.token
    }

    /// The fencing token, when the lock was acquired with fencing.
    pub fn fence(&self) -> Option<u64> {
        self.inner.fence
    }

    /// The ttl of the last acquire or extend.
    pub fn ttl(&self) -> Duration {
        self.state().ttl
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, LockState> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The monotonic instant until which the lock is valid (ttl − elapsed − drift after the grant
    /// or the last extension).
    pub fn deadline(&self) -> Instant {
        self.state().deadline
    }

    /// Remaining validity from the monotonic clock; zero once lost, released or expired.
    pub fn validity(&self) -> Duration {
        if self.is_lost() || self.state().released {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// The validity deadline as wall-clock milliseconds since the Unix epoch (for display and for
    /// APIs that speak in epoch time; the lock itself never trusts the wall clock).
    pub fn expiration_unix_ms(&self) -> u64 {
        let at = SystemTime::now() + self.validity();
        at.duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    /// True while the lock is neither lost nor released and its validity has not run out.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// True once the lock is known lost (an extension failed for lack of our token, or its
    /// validity ran out while auto-extension was watching).
    pub fn is_lost(&self) -> bool {
        self.inner.lost.load(Ordering::Acquire)
    }

    /// True once [`release`](Self::release) ran.
    pub fn is_released(&self) -> bool {
        self.state().released
    }

    /// How many times the lock was extended.
    pub fn extensions(&self) -> u32 {
        self.state().extensions
    }

    /// The per-node report of the last operation on this lock.
    pub fn report(&self) -> Report {
        Report::clone(&self.state().report)
    }

    pub(crate) fn mark_lost(&self) {
        if !self.inner.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(resources = ?self.inner.resources, "lock lost");
            self.inner.cluster.stats.note(Event::Lost);
            self.inner.lost_tx.send_replace(true);
        }
    }

    /// Resolves when the lock is lost or its validity deadline passes without an extension.
    /// Resolves at once for a released lock. Cancel-safe.
    pub async fn lost(&self) {
        let mut rx = self.inner.lost_tx.subscribe();
        loop {
            if self.is_lost() || self.is_released() {
                return;
            }
            let deadline = self.deadline();
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep_until(deadline.into()) => {
                    if Instant::now() >= self.deadline() && !self.is_released() {
                        self.mark_lost();
                        return;
                    }
                }
            }
        }
    }

    /// Extends every key to `ttl` from now, on a quorum, only where the key still holds this
    /// lock's token. Fails with `Lost` when a quorum no longer holds it (or its validity ran out).
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        extend(self, ttl).await
    }

    /// Deletes the keys that still hold this lock's token, on every node (the request goes to
    /// all of them at once; it returns once a quorum deleted them, or every node answered, or
    /// `node_timeout` passed). Never fails because the lock had expired or been taken over:
    /// that is reported as `held == false`.
    pub async fn release(&self) -> Released {
        release(self).await
    }

    /// Ends a critical section: releases the lock and applies the loss rule, the same in every
    /// language. The work held the lock to its end only if, when it ended, the lock was neither
    /// marked lost nor past its validity deadline, AND the release still found its token on a
    /// quorum of nodes (fewer means another client could have taken it meanwhile, whatever the
    /// local clock said). Otherwise this fails with `Lost` and the release's report. The keys are
    /// deleted wherever they still hold the token either way.
    pub async fn finish(&self) -> Result<Released> {
        let lost = self.is_lost();
        let expired = !lost && !self.is_valid();
        let released = self.release().await;
        let why = if lost {
            "it was lost before the work ended"
        } else if expired {
            "its validity ran out before the work ended"
        } else if !released.held {
            "fewer than a quorum of nodes still held its token at release"
        } else {
            return Ok(released);
        };
        Err(self.lost_error(why).with_report(released.report))
    }

    /// Keeps the lock extended in the background (on the manager's runtime; callable from any
    /// thread) until the returned handle is stopped or dropped, the lock is released, or it is
    /// lost. On loss (an extension finds no quorum holding the token, or the validity deadline
    /// passes before an extension succeeds) [`lost`](Self::lost) resolves at once and the lock
    /// is released: its keys are deleted wherever they still hold its token. This policy is the
    /// same in every language.
    pub fn keep_alive(&self) -> KeepAlive {
        let cluster = &self.inner.cluster;
        let how = if keeper::keeps(cluster, self.inner.kind) {
            Keeping::Kept(Keeper::keep(cluster, self.clone()))
        } else {
            Keeping::Own(cluster.rt.spawn(keep_alive(self.clone())))
        };
        KeepAlive { how: Some(how) }
    }

    pub(crate) fn lost_error(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::Lost,
            format!(
                "lock on {} lost: {why}",
                quote_resources(&self.inner.resources)
            ),
        )
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Lock");
        d.field("resources", &self.inner.resources);
        if let Some(limit) = self.limit() {
            d.field("semaphore_limit", &limit);
        }
        d.field("token", &self.inner.token)
            .field("fence", &self.inner.fence)
            .field("validity", &self.validity())
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// The background auto-extension of one lock; stops when dropped.
pub struct KeepAlive {
    how: Option<Keeping>,
}

/// Who extends the lock: the manager's keeper (plain locks and writers, `keeper.rs`), or the
/// lock's own loop.
enum Keeping {
    Kept(Arc<Kept>),
    Own(JoinHandle<()>),
}

impl KeepAlive {
    /// Stops extending (the lock stays held until it expires or is released).
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        match self.how.take() {
            Some(Keeping::Kept(kept)) => kept.stop(),
            Some(Keeping::Own(task)) => task.abort(),
            None => {}
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.end();
    }
}

/// Compare-and-delete on `nodes`: returns once a quorum of them deleted the keys (or every
/// node answered, or `node_timeout` passed); the other deletes finish in the background.
pub(crate) async fn release_on(
    nodes: &[Arc<Node>],
    kind: Kind,
    q: usize,
    keys: &[String],
    token: &str,
    announce: bool,
) -> Round {
    release_round(nodes, kind, q, keys, token, announce, Tally::Release).await
}

pub(crate) async fn release_round(
    nodes: &[Arc<Node>],
    kind: Kind,
    q: usize,
    keys: &[String],
    token: &str,
    announce: bool,
    tally: Tally,
) -> Round {
    run_release(nodes, q, kind.release_cmd(keys, token, announce), tally).await
}

/// Sends a release-like `cmd` (its reply: how many keys still held the token) to every node;
/// a node that found some votes "yes".
async fn run_release(nodes: &[Arc<Node>], q: usize, cmd: redis::Cmd, tally: Tally) -> Round {
    let cmd = Arc::new(cmd);
    quorum::run(nodes, tally, q, Instant::now(), |node| {
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

/// What a release round did, for a lock (or permit) whose quorum is `q`.
pub(crate) fn released(q: usize, round: Round) -> Released {
    Released {
        held: round.granted >= q,
        deleted_on: round.granted,
        report: round.report,
    }
}

async fn release(lock: &Lock) -> Released {
    let inner = &lock.inner;
    if let Some(left) = inner
        .hold_until
        .and_then(|until| until.checked_duration_since(Instant::now()))
        .filter(|left| !left.is_zero())
    {
        return release_held(lock, left).await;
    }
    let mut round = std::pin::pin!(release_on(
        &inner.cluster.nodes,
        inner.kind,
        inner.quorum,
        &inner.keys,
        &inner.token,
        true,
    ));
    // The first poll hands each delete to its node's connection, which runs its commands in
    // the order they were handed over. The next fair waiter of this process need not wait for
    // the replies (nor for the nodes' announcements): woken now, its round goes out behind our
    // deletes and each node runs it after them, a hand-over in one round trip instead of two.
    // Should the release fail after all, the waiter's round is refused: one round lost, never
    // a grant the nodes did not make.
    let first = std::future::poll_fn(|cx| Poll::Ready(round.as_mut().poll(cx))).await;
    let woke = inner
        .cluster
        .notifier
        .released_here(&inner.keys, &inner.token);
    let round = match first {
        Poll::Ready(round) => round,
        Poll::Pending => round.await,
    };
    inner.cluster.stats.note(Event::Released);
    let result = released(inner.quorum, round);
    if woke {
        // Its round goes out before whatever the caller does next (often: queue up again).
        tokio::task::yield_now().await;
    }
    mark_released(lock, &result);
    result
}

/// Records a release's outcome on the lock and wakes whoever watches it.
fn mark_released(lock: &Lock, result: &Released) {
    let mut st = lock.state();
    st.released = true;
    st.report = Arc::new(result.report.clone());
    drop(st);
    // Out of the keeper's queue now rather than when it falls due.
    let kept = lock.inner.kept.load(Ordering::Acquire);
    if kept != 0 {
        lock.inner.cluster.keeper.remove(kept);
    }
    lock.inner
        .lost_tx
        .send_replace(lock.inner.lost.load(Ordering::Acquire));
}

/// The release of a lock whose minimum hold is not over (`left` to go): its keys stay, set to
/// expire when it is; nobody is woken (the lock is not free yet). The lock counts as released.
async fn release_held(lock: &Lock, left: Duration) -> Released {
    let inner = &lock.inner;
    // Whole milliseconds, rounded up: the keys never go before the hold is over.
    let ms = left.as_micros().div_ceil(1000).to_string();
    let cmd = scripts::evalsha(&scripts::RELEASE_HELD, &inner.keys, &[&inner.token, &ms]);
    let round = run_release(&inner.cluster.nodes, inner.quorum, cmd, Tally::Release).await;
    inner.cluster.stats.note(Event::Released);
    let result = released(inner.quorum, round);
    mark_released(lock, &result);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{NodeReport, Vote};

    #[test]
    fn a_permit_needs_the_semaphores_quorum_and_the_rest_a_majority() {
        for kind in [Kind::Lock, Kind::Read, Kind::Write, Kind::Leader] {
            assert_eq!(kind.quorum(5), 3, "{kind:?}");
            assert_eq!(kind.quorum(4), 3, "{kind:?}");
        }
        assert_eq!(Kind::Permit { limit: 1 }.quorum(5), 3);
        assert_eq!(Kind::Permit { limit: 2 }.quorum(5), 4);
        assert_eq!(Kind::Permit { limit: 4 }.quorum(5), 5);
    }

    #[test]
    fn only_a_leadership_ends_before_its_validity() {
        let s = Duration::from_secs;
        assert_eq!(loss_margin(Kind::Leader, s(5)), Duration::from_millis(500));
        assert_eq!(loss_margin(Kind::Leader, s(30)), s(1), "at most a second");
        for kind in [
            Kind::Lock,
            Kind::Read,
            Kind::Write,
            Kind::Permit { limit: 3 },
        ] {
            assert_eq!(loss_margin(kind, s(5)), Duration::ZERO, "{kind:?}");
        }
    }

    #[test]
    fn a_release_held_the_lock_only_when_a_quorum_deleted_it() {
        let round = |granted| Round {
            report: Report {
                nodes: (0..5)
                    .map(|i| NodeReport {
                        url: format!("redis://n{i}").into(),
                        vote: if i < granted {
                            Vote::For
                        } else {
                            Vote::Against
                        },
                        error: None,
                    })
                    .collect(),
                elapsed: Duration::from_millis(3),
                rounds: 1,
            },
            granted,
            refused: 5 - granted,
            max_payload: 0,
            decided_at: Instant::now(),
        };
        let r = released(3, round(3));
        assert!(r.held);
        assert_eq!(r.deleted_on, 3);
        assert_eq!(r.report.count(Vote::For), 3);
        assert!(released(3, round(5)).held);
        let r = released(3, round(2));
        assert!(!r.held);
        assert_eq!(r.deleted_on, 2);
        assert!(!released(4, round(3)).held);
    }
}
