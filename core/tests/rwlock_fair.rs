//! Fair read-write locks against real nodes: fair readers and writers are served in the order
//! they queued (readers in a row together), a fair writer in line holds back readers that do not
//! wait in line, a fair waiter that gives up or is cancelled leaves the line (and a writer its
//! mark) on every node, a silent entry holds the line for no longer than its heartbeat, fair
//! plain locks of the same name share the line, and nothing is left behind.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cluster, SEC, cluster, config, ms, unique};
use ironlock::{AcquireOptions, Config, ErrorKind, Lock, LockManager};

fn fair_wait(wait: Duration) -> AcquireOptions {
    AcquireOptions::wait(wait).fair(true)
}

fn fair_once() -> AcquireOptions {
    AcquireOptions::try_once().fair(true)
}

/// A configuration whose fair waiters heartbeat often: the queue timeout is 2 × 100 ms.
fn fair_config(c: &Cluster) -> Config {
    config(c).retry_delay(ms(100)).retry_jitter(ms(20))
}

/// [`fair_config`] whose waiters keep their place through a stall of up to 2 s (a loaded
/// machine): for the tests of the line's order, where a waiter that missed its 200 ms heartbeat
/// would step out of the line and change the order for a reason that is not the one tested.
fn steady_config(c: &Cluster) -> Config {
    fair_config(c).queue_timeout(Some(2 * SEC))
}

fn int(reply: &str) -> i64 {
    reply.trim().trim_start_matches(':').parse().unwrap()
}

/// The number of live entries in `name`'s queue on node `i`.
fn queued(c: &Cluster, i: usize, name: &str) -> i64 {
    int(&c
        .command(i, &["ZCARD", &ironlock::scripts::queue_key(name)])
        .unwrap())
}

/// Waits (bounded) until `pred` holds on every node.
async fn on_every_node(c: &Cluster, what: &str, pred: impl Fn(usize) -> bool) {
    for _ in 0..300 {
        if (0..c.len()).all(&pred) {
            return;
        }
        tokio::time::sleep(ms(10)).await;
    }
    panic!("not on every node within 3 s: {what}");
}

/// Waits until no key of `name` but its fence counter (which never expires) is left on any
/// node: the queue's keys expire a queue timeout after the last waiter's last round.
async fn nothing_left(c: &Cluster, name: &str) {
    let (pattern, fence) = (format!("{name}*"), ironlock::scripts::fence_key(name));
    on_every_node(c, &format!("{name}: no key left"), |i| {
        let reply = c.command(i, &["KEYS", &pattern]).unwrap();
        reply
            .split("\r\n")
            .filter(|l| !l.is_empty() && !l.starts_with('*') && !l.starts_with('$'))
            .all(|k| k == fence)
    })
    .await;
}

/// `EXISTS` of `keys` on node `i`.
fn exists(c: &Cluster, i: usize, keys: &[String]) -> i64 {
    let mut args = vec!["EXISTS"];
    args.extend(keys.iter().map(String::as_str));
    int(&c.command(i, &args).unwrap())
}

/// The keys a waiter may leave beside `name`: its queue, heartbeats, readers and writer mark.
fn waiter_keys(name: &str) -> Vec<String> {
    vec![
        ironlock::scripts::queue_key(name),
        ironlock::scripts::beats_key(name),
        ironlock::scripts::readers_key(name),
        ironlock::scripts::writer_mark_key(name),
    ]
}

/// What one waiter does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Read,
    Write,
    Plain,
}

