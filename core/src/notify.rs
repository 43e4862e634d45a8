//! Release notification: the release script publishes on a per-key channel; a waiter
//! subscribes on every node and retries as soon as any node announces a release, instead of
//! sleeping a full retry delay. The random delay stays as the fallback (expiry sends nothing).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::node::{Node, Subscriber};

/// One waiter (an acquire between two rounds). A release wakes ONE waiter of this manager per
/// resource, first come first served: the others would only split the votes and pay a full
/// round and a rollback each (a herd that costs every node CPU). The waiter that waited longest
/// is woken by every release until it wins or gives up; the others keep their timed retry as
/// the fallback. Fair waiters are woken by their ticket instead: the one with the
/// smallest is the head of the queue, the only one the nodes let in (and a non-fair waiter of
/// the same resource, if any, is woken too: it ignores the queue).
pub(crate) struct Waiter {
    id: u64,
    /// Woken and not yet back for another round: a waiter that goes away in that state hands the
    /// wake-up on, so that a cancelled acquire cannot swallow it.
    woken: AtomicBool,
    /// A fair waiter's ticket (0: not fair, or no ticket yet).
    ticket: AtomicU64,
    /// A fair waiter's token: equal tickets are ordered by token, as the nodes' sorted sets
    /// order them (by member, bytewise).
    token: std::sync::OnceLock<String>,
    pub(crate) notify: Notify,
    /// A fair waiter became its process's first in line (the one before it was granted or
    /// left): it shortens its pause to the next-in-line poll instead of sleeping out a pause
    /// chosen while others were ahead. Without this, a release whose wake-up is lost (the lock
    /// expired instead, or the announcement did not arrive) costs the queue up to a whole
    /// retry pause per hand-over.
    pub(crate) nudge: Notify,
    /// An election's observer: woken by every announcement on its channels, never chosen as
    /// the one waiter a release wakes, and never handing a wake-up on.
    observer: bool,
}

impl Waiter {
    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Records a fair waiter's ticket and token: wake-ups go to the smallest (ticket, token),
    /// the head of the nodes' queues.
    pub(crate) fn rank(&self, ticket: u64, token: &str) {
        self.token.get_or_init(|| token.to_owned());
        self.ticket.store(ticket, Ordering::Release);
    }

    /// Called when the waiter starts its next round.
    pub(crate) fn consumed(&self) {
        self.woken.store(false, Ordering::Release);
    }
}

/// The waiters of one channel (one lock key) and the release being announced on it.
#[derive(Default)]
struct Channel {
    waiters: Vec<Arc<Waiter>>,
    /// The tokens of the latest releases announced and, for each, the nodes (bit i: node i) that
    /// announced it. A release runs on every node at once; waking at the first announcement
    /// would retry while the other nodes still hold the key, so the wake-up waits for a quorum
    /// of nodes. Several releases are tracked: a late announcement of the previous release (a
    /// slow node's delete, arriving after the next holder already released) must not wipe out
    /// the count of the current one.
    announcing: VecDeque<Announcing>,
}

/// One release being announced on a channel.
struct Announcing {
    token: String,
    /// Bit i: node i announced it.
    seen: u64,
    /// The releasing lock was in this process and already woke the first fair waiter when it
    /// handed its release to the nodes ([`Notifier::released_here`]): the announcements wake
    /// only the others.
    fair_woken: bool,
}

/// The longest wait for a new pub/sub connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest wait for a SUBSCRIBE or UNSUBSCRIBE to be answered (generous: under valgrind a
/// round trip can take a good part of a second).
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The first pause before connecting again to a node whose pub/sub connection was lost or could
/// not be made; it doubles up to [`RECONNECT_MAX`] while the node stays out of reach.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// How many recent releases of one key are counted at once.
const ANNOUNCING: usize = 4;

impl Channel {
    /// The fair waiter with the smallest (ticket, token): the first of this process in line.
    fn first_fair(&self) -> Option<&Arc<Waiter>> {
        let ticket = |w: &Arc<Waiter>| w.ticket.load(Ordering::Acquire);
        self.waiters
            .iter()
            .filter(|w| ticket(w) > 0)
            .min_by_key(|w| (ticket(w), w.token.get().map(String::as_bytes)))
    }

