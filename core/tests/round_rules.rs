//! The rules of a round against real nodes, each checked exactly enough that a change to the
//! arithmetic shows (written to kill the mutants `scripts/mutants` found alive): one vote per node
//! and a refusal named as such, the length of the restart quarantine, validity after an acquire
//! and an extension, re-seating only on the node that restarted, and an extension that finds its
//! token gone from a quorum losing the lock.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, SEC, cluster, config, eventually, ms, restart, unique};
use ironlock::{Config, ErrorKind, Lock, LockManager, Vote};

/// `GET key` on node `i`, through the harness (RESP text; `$-1` when absent).
fn get(c: &Cluster, i: usize, key: &str) -> String {
    c.command(i, &["GET", key]).expect("GET")
}

fn absent(c: &Cluster, i: usize, key: &str) -> bool {
    let v = get(c, i, key);
    v.trim().is_empty() || v.contains("$-1") || v.contains("(nil)")
}

/// The key of `resource` under `m`'s key prefix (learnt from a lock of it).
async fn key_of(m: &LockManager, resource: &str) -> String {
    let lock = m.acquire(&[resource], SEC).await.expect("free");
    let key = lock.keys()[0].clone();
    assert!(lock.release().await.held);
    // The deletes the release did not wait for land before the caller writes the key.
    m.flush().await;
    key
}