/// The grants and releases of the waiters, in order: `(name, true)` when granted, `(name,
/// false)` just before it releases (so a grant that a release made possible comes after it).
type Log = Arc<Mutex<Vec<(&'static str, bool)>>>;

async fn take(m: &LockManager, name: &str, side: Side, opts: AcquireOptions) -> Lock {
    let got = match side {
        Side::Read => m.rw_lock(name).read_with(5 * SEC, opts).await,
        Side::Write => m.rw_lock(name).write_with(5 * SEC, opts).await,
        Side::Plain => m.acquire_with(&[name], 5 * SEC, opts).await,
    };
    got.unwrap_or_else(|e| panic!("{side:?}: {e}"))
}

/// Starts a fair waiter in its own manager, which notes its grant, holds `hold` and releases;
/// returns once it is in line on every node (`in_line` entries in the queue).
async fn queue_up(
    c: &Cluster,
    name: &str,
    who: (&'static str, Side),
    hold: Duration,
    in_line: i64,
    log: &Log,
) -> tokio::task::JoinHandle<Lock> {
    let m = LockManager::new(steady_config(c)).await.unwrap();
    let (name_owned, log) = (name.to_owned(), log.clone());
    let task = tokio::spawn(async move {
        let lock = take(&m, &name_owned, who.1, fair_wait(20 * SEC).fencing(true)).await;
        log.lock().unwrap().push((who.0, true));
        tokio::time::sleep(hold).await;
        log.lock().unwrap().push((who.0, false));
        assert!(lock.release().await.held, "{}", who.0);
        lock
    });
    on_every_node(c, &format!("{} in line", who.0), |i| {
        queued(c, i, name) == in_line
    })
    .await;
    task
}

/// W1 holds; R1, W2, R2, R3 queue in that order. On W1's release R1 is admitted; W2 waits until
/// R1 releases; R2 and R3 are admitted only after W2, and then together. Fences follow the
/// order of the grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_readers_and_writers_are_served_in_the_order_they_queued() {
    let c = cluster(3);
    let m = LockManager::new(steady_config(&c)).await.unwrap();
    let name = unique("rwfair");
    let w1 = take(&m, &name, Side::Write, fair_once().fencing(true)).await;
    // Held however long the waiters take to queue up on a loaded machine.
    let kept = w1.keep_alive();
    let log: Log = Arc::default();
    let hold = ms(300);
    let r1 = queue_up(&c, &name, ("R1", Side::Read), hold, 1, &log).await;
    let w2 = queue_up(&c, &name, ("W2", Side::Write), hold, 2, &log).await;
    // R2 and R3 hold long enough for the other's grant to come in before either leaves.
    let r2 = queue_up(&c, &name, ("R2", Side::Read), 3 * hold, 3, &log).await;
    let r3 = queue_up(&c, &name, ("R3", Side::Read), 3 * hold, 4, &log).await;
    // The readers' entries are told apart from the writer's.
    let line = c
        .command(
            0,
            &["ZRANGE", &ironlock::scripts::queue_key(&name), "0", "-1"],
        )
        .unwrap();
    assert_eq!(line.matches(" r\r\n").count(), 3, "{line}");
    assert!(log.lock().unwrap().is_empty(), "nobody passed the holder");
    tokio::time::sleep(ms(300)).await;
    assert!(log.lock().unwrap().is_empty(), "nobody passed the holder");
    kept.stop();
    log.lock().unwrap().push(("W1", false));
    assert!(w1.release().await.held);
    let locks: Vec<Lock> = {
        let mut v = Vec::new();
        for t in [r1, w2, r2, r3] {
            v.push(tokio::time::timeout(30 * SEC, t).await.unwrap().unwrap());
        }
        v
    };
    let log = log.lock().unwrap().clone();
    let at = |e: (&str, bool)| log.iter().position(|x| *x == e).unwrap();
    assert_eq!(
        log[..5],
        [
            ("W1", false),
            ("R1", true),
            ("R1", false),
            ("W2", true),
            ("W2", false)
        ],
        "{log:?}"
    );
    // R2 and R3 together: both granted before either released.
    assert!(at(("R2", true)) < at(("R3", false)), "{log:?}");
    assert!(at(("R3", true)) < at(("R2", false)), "{log:?}");
    let fence = |l: &Lock| l.fence().unwrap();
    assert!(fence(&w1) < fence(&locks[0]) && fence(&locks[0]) < fence(&locks[1]));
    assert!(fence(&locks[1]) < fence(&locks[2]).min(fence(&locks[3])));
    nothing_left(&c, &name).await;
}

/// A reader holds; a fair writer waits in line. Readers that do not wait in line are held back
/// by its mark, fair readers by its place; the writer is granted when the reader leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_writer_in_line_holds_back_new_readers_fair_or_not() {
    let c = cluster(3);
    let m = LockManager::new(steady_config(&c)).await.unwrap();
    let name = unique("rwfair");
    let rw = m.rw_lock(name.clone());
    let r0 = rw.read(5 * SEC).await.unwrap();
    let log: Log = Arc::default();
    let w = queue_up(&c, &name, ("W", Side::Write), ms(50), 1, &log).await;
    on_every_node(&c, "the writer's mark", |i| {
        exists(&c, i, &[ironlock::scripts::writer_mark_key(&name)]) == 1
    })
    .await;
    let e = rw.read_with(5 * SEC, AcquireOptions::try_once()).await;
    let e = e.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    assert!(e.message().contains("a writer is waiting for it"), "{e}");
    let e = rw.read_with(5 * SEC, fair_once()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    assert!(
        e.message().contains("earlier fair waiters are in line"),
        "{e}"
    );
    // The refused fair reader left the line: only the writer waits.
    for i in 0..3 {
        assert_eq!(queued(&c, i, &name), 1, "node {i}");
    }
    // The manager's fair setting makes a read wait in line too.
    let fair_m = LockManager::new(fair_config(&c).fair(true).retry_count(0))
        .await
        .unwrap();
    let e = fair_m.rw_lock(&name).read(5 * SEC).await.unwrap_err();
    assert!(
        e.message().contains("earlier fair waiters are in line"),
        "{e}"
    );
    assert!(log.lock().unwrap().is_empty(), "readers hold");
    assert!(r0.release().await.held);
    let w = tokio::time::timeout(10 * SEC, w).await.unwrap().unwrap();
    assert_eq!(*log.lock().unwrap(), [("W", true), ("W", false)]);
    assert!(w.fence().is_some());
    nothing_left(&c, &name).await;
}

/// A fair reader and a fair writer that give up at their deadline, and two that are cancelled
/// while in line, leave no entry, no read and no mark behind on any node; the holder keeps
/// holding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_readers_and_writers_that_give_up_or_are_cancelled_leave_the_line() {
    let c = cluster(3);
    // A 10 s queue timeout: a mark or an entry that expired instead of being taken away would
    // still be there when the test looks.
    let m = LockManager::new(fair_config(&c).queue_timeout(Some(10 * SEC)))
        .await
        .unwrap();
    let name = unique("rwfair");
    let rw = m.rw_lock(name.clone());
    let holder = m.acquire(&[&name], 10 * SEC).await.unwrap();
    for write in [false, true] {
        let opts = fair_wait(ms(350));
        let e = if write {
            rw.write_with(SEC, opts).await.unwrap_err()
        } else {
            rw.read_with(SEC, opts).await.unwrap_err()
        };
        assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
        on_every_node(&c, "gave up: no waiter key left", |i| {
            exists(&c, i, &waiter_keys(&name)) == 0
        })
        .await;
    }
    for write in [false, true] {
        let rw = rw.clone();
        let task = tokio::spawn(async move {
            let opts = fair_wait(20 * SEC);
            if write {
                rw.write_with(SEC, opts).await.map(|_| ())
            } else {
                rw.read_with(SEC, opts).await.map(|_| ())
            }
        });
        on_every_node(&c, "in line", |i| queued(&c, i, &name) == 1).await;
        if write {
            on_every_node(&c, "the writer's mark", |i| {
                exists(&c, i, &[ironlock::scripts::writer_mark_key(&name)]) == 1
            })
            .await;
        }
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        on_every_node(&c, "cancelled: no waiter key left", |i| {
            exists(&c, i, &waiter_keys(&name)) == 0
        })
        .await;
    }
    for i in 0..3 {
        let v = c.command(i, &["GET", &name]).unwrap();
        assert!(v.contains(holder.token()), "node {i}: {v}");
    }
    assert!(holder.release().await.held);
    // The ticket counter lives a queue timeout after the last waiter joined; nothing else is left.
    let mut all = waiter_keys(&name);
    all.push(name.clone());
    on_every_node(&c, "no key but the ticket counter", |i| {
        exists(&c, i, &all) == 0
    })
    .await;
}

