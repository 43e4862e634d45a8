//! Fair (FIFO) acquisition across the quorum (SPEC §10) against real nodes: grants follow the
//! order in which waiters queued, a waiter that gives up or is cancelled leaves no queue entry,
//! a silent entry drops out after the queue timeout, a release wakes the head (and a hand-over
//! without a wake-up costs the next waiter one poll), fair and plain locks exclude each other,
//! and fair semaphores admit in order.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cluster, SEC, cluster, config, ms, unique};
use ironlock::{AcquireOptions, Config, ErrorKind, LockManager};

fn fair_wait(wait: Duration) -> AcquireOptions {
    AcquireOptions::wait(wait).fair(true)
}

/// The number of live entries in `key`'s queue on node `i`.
fn queued(c: &Cluster, i: usize, key: &str) -> usize {
    let reply = c
        .command(i, &["ZCARD", &ironlock::scripts::queue_key(key)])
        .unwrap();
    reply.trim().trim_start_matches(':').parse().unwrap()
}

/// Waits (bounded) until `pred` holds on every node.
async fn on_every_node(n: usize, what: &str, pred: impl Fn(usize) -> bool) {
    for _ in 0..200 {
        if (0..n).all(&pred) {
            return;
        }
        tokio::time::sleep(ms(10)).await;
    }
    panic!("not on every node within 2 s: {what}");
}

/// Fair waiters that queued one after another, each with its own manager.
struct Line {
    order: Arc<Mutex<Vec<usize>>>,
    waiters: Vec<tokio::task::JoinHandle<()>>,
}

impl Line {
    /// Starts `n` waiters on `resource` one after another, each once the one before it is in
    /// line on every node (`queue`'s key: the lock or semaphore key); each acquires with
    /// `take(its manager, resource)`, notes its turn, holds `hold` and releases.
    async fn queue_up<F, Fut>(
        c: &Cluster,
        cfg: &Config,
        (resource, queue): (&str, &str),
        n: usize,
        hold: Duration,
        take: F,
    ) -> Line
    where
        F: Fn(LockManager, String) -> Fut,
        Fut: std::future::Future<Output = ironlock::Result<ironlock::Lock>> + Send + 'static,
    {
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for w in 0..n {
            let m = LockManager::new(cfg.clone()).await.unwrap();
            let (attempt, order) = (take(m, resource.to_owned()), order.clone());
            waiters.push(tokio::spawn(async move {
                let lock = attempt.await.unwrap_or_else(|e| panic!("waiter {w}: {e}"));
                order.lock().unwrap().push(w);
                tokio::time::sleep(hold).await;
                assert!(lock.release().await.held, "waiter {w}");
            }));
            on_every_node(3, &format!("waiter {w} in line"), |i| {
                queued(c, i, queue) == w + 1
            })
            .await;
        }
        Line { order, waiters }
    }

    /// The waiters' numbers in the order they were granted, once every one has finished.
    async fn grants(self) -> Vec<usize> {
        for w in self.waiters {
            tokio::time::timeout(30 * SEC, w).await.unwrap().unwrap();
        }
        self.order.lock().unwrap().clone()
    }
}

/// Asserts (bounded wait) that no queue or heartbeat key of `key` is left on any node.
async fn no_queue_left(c: &Cluster, n: usize, key: &str) {
    on_every_node(n, &format!("{key}: queue keys gone"), |i| {
        c.command(
            i,
            &[
                "EXISTS",
                &ironlock::scripts::queue_key(key),
                &ironlock::scripts::beats_key(key),
            ],
        )
        .unwrap()
        .starts_with(":0")
    })
    .await;
}

/// Eight waiters, each in its own manager, queue one after another behind a holder (each starts
/// once the one before it is in line on every node); the grants follow that order exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_follow_the_order_in_which_eight_waiters_queued() {
    let c = cluster(3);
    let cfg = config(&c).retry_delay(ms(100)).retry_jitter(ms(20));
    let name = unique("fair");
    let holder_m = LockManager::new(cfg.clone()).await.unwrap();
    let holder = holder_m.acquire(&[&name], 10 * SEC).await.unwrap();
    let line = Line::queue_up(&c, &cfg, (&name, &name), 8, ms(15), |m, name| async move {
        m.acquire_with(&[&name], 5 * SEC, fair_wait(20 * SEC)).await
    })
    .await;
    assert!(holder.release().await.held);
    assert_eq!(line.grants().await, (0..8).collect::<Vec<_>>());
    no_queue_left(&c, 3, &name).await;
}

