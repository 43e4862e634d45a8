//! Many locks held at once under auto-extension, against real nodes: their extensions reach each
//! node in batches (one script call for the locks falling due together, not one per lock), none
//! is lost while the nodes are up, and when the nodes die every one of them is told it is lost
//! before its keys could have expired.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, SEC, cluster, manager, ms, unique};
use futures_util::future::join_all;
use ironlock::{KeepAlive, Lock, LockManager, Vote};

/// The tests of this file one at a time: each holds thousands of locks, and two at once on a
/// 2-core machine measure the machine, not the library.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `EVALSHA` calls node `i` has served.
fn evalsha_calls(c: &Cluster, i: usize) -> u64 {
    let stats = c.command(i, &["INFO", "commandstats"]).expect("INFO");
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `k` locks on distinct resources, acquired 500 at a time, each kept alive from its grant on.
async fn hold(m: &LockManager, k: usize, ttl: Duration) -> Vec<(Lock, KeepAlive)> {
    let prefix = unique("held");
    let mut held = Vec::with_capacity(k);
    for start in (0..k).step_by(500) {
        let names: Vec<String> = (start..(start + 500).min(k))
            .map(|i| format!("{prefix}:{i}"))
            .collect();
        let locks = join_all(names.iter().map(|r| async move {
            let lock = m
                .acquire(std::slice::from_ref(r), ttl)
                .await
                .expect("granted");
            let keeper = lock.keep_alive();
            (lock, keeper)
        }))
        .await;
        held.extend(locks);
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_locks_are_extended_in_one_call_per_node_for_the_locks_due_together() {
    let _one = ONE_AT_A_TIME.lock().await;
    let c = cluster(3);
    let m = manager(&c).await;
    let held = hold(&m, 2_000, 3 * SEC).await;
    let calls_before: Vec<u64> = (0..3).map(|i| evalsha_calls(&c, i)).collect();
    let extensions_before: u64 = held.iter().map(|(l, _)| u64::from(l.extensions())).sum();
    tokio::time::sleep(ms(4_500)).await;
    let extensions: u64 = held
        .iter()
        .map(|(l, _)| u64::from(l.extensions()))
        .sum::<u64>()
        - extensions_before;
    for (lock, _) in &held {
        assert!(lock.is_valid() && !lock.is_lost(), "{lock:?}");
        assert!(
            lock.extensions() >= 2,
            "extended every ~2 s: {lock:?} after {} extensions: {:?}",
            lock.extensions(),
            lock.report()
        );
    }
    // Without batching each extension is one EVALSHA per node; the locks were acquired in
    // bursts of 500, so their extensions fall due together, many to a call.
    for (i, before) in calls_before.iter().enumerate() {
        let calls = evalsha_calls(&c, i) - before;
        assert!(
            calls * 5 < extensions,
            "node {i}: {calls} script calls for {extensions} extensions"
        );
    }
    for chunk in held.chunks(200) {
        let released = join_all(chunk.iter().map(|(l, _)| l.release())).await;
        for (r, (l, _)) in released.iter().zip(chunk) {
            assert!(r.held, "{l:?}: {:?}", r.report);
        }
    }
    // A release returns once a quorum deleted the keys; the deletes still on their way to the
    // third node are waited for here, as a process about to exit would.
    m.flush().await;
    for i in 0..3 {
        let keys = c.command(i, &["KEYS", "held*"]).expect("KEYS");
        assert!(!keys.contains("held"), "node {i} keeps {keys}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_held_lock_is_told_lost_before_its_keys_can_expire_when_the_nodes_die() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut c = cluster(3);
    let m = manager(&c).await;
    let ttl = 8 * SEC;
    // The client's lateness budget: the drift allowance the deadline keeps short of the ttl.
    let drift = ttl.mul_f64(0.01) + ms(2);
    let held = hold(&m, 10_000, ttl).await;
    // Long enough for every lock to have been auto-extended once (due ttl / 3 before its
    // deadline): the extensions are in step, and so are the deadlines.
    tokio::time::sleep(ms(6_000)).await;
    for (lock, _) in &held {
        assert!(
            lock.extensions() >= 1 && lock.is_valid(),
            "{lock:?} after {} extensions: {:?}",
            lock.extensions(),
            lock.report()
        );
    }
    c.kill(0).expect("kill");
    c.kill(1).expect("kill");
    let killed = Instant::now();
    let told = join_all(held.iter().map(|(lock, _)| async move {
        tokio::time::timeout(ttl + 5 * SEC, lock.lost())
            .await
            .expect("told within ttl + 5 s");
        let at = Instant::now();
        (at, lock.deadline())
    }))
    .await;
    let mut lateness = Vec::with_capacity(told.len());
    for ((lock, _), (at, deadline)) in held.iter().zip(&told) {
        assert!(lock.is_lost() && !lock.is_valid(), "{lock:?}");
        assert!(*deadline > killed, "valid when the nodes died");
        lateness.push(at.saturating_duration_since(*deadline));
    }
    lateness.sort();
    let late = lateness[lateness.len() - 1];
    eprintln!(
        "told after the deadline: p50 {:?}, p99 {:?}, max {late:?}",
        lateness[lateness.len() / 2],
        lateness[lateness.len() * 99 / 100]
    );
    assert!(
        late <= drift,
        "a lock was told {late:?} after its deadline, past the {drift:?} before its keys may expire"
    );
    eprintln!("10,000 locks told lost at most {late:?} after their deadlines");
}

/// A lock whose keys one node of three lost is still extended (two nodes say "extended"; the
/// batch hands it to its own extension, which hands it back each time); a stopped keep-alive
/// extends no more; a released lock is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_locks_survive_a_node_that_lost_their_keys_and_stop_when_told() {
    let _one = ONE_AT_A_TIME.lock().await;
    let c = cluster(3);
    let m = manager(&c).await;
    let ttl = ms(600);
    let r = unique("kept");
    let names = [format!("{r}:a"), format!("{r}:b"), format!("{r}:c")];
    let mut locks = Vec::new();
    let mut keepers = Vec::new();
    for name in &names {
        let lock = m
            .acquire(std::slice::from_ref(name), ttl)
            .await
            .expect("granted");
        keepers.push(Some(lock.keep_alive()));
        locks.push(lock);
    }
    // d: two keys (its extensions take the batch script's general form).
    let d_names = [format!("{r}:d1"), format!("{r}:d2")];
    let d = m.acquire(&d_names, ttl).await.expect("granted");
    let _keep_d = d.keep_alive();
    // Node 0 loses lock a's key: every later extension of a finds 2 of 3 nodes.
    c.command(0, &["DEL", &names[0]]).expect("DEL");
    tokio::time::sleep(ms(1_000)).await;
    let (a, b, c_) = (&locks[0], &locks[1], &locks[2]);
    for lock in [a, b, c_, &d] {
        assert!(
            lock.is_valid() && lock.extensions() >= 2,
            "{lock:?}: {:?}",
            lock.report()
        );
    }
    assert_eq!(
        a.report().count(ironlock::Vote::For),
        2,
        "a's last extension: {:?}",
        a.report()
    );
    assert_eq!(b.report().count(ironlock::Vote::For), 3, "{:?}", b.report());
    // b: keep-alive stopped; c: released.
    keepers[1].take().expect("b's keep-alive").stop();
    let b_extensions = b.extensions();
    assert!(c_.release().await.held);
    let c_extensions = c_.extensions();
    tokio::time::sleep(ms(1_200)).await;
    assert!(
        a.is_valid() && a.extensions() >= 4,
        "{a:?}: {:?}",
        a.report()
    );
    assert_eq!(
        b.extensions(),
        b_extensions,
        "extended after its keep-alive stopped"
    );
    assert!(!b.is_valid(), "{b:?}");
    assert_eq!(c_.extensions(), c_extensions, "extended after its release");
    for i in 0..3 {
        assert_eq!(
            c.command(i, &["EXISTS", &names[1], &names[2]])
                .expect("EXISTS"),
            ":0\r\n",
            "node {i}: b expired, c released"
        );
    }
    assert!(
        d.is_valid() && d.extensions() >= 4,
        "{d:?}: {:?}",
        d.report()
    );
    assert_eq!(d.report().count(ironlock::Vote::For), 3, "{:?}", d.report());
    assert!(a.release().await.held);
    assert!(d.release().await.held);
}

/// The keeper counts a node's "extended" only when the node's vote counts: a lock granted
/// while node 2 sat out its restart quarantine, kept alive after node 1 died, has one vote
/// that counts (node 0) and one that does not (node 2) — it is lost at its deadline, not
/// extended on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_lock_is_not_extended_on_a_quarantined_nodes_vote() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut c = cluster(3);
    // max_ttl 1 s: a node sits out 1 s + 12 ms drift + 1 s after it (re)starts.
    let config = ironlock::Config::new(c.urls())
        .max_ttl(SEC)
        .retry_count(0)
        .connect_timeout(5 * SEC);
    let m = LockManager::new(config).await.unwrap();
    let all_count = Instant::now() + 5 * SEC;
    while !m.node_status().iter().all(|s| s.eligible) {
        assert!(Instant::now() < all_count, "{:?}", m.node_status());
        tokio::time::sleep(ms(50)).await;
    }
    tokio::task::block_in_place(|| c.restart(2)).unwrap();
    let noticed = Instant::now() + 5 * SEC;
    loop {
        // A round notices the restart: the node's new run_id puts it in quarantine.
        if let Ok(l) = m.acquire(&[unique("probe")], ms(500)).await {
            l.release().await;
        }
        let s = &m.node_status()[2];
        if s.connected && !s.eligible {
            break;
        }
        assert!(Instant::now() < noticed, "{s:?}");
        tokio::time::sleep(ms(20)).await;
    }
    let ttl = ms(900);
    let r = unique("kept-q");
    let lock = m.acquire(&[&r], ttl).await.expect("granted");
    // Node 2 holds the key too (its vote just does not count yet).
    let on_2 = Instant::now() + SEC;
    while !c
        .command(2, &["GET", &r])
        .is_ok_and(|v| v.contains(lock.token()))
    {
        assert!(
            Instant::now() < on_2,
            "node 2 has no key: {:?}",
            lock.report()
        );
        tokio::time::sleep(ms(5)).await;
    }
    let _keep = lock.keep_alive();
    tokio::task::block_in_place(|| c.kill(1)).unwrap();
    tokio::time::timeout(ttl + SEC, lock.lost())
        .await
        .expect("told lost");
    assert!(lock.is_lost(), "{lock:?}: {:?}", lock.report());
    assert_eq!(lock.extensions(), 0, "{lock:?}: {:?}", lock.report());
    assert!(
        m.node_status()[2].quarantine_remaining > Duration::ZERO,
        "node 2 counted again before the lock ran out: the test proves nothing"
    );
}

/// Milliseconds key `key` has left on node `i` (negative: no key or no expiry).
fn pttl(c: &Cluster, i: usize, key: &str) -> i64 {
    let reply = c.command(i, &["PTTL", key]).expect("PTTL");
    reply
        .trim()
        .trim_start_matches(':')
        .parse()
        .expect("an integer")
}

/// Two extensions of one lock that overlap end it at the earlier of their deadlines: the one
/// applied last on the nodes may be the one that finished first. Here the keeper's extension
/// to 6 s goes out first and waits for a stopped node until `node_timeout`; a manual extension
/// to 3 s goes out after it, is applied after it on every node and finishes first, with the
/// two nodes that answer. The keys then expire 3 s after the manual extension, so the lock's
/// validity must not come from the keeper's 6 s, although that extension finished last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_extensions_leave_a_lock_the_earlier_deadline() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut c = cluster(3);
    let m = LockManager::new(
        common::config(&c)
            .node_timeout(SEC)
            .extension_threshold(Some(3 * SEC)),
    )
    .await
    .expect("manager starts");
    let name = unique("overlap");
    c.pause(2).expect("SIGSTOP node 2");
    let lock = m
        .acquire(std::slice::from_ref(&name), 6 * SEC)
        .await
        .expect("granted by nodes 0 and 1");
    // Due about 3 s after the grant (6 s less the threshold and the drift allowance).
    let keeper = lock.keep_alive();
    let started = Instant::now();
    // The keeper's extension has reached node 0 when its key, below 3.5 s left by then, has
    // its full ttl again.
    let (mut low, mut kept_ttl) = (false, 0);
    while started.elapsed() < 5 * SEC {
        kept_ttl = pttl(&c, 0, &name);
        low |= kept_ttl < 3_500;
        if low && kept_ttl > 5_900 {
            break;
        }
        tokio::time::sleep(ms(5)).await;
    }
    assert!(
        low && kept_ttl > 5_900,
        "the keeper's extension on node 0: PTTL {kept_ttl}"
    );
    assert_eq!(lock.extensions(), 0, "the keeper's batch waits for node 2");
    // No extension after the one in flight; that one still settles the lock.
    keeper.stop();
    lock.extend(3 * SEC)
        .await
        .expect("extended by nodes 0 and 1");
    assert_eq!(lock.extensions(), 1);
    // The keeper's batch settles once its request to node 2 times out.
    let settled = Instant::now();
    while lock.extensions() < 2 && settled.elapsed() < 5 * SEC {
        tokio::time::sleep(ms(10)).await;
    }
    assert_eq!(
        lock.extensions(),
        2,
        "the keeper's extension settled: {lock:?}"
    );
    let validity = lock.validity();
    assert!(!validity.is_zero(), "{lock:?}");
    for i in 0..2 {
        let left = pttl(&c, i, &name);
        assert!(
            left > 0 && validity <= Duration::from_millis(left as u64),
            "node {i}: the key has {left} ms left, the lock says {validity:?} (the keeper's 6 s \
             extension finished last but ran first)"
        );
    }
    c.resume(2).expect("SIGCONT node 2");
    assert!(lock.release().await.held);
}

/// An extension the keeper sends in time but that a quorum confirms only after the lock's
/// validity ran out does not bring the lock back to life (in that gap another client may have
/// held the lock): the lock is lost, its holder is told, and its keys are deleted. Here the one
/// node is stopped just before the keeper's extension goes out and resumed after the deadline,
/// well inside `node_timeout`; its key outlives the client's validity by the drift allowance, so
/// the late extension does happen on the node and answers "extended".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_lock_whose_extension_is_confirmed_after_its_deadline_is_lost() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut c = cluster(1);
    let m = LockManager::new(
        common::config(&c)
            .drift_constant(ms(1500))
            .node_timeout(SEC)
            .extension_threshold(Some(ms(300)))
            .retry_count(0),
    )
    .await
    .expect("manager starts");
    let name = unique("late-kept");
    let lock = m
        .acquire(std::slice::from_ref(&name), 4 * SEC)
        .await
        .expect("granted");
    // Validity about 2.46 s (4 s less 1.54 s of drift); the key lives 4 s on the node. The
    // keeper's extension is due 300 ms before the deadline.
    let deadline = lock.deadline();
    let keeper = lock.keep_alive();
    tokio::time::sleep_until((deadline - ms(400)).into()).await;
    c.pause(0).expect("SIGSTOP node 0");
    tokio::time::sleep_until((deadline + ms(150)).into()).await;
    c.resume(0).expect("SIGCONT node 0");
    // Until the keeper has counted the node's answer to its extension (the acquire's vote is
    // the first): it settles the lock before it counts.
    let answered =
        |s: &ironlock::Stats| s.votes_for + s.votes_against + s.votes_timeout + s.votes_error >= 2;
    let since = Instant::now();
    while !answered(&m.stats()) && since.elapsed() < 2 * SEC {
        tokio::time::sleep(ms(5)).await;
    }
    // The scenario happened as described: the keeper's request was answered "extended" — not
    // timed out, refused or failed.
    let stats = m.stats();
    assert!(
        answered(&stats),
        "the keeper's batch did not settle: {stats:?}"
    );
    assert_eq!(
        (stats.votes_against, stats.votes_timeout, stats.votes_error),
        (0, 0, 0),
        "{stats:?}"
    );
    assert_eq!(
        lock.extensions(),
        0,
        "an extension confirmed after the deadline revived the lock: {lock:?}"
    );
    assert!(!lock.is_valid(), "{lock:?}");
    assert!(
        tokio::time::timeout(SEC, lock.lost()).await.is_ok() && lock.is_lost(),
        "the holder was not told the lock is lost: {lock:?}"
    );
    // The keys the late extension renewed are deleted, so the next client need not wait.
    let mut left = pttl(&c, 0, &name);
    let since = Instant::now();
    while left != -2 && since.elapsed() < SEC {
        tokio::time::sleep(ms(10)).await;
        left = pttl(&c, 0, &name);
    }
    assert_eq!(left, -2, "the lost lock's key is still on the node");
    drop(keeper);
    let other = m
        .acquire(std::slice::from_ref(&name), 4 * SEC)
        .await
        .expect("the resource is free again");
    assert!(other.release().await.held);
}

/// When the keeper extends a kept lock: a third of its ttl before its deadline by default, and
/// never more than half of its ttl before it (an `extension_threshold` above half the ttl is
/// capped there, not taken as it is: a lock would otherwise be due again as soon as extended).
/// The validity an extension gives is at most the ttl less the drift allowance, as a grant's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_locks_are_extended_a_third_of_their_ttl_before_the_deadline_at_most_half() {
    let _one = ONE_AT_A_TIME.lock().await;
    let c = cluster(3);
    let drift = ms(200);
    let default = LockManager::new(common::config(&c).drift_constant(drift))
        .await
        .expect("manager starts");
    let capped = LockManager::new(
        common::config(&c)
            .drift_constant(drift)
            .extension_threshold(Some(10 * SEC)),
    )
    .await
    .expect("manager starts");
    let ttl = 3 * SEC;
    let mut watched = Vec::new();
    for (m, threshold) in [(&default, ttl / 3), (&capped, ttl / 2)] {
        let lock = m
            .acquire(&[unique("threshold")], ttl)
            .await
            .expect("granted");
        let before = lock.deadline();
        let keeper = lock.keep_alive();
        watched.push((lock, keeper, before, threshold));
    }
    // Each lock's first extension, as its count shows it, and the validity it gave.
    let mut first: Vec<Option<(Instant, Duration)>> = vec![None; watched.len()];
    let started = Instant::now();
    while first.iter().any(Option::is_none) && started.elapsed() < ttl {
        for (at, (lock, ..)) in first.iter_mut().zip(&watched) {
            if at.is_none() && lock.extensions() > 0 {
                *at = Some((Instant::now(), lock.validity()));
            }
        }
        tokio::time::sleep(ms(2)).await;
    }
    for ((lock, _, before, threshold), at) in watched.iter().zip(&first) {
        let (at, validity) = at.unwrap_or_else(|| panic!("never extended: {lock:?}"));
        let early = before.saturating_duration_since(at);
        assert!(
            early.abs_diff(*threshold) <= ms(150),
            "extended {early:?} before its deadline, expected {threshold:?}: {lock:?}"
        );
        assert!(
            validity <= ttl - drift,
            "the extension gave {validity:?} of validity, past the ttl less the drift: {lock:?}"
        );
        assert_eq!(lock.extensions(), 1, "{lock:?}");
    }
    for (lock, keeper, ..) in watched {
        keeper.stop();
        assert!(lock.release().await.held);
    }
}