    /// Wakes the waiter that waited longest (it leaves the line when its acquire ends) and,
    /// with `fair`, the first fair waiter.
    fn wake_next(&mut self, fair: bool) {
        let ticket = |w: &Arc<Waiter>| w.ticket.load(Ordering::Acquire);
        if fair && let Some(w) = self.first_fair() {
            w.wake();
        }
        if let Some(w) = self.waiters.iter().find(|w| ticket(w) == 0 && !w.observer) {
            w.wake();
        }
        for w in self.waiters.iter().filter(|w| w.observer) {
            w.wake();
        }
    }
}

#[derive(Default)]
struct Channels {
    /// channel -> its waiters
    channels: HashMap<String, Channel>,
    next_id: u64,
}

impl Channels {
    /// The release of `token` on `name`, as counted so far (a new entry when none is).
    fn entry<'a>(ch: &'a mut Channel, token: &str) -> &'a mut Announcing {
        let at = match ch.announcing.iter().position(|a| a.token == token) {
            Some(at) => at,
            None => {
                if ch.announcing.len() == ANNOUNCING {
                    ch.announcing.pop_front();
                }
                ch.announcing.push_back(Announcing {
                    token: token.to_owned(),
                    seen: 0,
                    fair_woken: false,
                });
                ch.announcing.len() - 1
            }
        };
        &mut ch.announcing[at]
    }

    /// Node `node` announced the release of `token` on `name`.
    fn announce(&mut self, name: &str, node: usize, token: String, quorum: u32) {
        let Some(ch) = self.channels.get_mut(name) else {
            return;
        };
        let bit = 1u64 << node;
        let a = Self::entry(ch, &token);
        let before = a.seen;
        a.seen |= bit;
        if before & bit == 0 && a.seen.count_ones() == quorum {
            let fair = !a.fair_woken;
            ch.wake_next(fair);
        }
    }

    /// A lock of this process handed the release of `token` on `name` to every node: wakes the
    /// first fair waiter now, unless the announcements already did. Returns whether it woke one.
    fn released_here(&mut self, name: &str, token: &str, quorum: u32) -> bool {
        let Some(ch) = self.channels.get_mut(name) else {
            return false;
        };
        let Some(first) = ch.first_fair().cloned() else {
            return false;
        };
        let a = Self::entry(ch, token);
        if a.fair_woken || a.seen.count_ones() >= quorum {
            return false;
        }
        a.fair_woken = true;
        first.wake();
        true
    }
}

/// One pub/sub connection per node, shared by every waiter of the manager.
pub(crate) struct Notifier {
    nodes: Vec<Arc<Node>>,
    /// A release wakes a waiter once this many nodes announced it.
    quorum: u32,
    /// The manager's runtime: subscriptions and readers run there.
    rt: Handle,
    channels: Arc<Mutex<Channels>>,
    sinks: Vec<tokio::sync::Mutex<Sink>>,
    tasks: Mutex<Vec<AbortHandle>>,
    pub(crate) wakeups: AtomicU64,
}

/// The pub/sub connection to one node, if there is one, and which one it is: the reader of a
/// connection that ended clears the slot only if it still holds that connection.
#[derive(Default)]
struct Sink {
    conn: Option<Subscriber>,
    generation: u64,
}

/// A waiter's registration; unsubscribes when dropped.
pub(crate) struct Watch {
    notifier: Arc<Notifier>,
    channels: Vec<String>,
    pub(crate) waiter: Arc<Waiter>,
}

impl Notifier {
    pub(crate) fn new(nodes: Vec<Arc<Node>>, quorum: usize, rt: Handle) -> Arc<Self> {
        let sinks = nodes.iter().map(|_| Default::default()).collect();
        Arc::new(Notifier {
            nodes,
            quorum: quorum as u32,
            rt,
            channels: Arc::default(),
            sinks,
            tasks: Mutex::default(),
            wakeups: AtomicU64::new(0),
        })
    }