/// A fair waiter that times out, and one whose acquire is dropped (cancelled), leave no queue
/// entry and no lock key on any node; the holder is untouched.
#[tokio::test]
async fn a_waiter_that_gives_up_or_is_cancelled_leaves_no_entry() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_delay(ms(50)))
        .await
        .unwrap();
    let name = unique("fair");
    let holder = m.acquire(&[&name], 10 * SEC).await.unwrap();
    let e = m
        .acquire_with(&[&name], SEC, fair_wait(ms(300)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    for i in 0..3 {
        assert_eq!(queued(&c, i, &name), 0, "node {i} after a timeout");
    }
    let waiter = {
        let m = m.clone();
        let name = name.clone();
        tokio::spawn(async move {
            m.acquire_with(&[&name], SEC, fair_wait(20 * SEC))
                .await
                .map(|_| ())
        })
    };
    on_every_node(3, "the waiter in line", |i| queued(&c, i, &name) == 1).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    no_queue_left(&c, 3, &name).await;
    // The holder still holds, alone.
    for i in 0..3 {
        let v = c.command(i, &["GET", &name]).unwrap();
        assert!(v.contains(holder.token()), "node {i}: {v}");
    }
    assert!(holder.release().await.held);
}

/// Puts a waiter "ghost" at the head of `name`'s queue on every node (ticket 1), its heartbeat
/// running out at `expiry` (unix ms): a waiter of another process that went silent.
fn seat_ghost(c: &Cluster, name: &str, expiry: u64) {
    for i in 0..3 {
        c.command(
            i,
            &["ZADD", &ironlock::scripts::queue_key(name), "1", "ghost"],
        )
        .unwrap();
        let beats = ironlock::scripts::beats_key(name);
        c.command(i, &["ZADD", &beats, &expiry.to_string(), "ghost"])
            .unwrap();
    }
}

/// The entry of a waiter that stopped its heartbeat (here: written by hand, as a crashed
/// waiter's would be) stops the queue for at most the queue timeout; a waiter behind it is
/// then granted. Without the timeout it would wait forever.
#[tokio::test]
async fn a_silent_head_drops_out_after_the_queue_timeout() {
    let c = cluster(3);
    let timeout = ms(600);
    let m = LockManager::new(
        config(&c)
            .retry_delay(ms(50))
            .retry_jitter(ms(10))
            .queue_timeout(Some(timeout)),
    )
    .await
    .unwrap();
    let name = unique("fair");
    let ghost_expiry = unix_ms() + 60_000; // a heartbeat far ahead: refreshed "just now"
    seat_ghost(&c, &name, unix_ms() + timeout.as_millis() as u64);
    let started = Instant::now();
    let lock = m
        .acquire_with(&[&name], SEC, fair_wait(10 * SEC))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= timeout - ms(150),
        "granted before the ghost's heartbeat ran out: {waited:?}"
    );
    assert!(
        waited < timeout + SEC,
        "the silent head held the queue for {waited:?}"
    );
    assert!(lock.release().await.held);
    // A ghost whose heartbeat keeps being refreshed holds the line: the queue is respected.
    seat_ghost(&c, &name, ghost_expiry);
    let e = m
        .acquire_with(&[&name], SEC, fair_wait(ms(400)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    assert!(
        m.acquire(&[&name], SEC).await.is_ok(),
        "a plain acquire ignores the queue"
    );
}

/// A release wakes the head at once (its timed retry is 10 s away).
#[tokio::test]
async fn a_release_wakes_the_head() {
    let c = cluster(3);
    let m = LockManager::new(
        config(&c)
            .retry_delay(10 * SEC)
            .queue_timeout(Some(60 * SEC)),
    )
    .await
    .unwrap();
    let name = unique("fair");
    let holder = m.acquire(&[&name], 10 * SEC).await.unwrap();
    let waiter = {
        let (m, name) = (m.clone(), name.clone());
        tokio::spawn(async move {
            m.acquire_with(&[&name], SEC, fair_wait(30 * SEC))
                .await
                .map(|l| (Instant::now(), l))
        })
    };
    on_every_node(3, "the waiter in line", |i| queued(&c, i, &name) == 1).await;
    let released_at = Instant::now();
    assert!(holder.release().await.held);
    let (granted_at, lock) = waiter.await.unwrap().unwrap();
    assert!(
        granted_at - released_at < 2 * SEC,
        "not woken: {:?}",
        granted_at - released_at
    );
    assert!(m.stats().wakeups >= 1);
    assert!(lock.release().await.held);
    no_queue_left(&c, 3, &name).await;
}

/// A fair lock and a plain lock on the same resource exclude each other (the same key), and the
/// manager's `fair` setting makes every acquire fair unless it says otherwise.
#[tokio::test]
async fn fair_and_plain_locks_exclude_each_other() {
    let c = cluster(3);
    let fair_m = LockManager::new(config(&c).fair(true).retry_count(0))
        .await
        .unwrap();
    let plain_m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let name = unique("fair");
    let fair = fair_m.acquire(&[&name], 5 * SEC).await.unwrap();
    let e = plain_m.acquire(&[&name], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    assert!(fair.release().await.held);
    let plain = plain_m.acquire(&[&name], 5 * SEC).await.unwrap();
    let e = fair_m.acquire(&[&name], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    // The fair manager's try-lock left nothing in line; an explicit non-fair acquire is plain.
    for i in 0..3 {
        assert_eq!(queued(&c, i, &name), 0, "node {i}");
    }
    let e = fair_m
        .acquire_with(&[&name], SEC, AcquireOptions::try_once().fair(false))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    assert!(plain.release().await.held);
    // Several resources, fencing: the fair path takes them all or none, with a fence.
    let other = unique("fair");
    let both = fair_m
        .acquire_with(
            &[&name, &other],
            SEC,
            AcquireOptions::default().fencing(true),
        )
        .await
        .unwrap();
    assert!(both.fence().is_some());
    assert_eq!(
        plain_m.acquire(&[&other], SEC).await.unwrap_err().kind(),
        ErrorKind::Contended
    );
    assert!(both.release().await.held);
}

/// A fair semaphore (limit 2) admits its waiters in the order they queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_semaphore_admits_in_order() {
    let c = cluster(3);
    let cfg = config(&c).retry_delay(ms(100)).retry_jitter(ms(20));
    let name = unique("fsem");
    let key = ironlock::scripts::semaphore_key(&name);
    let m = LockManager::new(cfg.clone()).await.unwrap();
    let sem = m.semaphore(name.clone(), 2);
    let a = sem.acquire(10 * SEC).await.unwrap();
    let b = sem.acquire(10 * SEC).await.unwrap();
    // Permits free up one at a time, 150 ms apart, and each is held 300 ms: one grant at a time.
    let line = Line::queue_up(&c, &cfg, (&name, &key), 4, ms(300), |m, name| async move {
        m.semaphore(name, 2)
            .acquire_with(5 * SEC, fair_wait(20 * SEC))
            .await
    })
    .await;
    assert!(a.release().await.held);
    tokio::time::sleep(ms(150)).await;
    assert!(b.release().await.held);
    assert_eq!(line.grants().await, (0..4).collect::<Vec<_>>());
    no_queue_left(&c, 3, &key).await;
}

/// `queue_timeout` is validated and named.
#[tokio::test]
async fn a_bad_queue_timeout_names_the_setting() {
    for bad in [Duration::ZERO, Duration::from_secs(86_401)] {
        let e = Config::new(["redis://127.0.0.1:1"])
            .queue_timeout(Some(bad))
            .check()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().starts_with("queue_timeout: "), "{e}");
    }
}

/// A fair round that loses waits a little for its outstanding replies (at least 1 ms, at most the
/// node timeout): with a node timeout below that minimum the wait is the node timeout, and the
/// refused waiter gets its error (no panic), leaving no queue entry behind.
#[tokio::test]
async fn a_lost_fair_round_with_a_sub_millisecond_node_timeout_is_refused_cleanly() {
    let c = cluster(3);
    let name = unique("fairtiny");
    let holder_m = LockManager::new(config(&c)).await.unwrap();
    let holder = holder_m.acquire(&[&name], 10 * SEC).await.unwrap();
    let tiny = LockManager::new(config(&c).node_timeout(Duration::from_micros(900)))
        .await
        .unwrap();
    // Some rounds may time out whole at 900 µs; the ones the nodes refuse are the case.
    let mut refused = 0;
    for _ in 0..50 {
        let options = AcquireOptions::try_once().fair(true);
        let e = tiny.acquire_with(&[&name], SEC, options).await.unwrap_err();
        match e.kind() {
            ErrorKind::Contended => refused += 1,
            ErrorKind::Unavailable => {}
            _ => panic!("{e}"),
        }
    }
    assert!(
        refused > 0,
        "no round was refused in time: nothing was tested"
    );
    no_queue_left(&c, 3, &name).await;
    assert!(holder.release().await.held);
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A hand-over that sends no wake-up (the holder's lock expires instead of being released)
/// costs the next waiter about one next-in-line poll, not the rest of the retry pause it chose
/// while another waiter of its process was ahead of it (here 2 s).
#[tokio::test]
async fn the_next_waiter_polls_once_first_in_line_even_without_a_wake_up() {
    let c = cluster(3);
    let m = LockManager::new(
        config(&c)
            .retry_delay(2 * SEC)
            .retry_jitter(ms(0))
            .queue_timeout(Some(60 * SEC)),
    )
    .await
    .unwrap();
    let name = unique("fair");
    // Another process holds the key; its lock will expire, not be released.
    for i in 0..3 {
        c.command(i, &["SET", &name, "elsewhere", "PX", "400"])
            .unwrap();
    }
    let take = |m: &LockManager| {
        let (m, name) = (m.clone(), name.clone());
        tokio::spawn(async move {
            let lock = m
                .acquire_with(&[&name], ms(300), fair_wait(10 * SEC))
                .await
                .unwrap();
            // Never released: it expires after 300 ms and announces nothing.
            drop(lock);
            Instant::now()
        })
    };
    let first = take(&m);
    on_every_node(3, "the first waiter in line", |i| queued(&c, i, &name) == 1).await;
    let second = take(&m);
    on_every_node(3, "both waiters in line", |i| queued(&c, i, &name) == 2).await;
    let granted_first = first.await.unwrap();
    let granted_second = second.await.unwrap();
    let gap = granted_second - granted_first;
    assert!(
        gap >= ms(250),
        "the second waiter was granted {gap:?} after the first, before its lock expired"
    );
    assert!(
        gap < ms(900),
        "the second waiter slept {gap:?} after the first was granted (its retry pause)"
    );
}

/// Waiters of one resource may run with different queue timeouts (it defaults to twice the
/// retry delay): one with a short timeout must not make the queue expire before the heartbeat
/// of a waiter with a long one runs out. The long-timeout waiter here is a "ghost" written by
/// hand, as a waiter of a process that is paused between two of its rounds leaves it: its
/// entry and heartbeat good for a minute, the queue's keys for 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_queue_timeout_does_not_shorten_the_line_of_others() {
    let c = cluster(3);
    let holder = LockManager::new(config(&c)).await.unwrap();
    let hasty = LockManager::new(
        config(&c)
            .retry_delay(ms(20))
            .retry_jitter(ms(0))
            .queue_timeout(Some(ms(100))),
    )
    .await
    .unwrap();
    let name = unique("fair-qt");
    let lock = holder.acquire(&[&name], 10 * SEC).await.unwrap();
    seat_ghost(&c, &name, unix_ms() + 60_000);
    for i in 0..3 {
        for key in ["queue", "beats"] {
            c.command(
                i,
                &[
                    "PEXPIRE",
                    &format!("{name}{{{name}}}:ironlock:{key}"),
                    "10000",
                ],
            )
            .unwrap();
        }
    }
    let e = hasty
        .acquire_with(&[&name], SEC, fair_wait(ms(300)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    // The hasty waiter left; 100 ms from its last round would have run out by now.
    tokio::time::sleep(ms(400)).await;
    for i in 0..3 {
        assert_eq!(
            queued(&c, i, &name),
            1,
            "node {i}: the ghost lost its place"
        );
    }
    assert!(lock.release().await.held);
}