/// A kept lock that its holder extended meanwhile is not extended again when it was due before:
/// the keeper queues it at its new due time, and extends it then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_extension_postpones_the_keepers() {
    let _one = ONE_AT_A_TIME.lock().await;
    let c = cluster(3);
    let m = manager(&c).await;
    let ttl = 3 * SEC;
    let lock = m
        .acquire(&[unique("postponed")], ttl)
        .await
        .expect("granted");
    let keeper = lock.keep_alive();
    let due = lock.deadline() - ttl / 3;
    tokio::time::sleep_until((due - ms(300)).into()).await;
    lock.extend(ttl).await.expect("extended by hand");
    assert_eq!(lock.extensions(), 1);
    tokio::time::sleep_until((due + ms(300)).into()).await;
    assert_eq!(
        lock.extensions(),
        1,
        "the keeper extended it again at its old due time: {lock:?}"
    );
    let due = lock.deadline() - ttl / 3;
    tokio::time::sleep_until((due + ms(300)).into()).await;
    assert_eq!(lock.extensions(), 2, "not kept after all: {lock:?}");
    keeper.stop();
    assert!(lock.release().await.held);
}

/// `max_extensions` bounds auto-extension too: a kept lock is extended that many times, then runs
/// out at its deadline; its holder is told it is lost and its keys are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_lock_is_extended_max_extensions_times_then_runs_out() {
    let _one = ONE_AT_A_TIME.lock().await;
    let c = cluster(3);
    let m = LockManager::new(common::config(&c).max_extensions(Some(2)))
        .await
        .expect("manager starts");
    let name = unique("max-extensions");
    let lock = m
        .acquire(std::slice::from_ref(&name), ms(900))
        .await
        .expect("granted");
    let keeper = lock.keep_alive();
    // Extended about 0.6 and 1.2 s after the grant, then valid until about 2.1 s.
    let told = tokio::time::timeout(3 * SEC, lock.lost()).await.is_ok();
    assert!(told && lock.is_lost(), "{lock:?}");
    assert_eq!(lock.extensions(), 2, "{lock:?}");
    tokio::time::sleep(ms(500)).await;
    assert_eq!(
        lock.extensions(),
        2,
        "extended past max_extensions: {lock:?}"
    );
    for i in 0..3 {
        assert_eq!(pttl(&c, i, &name), -2, "node {i} still has the key");
    }
    drop(keeper);
}

/// The report of a kept lock's extension names each node's answer: a node that is down shows
/// as such, not as having extended the lock with the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_locks_report_shows_the_node_that_did_not_extend_it() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut c = cluster(3);
    let m = manager(&c).await;
    let lock = m
        .acquire(&[unique("report")], ms(1500))
        .await
        .expect("granted");
    c.kill(2).expect("kill node 2");
    let keeper = lock.keep_alive();
    let started = Instant::now();
    while lock.extensions() == 0 && started.elapsed() < 2 * SEC {
        tokio::time::sleep(ms(5)).await;
    }
    assert_eq!(lock.extensions(), 1, "{lock:?}");
    let votes: Vec<Vote> = lock.report().nodes.iter().map(|n| n.vote).collect();
    assert_eq!(&votes[..2], &[Vote::For, Vote::For], "{:?}", lock.report());
    assert!(
        matches!(votes[2], Vote::Error | Vote::Timeout),
        "the dead node's vote: {:?}",
        lock.report()
    );
    keeper.stop();
    assert!(lock.release().await.held);
}
