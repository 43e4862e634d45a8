//! One keeper per manager extends every auto-extended lock that falls due, all together.
//!
//! A process that holds many locks with auto-extension would otherwise wake one task per lock
//! per extension and run one quorum round for it (its futures, reply channels and report).
//! Here the plain locks and writers kept alive wait in one queue, ordered by when each is due
//! (`ttl / 3` — or `extension_threshold` — before its validity ends); the keeper takes every
//! lock due within [`WINDOW`] at once and sends each node one script call per 256 of them
//! ([`Node::extend_all`]). A lock whose extension a quorum of eligible nodes answered
//! "extended" — with no node answering anything else than "extended" or an error — in time is
//! extended as its own round would have extended it, and queued again. Every other case (a
//! refusal, too few answers, a node that restarted since the lock last saw it, the validity
//! running out, `max_extensions`) goes to the lock's own extension ([`crate::lock`]'s
//! auto-extension loop), which keeps every rule it has (re-seating, retries, the loss rule)
//! and hands the lock back after its next successful extension.
//!
//! Semaphore permits, readers, leaderships and Cluster voters keep their own loop: their
//! scripts differ per kind, and a Cluster voter reaches one hash slot per call.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::cluster::Cluster;
use crate::error::{NodeReport, Report, Vote};
use crate::lock::{self, Kind, Lock};
use crate::node::{Failure, Node};
use crate::quorum;
use crate::stats::Event;

/// Locks due this soon are extended with the ones due now: a few milliseconds early costs a
/// lock nothing (its threshold is a third of its ttl), and it gathers locks due close together
/// into one call.
const WINDOW: Duration = Duration::from_millis(5);

/// One lock kept alive, shared by its [`lock::KeepAlive`] handle and the keeper.
pub(crate) struct Kept {
    id: u64,
    pub(crate) lock: Lock,
    stopped: AtomicBool,
    /// The lock's own extension loop while it has the lock (see the module's text).
    own: Mutex<Option<AbortHandle>>,
}

impl Kept {
    /// Stops keeping the lock: out of the queue (the lock is dropped with it) and its own
    /// loop, if running, aborted.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let cluster = &self.lock.inner.cluster;
        cluster.keeper.remove(self.id);
        if let Some(task) = self.own.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }

    fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

/// The queue and its task.
#[derive(Default)]
pub(crate) struct Keeper {
    state: Mutex<Queue>,
    wake: Notify,
}

#[derive(Default)]
struct Queue {
    /// (due, id) → the lock.
    due: BTreeMap<(Instant, u64), Arc<Kept>>,
    /// id → its place in `due` (absent while its extension is out).
    at: HashMap<u64, Instant, BuildHasherDefault<IdHash>>,
    next_id: u64,
    running: bool,
}

/// The hash of a kept lock's id (ids are a counter, never chosen by anyone outside): one
/// multiplication instead of SipHash, on each queueing of each lock.
#[derive(Default)]
struct IdHash(u64);

impl Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Whether the keeper extends locks of `kind` on `cluster` (else each has its own loop).
pub(crate) fn keeps(cluster: &Cluster, kind: Kind) -> bool {
    matches!(kind, Kind::Lock | Kind::Write) && cluster.nodes.iter().all(|n| !n.is_cluster_voter())
}

/// How long before its deadline `lock` is extended: `extension_threshold` (default a third of
/// its ttl), at most half of its ttl. The keeper and a lock's own loop both use this.
pub(crate) fn threshold(lock: &Lock) -> Duration {
    let ttl = lock.ttl();
    lock.inner
        .cluster
        .config
        .extension_threshold
        .unwrap_or(ttl / 3)
        .min(ttl / 2)
}

/// When `lock` is due for extension: [`threshold`] before its deadline.
pub(crate) fn due(lock: &Lock) -> Instant {
    let deadline = lock.deadline();
    deadline.checked_sub(threshold(lock)).unwrap_or(deadline)
}

impl Keeper {
    /// Starts keeping `lock` alive.
    pub(crate) fn keep(cluster: &Arc<Cluster>, lock: Lock) -> Arc<Kept> {
        let id = {
            let mut q = cluster.keeper.queue();
            q.next_id += 1;
            q.next_id
        };
        lock.inner.kept.store(id, Ordering::Release);
        let kept = Arc::new(Kept {
            id,
            lock,
            stopped: AtomicBool::new(false),
            own: Mutex::new(None),
        });
        Keeper::queue_again(cluster, &kept);
        kept
    }

    /// (Re)queues `kept` at its due time, unless it was stopped; starts the keeper's task
    /// when it is not running.
    pub(crate) fn queue_again(cluster: &Arc<Cluster>, kept: &Arc<Kept>) {
        Keeper::queue_all_again(cluster, [Arc::clone(kept)]);
    }