/// Puts the entry `entry` in `name`'s line on every node with ticket `ticket` and a heartbeat
/// that runs out `beat_ms` from now (node time): what a waiter that went silent leaves.
fn seat_ghost(c: &Cluster, name: &str, entry: &str, ticket: u64, beat_ms: u64) {
    let (queue, beats) = (
        ironlock::scripts::queue_key(name),
        ironlock::scripts::beats_key(name),
    );
    for i in 0..c.len() {
        c.command(i, &["ZADD", &queue, &ticket.to_string(), entry])
            .unwrap();
        let beat = "local t = redis.call('TIME') \
                    return redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000) + ARGV[1], ARGV[2])";
        c.command(i, &["EVAL", beat, "1", &beats, &beat_ms.to_string(), entry])
            .unwrap();
    }
}

/// Waiters that went silent: a reader's entry ahead holds back a fair writer but not a fair
/// reader; a writer's entry holds back fair readers. Each holds the line only until its
/// heartbeat runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_waiter_holds_the_line_only_until_its_heartbeat_runs_out() {
    let c = cluster(3);
    let m = LockManager::new(fair_config(&c)).await.unwrap();
    let name = unique("rwfair");
    let rw = m.rw_lock(name.clone());
    let beat = 800u64;
    let take = |write: bool, opts: AcquireOptions| {
        let rw = rw.clone();
        async move {
            if write {
                rw.write_with(5 * SEC, opts).await
            } else {
                rw.read_with(5 * SEC, opts).await
            }
        }
    };
    // (the silent entry, whether the waiter behind it writes)
    let reader = ironlock::scripts::reader_entry("ghost");
    for (ghost, write) in [(reader.as_str(), true), ("ghost", false)] {
        seat_ghost(&c, &name, ghost, 1, beat);
        let seated = Instant::now();
        if write {
            let r = take(false, fair_once())
                .await
                .expect("a reader waiting ahead does not hold a reader back");
            assert!(r.release().await.held);
        }
        let e = take(write, fair_once()).await.unwrap_err();
        assert!(
            e.message().contains("earlier fair waiters are in line"),
            "{ghost:?}: {e}"
        );
        let l = take(write, fair_wait(5 * SEC)).await.unwrap();
        let waited = seated.elapsed();
        assert!(
            waited >= ms(beat - 50) && waited < ms(beat + 1500),
            "granted {waited:?} after {ghost:?} went silent"
        );
        assert!(l.release().await.held);
    }
    nothing_left(&c, &name).await;
}