    /// A lock of this process handed the release of `token` on `keys` to every node's
    /// connection (the same news as a quorum of announcements, sooner than they come; each node
    /// runs the woken waiter's round after the delete): wakes this process's first fair waiter
    /// of each key at once; the announcements then wake only the others. Returns whether a
    /// waiter was woken.
    pub(crate) fn released_here(&self, keys: &[String], token: &str) -> bool {
        let mut ch = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if ch.channels.is_empty() {
            return false;
        }
        let mut woke = false;
        for key in keys {
            woke |= ch.released_here(&crate::scripts::release_channel(key), token, self.quorum);
        }
        woke
    }

    /// Registers interest in releases of `channels` and subscribes on every node in the
    /// background (the caller does not wait for the subscriptions).
    pub(crate) fn watch(self: &Arc<Self>, channels: Vec<String>) -> Watch {
        self.watch_as(channels, false)
    }

    /// A watch for an election's observer: woken by every announcement on `channels` (see
    /// [`Waiter::observer`]).
    pub(crate) fn observe(self: &Arc<Self>, channels: Vec<String>) -> Watch {
        self.watch_as(channels, true)
    }

    fn watch_as(self: &Arc<Self>, channels: Vec<String>, observer: bool) -> Watch {
        let mut fresh = Vec::new();
        let waiter = {
            let mut ch = self.channels.lock().unwrap_or_else(|p| p.into_inner());
            ch.next_id += 1;
            let waiter = Arc::new(Waiter {
                id: ch.next_id,
                woken: AtomicBool::new(false),
                ticket: AtomicU64::new(0),
                token: std::sync::OnceLock::new(),
                notify: Notify::new(),
                nudge: Notify::new(),
                observer,
            });
            for c in &channels {
                let channel = ch.channels.entry(c.clone()).or_default();
                if channel.waiters.is_empty() {
                    fresh.push(c.clone());
                }
                channel.waiters.push(waiter.clone());
            }
            waiter
        };
        if !fresh.is_empty() {
            let this = self.clone();
            let task = self
                .rt
                .spawn(async move { this.subscribe_all(fresh).await });
            self.track(task.abort_handle());
        }
        Watch {
            notifier: self.clone(),
            channels,
            waiter,
        }
    }