    /// [`queue_again`](Self::queue_again) for many locks, under one hold of the queue's lock.
    fn queue_all_again(cluster: &Arc<Cluster>, kept: impl IntoIterator<Item = Arc<Kept>>) {
        let keeper = &cluster.keeper;
        // Each lock's due time is read before the queue's lock is taken (never both at once).
        let kept: Vec<(Instant, Arc<Kept>)> = kept.into_iter().map(|k| (due(&k.lock), k)).collect();
        let (first, start) = {
            let mut q = keeper.queue();
            let mut first = false;
            for (at, kept) in kept {
                // Checked under the queue's lock: `stop` removes under it too, so a lock is
                // never queued after it was stopped.
                if kept.stopped() {
                    continue;
                }
                first |= q.due.first_key_value().is_none_or(|((t, _), _)| at < *t);
                q.at.insert(kept.id, at);
                q.due.insert((at, kept.id), kept);
            }
            let start = !q.running && !q.due.is_empty();
            q.running |= start;
            (first, start)
        };
        if start {
            cluster.rt.spawn(run(Arc::clone(cluster)));
        } else if first {
            keeper.wake.notify_one();
        }
    }

    pub(crate) fn remove(&self, id: u64) {
        let mut q = self.queue();
        if let Some(at) = q.at.remove(&id) {
            q.due.remove(&(at, id));
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The keeper's task: sleeps until the first lock is due, takes every lock due within
/// [`WINDOW`] and extends them; ends when the queue is empty (the next `keep` starts it again).
async fn run(cluster: Arc<Cluster>) {
    let keeper = &cluster.keeper;
    loop {
        let now = Instant::now();
        let next = {
            let mut q = keeper.queue();
            match q.due.first_key_value() {
                None => {
                    q.running = false;
                    return;
                }
                Some(((at, _), _)) => *at,
            }
        };
        if next > now + WINDOW {
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                () = keeper.wake.notified() => {}
            }
            continue;
        }
        let due: Vec<Arc<Kept>> = {
            let mut q = keeper.queue();
            let later = q.due.split_off(&(now + WINDOW, u64::MAX));
            let due = std::mem::replace(&mut q.due, later);
            due.into_values()
                .inspect(|k| {
                    q.at.remove(&k.id);
                })
                .collect()
        };
        let mut batch = Vec::with_capacity(due.len());
        for kept in due {
            if let Some(kept) = triage(&cluster, kept, now) {
                batch.push(kept);
            }
        }
        if !batch.is_empty() {
            cluster.rt.spawn(extend_due(Arc::clone(&cluster), batch));
        }
    }
}

/// What becomes of a lock taken from the queue: back in it (extended meanwhile), to its own
/// loop, let go (released, lost, stopped), or into this tick's batch (returned).
fn triage(cluster: &Arc<Cluster>, kept: Arc<Kept>, now: Instant) -> Option<Arc<Kept>> {
    let lock = &kept.lock;
    if kept.stopped() || lock.is_released() {
        return None;
    }
    if lock.is_lost() || now >= lock.deadline() {
        // The policy of every auto-extension: a lost lock is released.
        lock.mark_lost();
        cluster.rt.spawn(lock::release_lost(kept.lock.clone()));
        return None;
    }
    if due(lock) > now + WINDOW {
        // Extended by its holder meanwhile.
        Keeper::queue_again(cluster, &kept);
        return None;
    }
    let restarted = {
        let st = lock.state();
        let maxed = cluster
            .config
            .max_extensions
            .is_some_and(|max| st.extensions >= max);
        maxed
            || st
                .seated
                .iter()
                .zip(&cluster.nodes)
                .any(|(&e, node)| e != 0 && node.data_epoch() != e)
    };
    if restarted {
        hand_over(cluster, kept);
        return None;
    }
    Some(kept)
}

/// Gives the lock to its own extension loop, which hands it back after its next successful
/// extension.
fn hand_over(cluster: &Arc<Cluster>, kept: Arc<Kept>) {
    let mut own = kept.own.lock().unwrap_or_else(|p| p.into_inner());
    if kept.stopped() {
        return;
    }
    let task = cluster.rt.spawn(lock::keep_alive_own(Arc::clone(&kept)));
    *own = Some(task.abort_handle());
}

/// One lock of a batch as it was sent.
struct Sent {
    kept: Arc<Kept>,
    ttl: Duration,
    ttl_ms: u64,
    /// Its deadline when the extension was sent.
    before: Instant,
    /// Its extension count then: another extension applied meanwhile makes this one's
    /// deadline no later than that one's.
    extensions: u32,
}

/// Extends `batch` on every node at once and settles each lock.
async fn extend_due(cluster: Arc<Cluster>, batch: Vec<Arc<Kept>>) {
    let sent: Vec<Sent> = batch
        .into_iter()
        .map(|kept| {
            let st = kept.lock.state();
            let (ttl, before, extensions) = (st.ttl, st.deadline, st.extensions);
            drop(st);
            Sent {
                ttl,
                ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
                before,
                extensions,
                kept,
            }
        })
        .collect();
    let items: Vec<_> = sent
        .iter()
        .map(|s| (&s.kept.lock.inner.keys, &s.kept.lock.inner.token, s.ttl_ms))
        .collect();
    let nodes = &cluster.nodes;
    let epochs: Vec<u64> = nodes.iter().map(|n| n.data_epoch()).collect();
    let t1 = Instant::now();
    let calls: Vec<_> = nodes
        .iter()
        .map(|node| {
            let call = node.extend_all(&items);
            let timeout = node.node_timeout();
            async move {
                tokio::time::timeout(timeout, call)
                    .await
                    .map_err(|_| Failure::Timeout)
            }
        })
        .collect();
    drop(items);
    let replies = futures_util::future::join_all(calls).await;
    let decided_at = Instant::now();
    let eligible: Vec<bool> = nodes.iter().map(|n| n.eligible()).collect();
    let q = cluster.quorum;
    let locks = sent.len();
    let mut again = Vec::with_capacity(locks);
    // The report of a lock every node extended, shared by all such locks of the batch.
    let all_for = eligible
        .iter()
        .all(|&e| e)
        .then(|| Arc::new(report(&cluster, |_| Ok(1), &eligible, decided_at - t1)));
    for (j, s) in sent.into_iter().enumerate() {
        let vote = |i: usize| match &replies[i] {
            Err(f) => Err(f),
            Ok(v) => match v.get(j) {
                Some(Ok(r)) => Ok(*r),
                Some(Err(f)) => Err(f),
                None => Err(&Failure::Timeout),
            },
        };
        let n = nodes.len();
        let granted = (0..n)
            .filter(|&i| matches!(vote(i), Ok(1)) && eligible[i])
            .count();
        let clean = (0..n).all(|i| matches!(vote(i), Ok(1) | Err(_)));
        let drift = cluster.config.drift(s.ttl);
        let in_time =
            quorum::validity(s.ttl, decided_at - t1, drift).is_some() && decided_at < s.before;
        if !(clean && granted >= q && in_time) {
            hand_over(&cluster, s.kept);
            continue;
        }
        let lock = &s.kept.lock;
        {
            let mut st = lock.state();
            if st.released {
                continue;
            }
            let deadline = t1 + s.ttl - drift - lock::loss_margin(lock.inner.kind, s.ttl);
            st.deadline = if st.extensions == s.extensions {
                deadline
            } else {
                deadline.min(st.deadline)
            };
            st.ttl = s.ttl;
            st.extensions += 1;
            for (i, seat) in st.seated.iter_mut().enumerate() {
                if matches!(vote(i), Ok(1)) {
                    *seat = epochs[i];
                }
            }
            st.report = match &all_for {
                Some(r) if granted == n => Arc::clone(r),
                _ => Arc::new(report(&cluster, vote, &eligible, decided_at - t1)),
            };
        }
        // Watchers are woken only if the flag changes: one waiting for the old deadline wakes
        // then and finds the new one, as it would if woken now.
        lock.inner
            .lost_tx
            .send_if_modified(|lost| std::mem::replace(lost, false));
        again.push(s.kept);
    }
    let extended = again.len() as u64;
    Keeper::queue_all_again(&cluster, again);
    cluster.stats.note_n(Event::Extended, extended);
    for (node, (replies, &eligible)) in nodes.iter().zip(replies.iter().zip(&eligible)) {
        count_votes(node, replies, eligible, locks);
    }
}

/// Counts a node's answers to a batch in its counters, as a round counts each vote.
fn count_votes(
    node: &Node,
    replies: &Result<Vec<Result<i64, Failure>>, Failure>,
    eligible: bool,
    locks: usize,
) {
    let c = &node.counters;
    let Ok(replies) = replies else {
        c.timeouts.fetch_add(locks as u64, Ordering::Relaxed);
        return;
    };
    for r in replies {
        let counter = match r {
            Ok(1 | 2) if eligible => &c.votes_for,
            Ok(1 | 2) => &c.not_eligible,
            Ok(_) => &c.votes_against,
            Err(Failure::Timeout) => &c.timeouts,
            Err(Failure::Error(_)) => &c.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The report of one lock's extension in a batch.
fn report<'a>(
    cluster: &Cluster,
    vote: impl Fn(usize) -> std::result::Result<i64, &'a Failure>,
    eligible: &[bool],
    elapsed: Duration,
) -> Report {
    let nodes = cluster
        .nodes
        .iter()
        .zip(eligible)
        .enumerate()
        .map(|(i, (node, &eligible))| {
            let (vote, error) = match vote(i) {
                Ok(_) if eligible => (Vote::For, None),
                Ok(_) => (Vote::NotEligible, Some(node.quarantine_text())),
                Err(f @ Failure::Timeout) => (Vote::Timeout, Some(f.text())),
                Err(f) => (Vote::Error, Some(f.text())),
            };
            NodeReport {
                url: node.display.clone(),
                vote,
                error,
            }
        })
        .collect();
    Report {
        nodes,
        elapsed,
        rounds: 1,
    }
}