/// Fair plain locks and fair readers and writers of one name wait in one line: a fair reader
/// behind a fair plain lock waits for it, a fair plain lock behind readers waits for them, and
/// each excludes the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_plain_locks_share_the_line_with_fair_readers_and_writers() {
    let c = cluster(3);
    let m = LockManager::new(steady_config(&c)).await.unwrap();
    let name = unique("rwfair");
    let rw = m.rw_lock(name.clone());
    let w0 = rw.write_with(5 * SEC, fair_once()).await.unwrap();
    let log: Log = Arc::default();
    let p = queue_up(&c, &name, ("P", Side::Plain), ms(200), 1, &log).await;
    let r = queue_up(&c, &name, ("R", Side::Read), ms(200), 2, &log).await;
    let w = queue_up(&c, &name, ("W", Side::Write), ms(200), 3, &log).await;
    let q = queue_up(&c, &name, ("Q", Side::Plain), ms(200), 4, &log).await;
    log.lock().unwrap().push(("W0", false));
    assert!(w0.release().await.held);
    for t in [p, r, w, q] {
        tokio::time::timeout(30 * SEC, t).await.unwrap().unwrap();
    }
    let names: Vec<(&str, bool)> = log.lock().unwrap().clone();
    assert_eq!(
        names,
        [
            ("W0", false),
            ("P", true),
            ("P", false),
            ("R", true),
            ("R", false),
            ("W", true),
            ("W", false),
            ("Q", true),
            ("Q", false)
        ]
    );
    nothing_left(&c, &name).await;
}