    fn track(&self, handle: AbortHandle) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    async fn subscribe_all(self: Arc<Self>, channels: Vec<String>) {
        let subs = (0..self.nodes.len()).map(|i| {
            let this = self.clone();
            let channels = channels.clone();
            async move {
                // Subscribing and unsubscribing happen under the sink's lock, each sending only
                // what is still (or no longer) watched when it runs: an UNSUBSCRIBE of a
                // channel that emptied and a SUBSCRIBE of the same channel watched again
                // cannot overtake each other and leave its waiters deaf.
                let mut slot = this.sinks[i].lock().await;
                if let Some(sink) = slot.conn.as_mut() {
                    let watched = this.select(&channels, true);
                    if watched.is_empty() {
                        return;
                    }
                    // Bounded: the lock is held (a stopped node must not stall every later
                    // subscription change of this node); an unanswered connection is dropped.
                    let sent =
                        tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(&watched)).await;
                    if matches!(sent, Ok(Ok(_))) {
                        return;
                    }
                    slot.conn = None;
                }
                // A new connection subscribes everything watched, these channels included.
                if this.connect(i, &mut slot).await {
                    return;
                }
                drop(slot);
                Self::reconnect(Arc::downgrade(&this), i).await;
            }
        });
        futures_util::future::join_all(subs).await;
    }

    /// Connects to node `i` again, with growing pauses, until it answers (the new connection
    /// subscribes every watched channel), another task connected it, nothing is watched any
    /// more (the next waiter connects) or the manager is gone. The pub/sub connection of a node
    /// that restarted, was cut off or did not answer at first thus comes back by itself while
    /// waiters listen: without it, their channels would stay deaf on that node until a fresh
    /// channel is watched, and a rolling restart could leave fewer than a quorum announcing.
    /// (Boxed: the reader that [`Self::connect`] starts calls it, which calls `connect`.)
    fn reconnect(this: Weak<Self>, i: usize) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let mut pause = RECONNECT_MIN;
            loop {
                tokio::time::sleep(pause).await;
                let Some(this) = this.upgrade() else { return };
                let mut slot = this.sinks[i].lock().await;
                if slot.conn.is_some()
                    || this
                        .channels
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .channels
                        .is_empty()
                {
                    return;
                }
                if this.connect(i, &mut slot).await {
                    return;
                }
                pause = (pause * 2).min(RECONNECT_MAX);
            }
        })
    }

    /// Those of `channels` that are watched now (`watched`), or no longer watched.
    fn select(&self, channels: &[String], watched: bool) -> Vec<String> {
        let ch = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .iter()
            .filter(|c| ch.channels.contains_key(*c) == watched)
            .cloned()
            .collect()
    }

    /// Makes a pub/sub connection to node `i` in `slot` (the node's, locked by the caller),
    /// subscribed to every watched channel, and starts its reader; whether it succeeded. When
    /// the connection ends, its reader clears the slot and connects again ([`Self::reconnect`]).
    async fn connect(self: &Arc<Self>, i: usize, slot: &mut Sink) -> bool {
        let node = &self.nodes[i];
        let Ok(Ok((mut sink, mut stream))) =
            tokio::time::timeout(CONNECT_TIMEOUT, node.subscriber()).await
        else {
            return false;
        };
        let watched: Vec<String> = {
            let ch = self.channels.lock().unwrap_or_else(|p| p.into_inner());
            ch.channels.keys().cloned().collect()
        };
        if !watched.is_empty()
            && !matches!(
                tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(&watched)).await,
                Ok(Ok(_))
            )
        {
            return false;
        }
        slot.generation += 1;
        slot.conn = Some(sink);
        let generation = slot.generation;
        let this = Arc::downgrade(self);
        let task = self.rt.spawn(async move {
            while let Some((channel, token)) = stream.next().await {
                let Some(notifier) = this.upgrade() else {
                    return;
                };
                notifier
                    .channels
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .announce(&channel, i, token, notifier.quorum);
            }
            // The connection ended (the node restarted, closed it or went away).
            {
                let Some(notifier) = this.upgrade() else {
                    return;
                };
                let mut slot = notifier.sinks[i].lock().await;
                if slot.generation != generation {
                    return; // already replaced
                }
                slot.conn = None;
            }
            Self::reconnect(this, i).await;
        });
        self.track(task.abort_handle());
        true
    }

    /// Stops the pub/sub readers (no I/O; the connections close when dropped).
    pub(crate) fn shutdown(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

impl Watch {
    /// Whether this fair waiter has the smallest (ticket, token) of this manager's fair waiters
    /// on every one of its channels: the one a release wakes, next in line unless a waiter of
    /// another process is ahead.
    pub(crate) fn leads(&self) -> bool {
        let mine = self.waiter.ticket.load(Ordering::Acquire);
        if mine == 0 {
            return false;
        }
        fn key(w: &Waiter) -> (u64, Option<&str>) {
            (
                w.ticket.load(Ordering::Acquire),
                w.token.get().map(String::as_str),
            )
        }
        let me = key(&self.waiter);
        let ch = self
            .notifier
            .channels
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.channels.iter().all(|c| {
            ch.channels.get(c).is_some_and(|channel| {
                channel
                    .waiters
                    .iter()
                    .filter(|w| w.id != self.waiter.id && w.ticket.load(Ordering::Acquire) > 0)
                    .all(|w| key(w) > me)
            })
        })
    }

    /// Counts a wake-up that ended a wait early.
    pub(crate) fn record_wakeup(&self) {
        self.notifier.wakeups.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut gone = Vec::new();
        {
            let mut ch = self
                .notifier
                .channels
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // Woken but gone before its next round: the next waiter gets the wake-up.
            let hand_on = self.waiter.woken.swap(false, Ordering::AcqRel) && !self.waiter.observer;
            let fair = self.waiter.ticket.load(Ordering::Acquire) > 0;
            for c in &self.channels {
                if let Some(channel) = ch.channels.get_mut(c) {
                    let was_first =
                        fair && channel.first_fair().is_some_and(|w| w.id == self.waiter.id);
                    channel.waiters.retain(|w| w.id != self.waiter.id);
                    if channel.waiters.is_empty() {
                        ch.channels.remove(c);
                        gone.push(c.clone());
                        continue;
                    }
                    if hand_on {
                        channel.wake_next(true);
                    }
                    if was_first && let Some(next) = channel.first_fair() {
                        next.nudge.notify_one();
                    }
                }
            }
        }
        if gone.is_empty() {
            return;
        }
        // Unsubscribing is a message to Redis: hand it to the runtime rather than doing I/O here.
        // Under each sink's lock, and only for channels still unwatched then (see
        // `subscribe_all`).
        let notifier = self.notifier.clone();
        self.notifier.rt.spawn(async move {
            for slot in &notifier.sinks {
                let mut slot = slot.lock().await;
                if let Some(s) = slot.conn.as_mut() {
                    let gone = notifier.select(&gone, false);
                    if !gone.is_empty() {
                        let _ = tokio::time::timeout(SUBSCRIBE_TIMEOUT, s.unsubscribe(&gone)).await;
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(id: u64) -> Arc<Waiter> {
        Arc::new(Waiter {
            id,
            woken: AtomicBool::new(false),
            ticket: AtomicU64::new(0),
            token: std::sync::OnceLock::new(),
            notify: Notify::new(),
            nudge: Notify::new(),
            observer: false,
        })
    }

    #[test]
    fn a_late_announcement_of_the_previous_release_does_not_cost_the_wake_up() {
        let w = waiter(1);
        let mut chs = Channels::default();
        chs.channels
            .entry("k".into())
            .or_default()
            .waiters
            .push(w.clone());
        let woken = || w.woken.swap(false, Ordering::AcqRel);
        // Release 1 reaches a quorum (3 of 5): one wake-up, at the third node.
        chs.announce("k", 0, "t1".into(), 3);
        chs.announce("k", 1, "t1".into(), 3);
        assert!(!woken(), "woken before a quorum deleted the key");
        chs.announce("k", 2, "t1".into(), 3);
        assert!(woken());
        // Release 2 starts; the slow nodes' announcements of release 1 arrive in between.
        chs.announce("k", 0, "t2".into(), 3);
        chs.announce("k", 3, "t1".into(), 3);
        chs.announce("k", 4, "t1".into(), 3);
        assert!(!woken(), "release 1 woke twice");
        chs.announce("k", 1, "t2".into(), 3);
        chs.announce("k", 2, "t2".into(), 3);
        assert!(woken(), "release 2 reached a quorum and woke nobody");
        // A node announcing the same release twice (a resubscription) counts once.
        chs.announce("k", 1, "t3".into(), 3);
        chs.announce("k", 1, "t3".into(), 3);
        chs.announce("k", 2, "t3".into(), 3);
        assert!(!woken());
    }

    #[test]
    fn a_release_in_this_process_wakes_the_fair_head_once_and_the_announcements_the_others() {
        let (fair, plain) = (waiter(1), waiter(2));
        fair.rank(7, "tok");
        let mut chs = Channels::default();
        let ch = chs.channels.entry("k".into()).or_default();
        ch.waiters.push(fair.clone());
        ch.waiters.push(plain.clone());
        let woken = |w: &Waiter| w.woken.swap(false, Ordering::AcqRel);
        // The releasing lock saw its quorum first: the fair head is woken at once, alone.
        chs.announce("k", 0, "t1".into(), 3);
        assert!(chs.released_here("k", "t1", 3));
        assert!(woken(&fair) && !woken(&plain));
        // The announcements' quorum wakes the plain waiter, not the fair head a second time
        // (a second wake-up would cost the queue a round that the nodes refuse).
        chs.announce("k", 1, "t1".into(), 3);
        chs.announce("k", 2, "t1".into(), 3);
        assert!(
            !woken(&fair),
            "the fair head was woken twice for one release"
        );
        assert!(woken(&plain));
        // Announcements first: the release's own quorum then wakes nobody again.
        for node in 0..3 {
            chs.announce("k", node, "t2".into(), 3);
        }
        assert!(woken(&fair) && woken(&plain));
        assert!(!chs.released_here("k", "t2", 3));
        assert!(!woken(&fair));
        // A channel nobody watches: nothing to wake.
        assert!(!chs.released_here("other", "t3", 3));
    }
}