/// Validity left just after a grant whose round started at `before`: at most ttl − drift, and
/// no less than that minus the time since `before`.
fn assert_validity(lock: &Lock, ttl: Duration, before: Instant) {
    let drift = ironlock::drift(ttl, 0.01, ms(2));
    let v = lock.validity();
    assert!(
        v <= ttl - drift,
        "validity {v:?} above ttl − drift {:?}",
        ttl - drift
    );
    assert!(
        v + before.elapsed() >= ttl - drift,
        "validity {v:?} lost more than the round took"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_votes_once_and_a_refusal_or_a_failure_is_counted_as_such() {
    let mut c = cluster(5);
    // A long node timeout: a round that waits for it has miscounted its answers.
    let m = LockManager::new(config(&c).retry_count(0).node_timeout(3 * SEC))
        .await
        .unwrap();
    let r = unique("votes");
    let key = key_of(&m, &r).await;
    // Another client's token on nodes 0 and 1: three of five grant.
    for i in [0, 1] {
        c.command(i, &["SET", &key, "someone-else", "PX", "10000"])
            .unwrap();
    }
    let before = Instant::now();
    let lock = m
        .acquire(&[&r], 10 * SEC)
        .await
        .expect("3 of 5 is a quorum");
    assert_validity(&lock, 10 * SEC, before);
    let report = lock.report();
    // The round returns at a quorum: a refusal may not have arrived yet.
    assert_eq!(report.count(Vote::For), 3, "{report:?}");
    assert_eq!(
        report.count(Vote::Against) + report.count(Vote::Pending),
        2,
        "{report:?}"
    );
    for i in 2..5 {
        assert!(get(&c, i, &key).contains(lock.token()), "node {i}");
    }
    assert!(lock.release().await.held);
    m.flush().await;
    // The other token on a third node: a quorum refuses, and the grants are rolled back.
    c.command(2, &["SET", &key, "someone-else", "PX", "10000"])
        .unwrap();
    let e = m.acquire(&[&r], 10 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    let report = e.report().unwrap();
    assert_eq!(report.count(Vote::Against), 3, "{e}");
    assert!(report.elapsed < SEC, "{e}");
    assert_eq!(
        report.count(Vote::For) + report.count(Vote::Pending),
        2,
        "{e}"
    );
    let why = || format!("a rolled-back key stayed: {:?}", get(&c, 3, &key));
    eventually(
        5 * SEC,
        || async { absent(&c, 3, &key) && absent(&c, 4, &key) },
        why,
    )
    .await;
    for i in 0..3 {
        assert!(get(&c, i, &key).contains("someone-else"), "node {i}");
    }
    // A node that does not answer: the three refusals decide without it, at once.
    c.pause(4).unwrap();
    let e = m.acquire(&[&r], 10 * SEC).await.unwrap_err();
    c.resume(4).unwrap();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    let report = e.report().unwrap();
    assert_eq!(report.count(Vote::Against), 3, "{e}");
    assert!(report.elapsed < SEC, "waited for the silent node: {e}");
    m.flush().await;
    // Nodes down are failures, not refusals: two down still leave a quorum, three do not.
    let r2 = unique("down");
    c.kill(3).unwrap();
    c.kill(4).unwrap();
    let lock = m.acquire(&[&r2], SEC).await.expect("3 of 5 up");
    assert_eq!(lock.report().count(Vote::For), 3);
    assert!(lock.release().await.held);
    c.kill(2).unwrap();
    let e = m.acquire(&[&r2], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let report = e.report().unwrap();
    assert_eq!(report.count(Vote::For), 2, "{e}");
    assert_eq!(report.count(Vote::Against), 0, "{e}");
    assert_eq!(report.count(Vote::Error), 3, "{e}");
    // Every node answered at once (the dead ones with an error): nobody waited for a timeout.
    assert!(report.elapsed < SEC, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_node_sits_out_max_ttl_plus_drift_plus_a_second_and_its_yes_is_rolled_back() {
    let c = cluster(3);
    let max_ttl = SEC;
    let cfg = Config::new(c.urls())
        .max_ttl(max_ttl)
        .retry_count(0)
        .connect_timeout(5 * SEC);
    let m = LockManager::new(cfg).await.unwrap();
    let q = ironlock::restart_quarantine(max_ttl, ironlock::drift(max_ttl, 0.01, ms(2)), SEC);
    assert_eq!(q, ms(2012));
    for s in m.node_status() {
        assert!(s.connected && !s.eligible, "{s:?}");
        assert!(s.quarantine_remaining > Duration::ZERO, "{s:?}");
        // Counted from the node's own uptime: what is left and what has passed make q.
        assert_eq!(s.quarantine_remaining + s.uptime, q, "{s:?}");
        assert_eq!(s.quarantines, 1, "{s:?}");
        assert!(
            s.not_counted_because
                .as_deref()
                .is_some_and(|w| w.contains("restart quarantine")),
            "{s:?}"
        );
    }
    let r = unique("quarantine");
    let e = m.acquire(&[&r], ms(500)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let report = e.report().unwrap();
    assert_eq!(report.count(Vote::NotEligible), 3, "{e}");
    assert_eq!(report.count(Vote::For), 0, "{e}");
    // Their keys were written all the same; the failed round deleted them.
    let pattern = format!("*{r}*");
    let why = || "a quarantined node kept the key".to_owned();
    eventually(
        5 * SEC,
        || async {
            (0..3).all(|i| {
                c.command(i, &["KEYS", &pattern])
                    .map(|k| !k.contains(&r))
                    .unwrap_or(false)
            })
        },
        why,
    )
    .await;
    let left = m
        .node_status()
        .iter()
        .map(|s| s.quarantine_remaining)
        .max()
        .unwrap();
    tokio::time::sleep(left + ms(20)).await;
    assert!(m.node_status().iter().all(|s| s.eligible));
    let lock = m.acquire(&[&r], ms(500)).await.expect("eligible after it");
    let report = lock.report();
    // Every "yes" counts now (a busy machine may still make one node late or slow).
    assert!(report.count(Vote::For) >= 2, "{report:?}");
    assert_eq!(report.count(Vote::NotEligible), 0, "{report:?}");
    assert!(lock.release().await.held);
}

fn votes_of(lock: &Lock) -> Vec<Vote> {
    lock.report().nodes.iter().map(|n| n.vote).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_reseats_the_restarted_node_only_and_only_once() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let lock = m.acquire(&[unique("reseat")], 10 * SEC).await.unwrap();
    let key = lock.keys()[0].clone();
    m.flush().await;
    restart(&mut c, &m, 1).await;
    assert!(absent(&c, 1, &key), "a restarted node comes back empty");
    // Node 2 lost the key without restarting (as if it expired there): not re-seated. The
    // extension needs node 1's answer then, so the round waits for it.
    c.command(2, &["DEL", &key]).unwrap();
    let before = Instant::now();
    lock.extend(5 * SEC).await.expect("extended");
    assert_validity(&lock, 5 * SEC, before);
    assert_eq!(lock.ttl(), 5 * SEC);
    let votes = votes_of(&lock);
    assert_eq!(votes[..2], [Vote::For, Vote::Reseated], "{votes:?}");
    assert!(
        matches!(votes[2], Vote::Against | Vote::Pending),
        "{votes:?}"
    );
    m.flush().await;
    assert!(get(&c, 1, &key).contains(lock.token()));
    assert!(
        absent(&c, 2, &key),
        "written back where no restart was seen"
    );
    assert_eq!(m.node_status()[1].reseats, 1);
    assert_eq!(m.node_status()[0].reseats + m.node_status()[2].reseats, 0);
    // The node holds the key again: the next extension is a plain one there.
    lock.extend(5 * SEC).await.expect("extended again");
    let votes = votes_of(&lock);
    assert_eq!(votes[..2], [Vote::For, Vote::For], "{votes:?}");
    m.flush().await;
    assert_eq!(m.node_status()[1].reseats, 1);
    assert!(absent(&c, 2, &key));
    assert_eq!(lock.extensions(), 2);
    assert!(lock.release().await.held);
    m.flush().await;
    assert!((0..3).all(|i| absent(&c, i, &key)));
}

/// Two of three nodes restart while a lock is held: the extension writes the keys back on both,
/// but they are in restart quarantine, so only one "yes" counts and the extension fails (the lock
/// stays valid until its deadline) and takes its re-seats back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reseat_on_a_quarantined_node_does_not_count() {
    let mut c = cluster(3);
    let max_ttl = 4 * SEC;
    let m = LockManager::new(
        Config::new(c.urls())
            .max_ttl(max_ttl)
            .retry_count(0)
            .connect_timeout(5 * SEC),
    )
    .await
    .unwrap();
    // Fresh nodes sit out max_ttl + drift + 1 s first.
    let left = m.node_status().iter().map(|s| s.quarantine_remaining).max();
    tokio::time::sleep(left.unwrap_or_default() + ms(20)).await;
    let lock = m.acquire(&[unique("requarantine")], max_ttl).await.unwrap();
    let key = lock.keys()[0].clone();
    m.flush().await;
    restart(&mut c, &m, 1).await;
    restart(&mut c, &m, 2).await;
    assert!(m.node_status()[1..].iter().all(|s| !s.eligible));
    let e = lock.extend(max_ttl).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let report = e.report().unwrap();
    assert_eq!(report.nodes[0].vote, Vote::For, "{report:?}");
    for r in &report.nodes[1..] {
        assert!(
            matches!(r.vote, Vote::Reseated | Vote::Pending) && !r.counted(),
            "{report:?}"
        );
    }
    assert!(
        lock.is_valid() && !lock.is_lost(),
        "valid until its deadline"
    );
    m.flush().await;
    assert!(
        absent(&c, 1, &key) && absent(&c, 2, &key),
        "re-seats taken back"
    );
    assert!(lock.release().await.held || absent(&c, 0, &key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reseat_refused_by_another_clients_key_is_tried_again_at_the_next_extension() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let lock = m.acquire(&[unique("retry")], 10 * SEC).await.unwrap();
    let key = lock.keys()[0].clone();
    m.flush().await;
    restart(&mut c, &m, 1).await;
    // Another client took the key on the restarted node: the re-seat must not overwrite it.
    c.command(1, &["SET", &key, "someone-else", "PX", "10000"])
        .unwrap();
    lock.extend(5 * SEC).await.expect("nodes 0 and 2 extend");
    let votes = votes_of(&lock);
    assert!(
        matches!(votes[1], Vote::Against | Vote::Pending),
        "{votes:?}"
    );
    m.flush().await;
    assert!(get(&c, 1, &key).contains("someone-else"));
    assert_eq!(m.node_status()[1].reseats, 0);
    // Its key gone, the node is asked to re-seat again: its seat did not move without a "yes".
    c.command(1, &["DEL", &key]).unwrap();
    lock.extend(5 * SEC).await.expect("extended");
    m.flush().await;
    assert!(get(&c, 1, &key).contains(lock.token()));
    assert_eq!(m.node_status()[1].reseats, 1);
    assert!(lock.release().await.held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_extension_takes_back_its_reseat_and_nothing_else() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0).node_timeout(ms(300)))
        .await
        .unwrap();
    let lock = m.acquire(&[unique("rollback")], 10 * SEC).await.unwrap();
    let key = lock.keys()[0].clone();
    m.flush().await;
    restart(&mut c, &m, 1).await;
    // Nodes 0 and 2 stop answering: node 1 alone re-seats, short of a quorum.
    c.pause(0).unwrap();
    c.pause(2).unwrap();
    let e = lock.extend(5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(
        !lock.is_lost() && lock.is_valid(),
        "still held until its deadline"
    );
    c.resume(0).unwrap();
    c.resume(2).unwrap();
    m.flush().await;
    // The re-seated key went with the failed extension; the keys that make the lock stayed.
    assert!(absent(&c, 1, &key), "{:?}", get(&c, 1, &key));
    for i in [0, 2] {
        assert!(
            get(&c, i, &key).contains(lock.token()),
            "node {i} lost the key"
        );
    }
    assert_eq!(m.node_status()[1].reseats, 1);
    // One node refusing and one down is not a quorum lost: unavailable, not lost.
    c.command(0, &["DEL", &key]).unwrap();
    c.kill(1).unwrap();
    let e = lock.extend(5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(!lock.is_lost());
    lock.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_reseat_off_a_restarted_node_stays_empty() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0).reseat(false))
        .await
        .unwrap();
    let lock = m.acquire(&[unique("noreseat")], 10 * SEC).await.unwrap();
    let key = lock.keys()[0].clone();
    restart(&mut c, &m, 1).await;
    lock.extend(5 * SEC)
        .await
        .expect("two of three still hold it");
    let votes = votes_of(&lock);
    assert!(
        matches!(votes[1], Vote::Against | Vote::Pending),
        "{votes:?}"
    );
    m.flush().await;
    assert!(absent(&c, 1, &key));
    assert_eq!(m.node_status()[1].reseats, 0);
    assert!(lock.release().await.held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_a_quorum_refuses_loses_the_lock_and_one_nodes_down_do_not() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0).node_timeout(ms(300)))
        .await
        .unwrap();
    // Two nodes down: the extension fails, but nobody said the token is gone.
    let lock = m.acquire(&[unique("ext")], 10 * SEC).await.unwrap();
    let before: Vec<String> = m.node_status().into_iter().map(|s| s.run_id).collect();
    c.kill(1).unwrap();
    c.kill(2).unwrap();
    let e = lock.extend(10 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(!lock.is_lost() && lock.is_valid());
    assert_eq!(lock.extensions(), 0);
    c.start_node(1).unwrap();
    c.start_node(2).unwrap();
    // The restarted nodes are empty: a quorum (all but node 0) no longer holds the token.
    let why = || format!("nodes never came back: {:?}", m.node_status());
    eventually(
        5 * SEC,
        || async {
            if let Ok(probe) = m.acquire(&[unique("probe")], SEC).await {
                probe.release().await;
            }
            // Connected to the new processes (a dead connection may look alive until used).
            let now = m.node_status();
            (1..3).all(|i| now[i].connected && now[i].run_id != before[i])
        },
        why,
    )
    .await;
    let lock2 = m.acquire(&[unique("ext2")], 10 * SEC).await.unwrap();
    let key = lock2.keys()[0].clone();
    // The writes the acquire did not wait for land first.
    m.flush().await;
    for i in [0, 2] {
        c.command(i, &["DEL", &key]).unwrap();
    }
    let e = match lock2.extend(10 * SEC).await {
        Ok(()) => panic!(
            "extended where a quorum lost the token: {:?} {:?}",
            lock2.report(),
            m.node_status()
        ),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert!(lock2.is_lost() && !lock2.is_valid());
    lock.release().await;
    lock2.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_validity_ends_a_tenth_of_its_ttl_early_after_a_grant_and_an_extension() {
    let c = cluster(3);
    let m = LockManager::new(config(&c)).await.unwrap();
    let e = m.election(unique("leader"));
    let ttl = 5 * SEC;
    // ttl − drift − the leader's margin (a tenth of the ttl, at most 1 s).
    let end = ttl - ironlock::drift(ttl, 0.01, ms(2)) - ms(500);
    let check = |lock: &Lock, before: Instant| {
        let v = lock.validity();
        assert!(v <= end, "validity {v:?} beyond {end:?}");
        assert!(
            v + before.elapsed() >= end,
            "validity {v:?} short of {end:?}"
        );
    };
    let before = Instant::now();
    let a = e.campaign("a", ttl).await.unwrap();
    check(a.lock(), before);
    let before = Instant::now();
    a.lock().extend(ttl).await.expect("extended");
    check(a.lock(), before);
    assert!(a.resign().await.held);
}
