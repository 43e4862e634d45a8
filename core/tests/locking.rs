//! The core against real redis-server nodes: quorum, faults, contention, fencing, wake-ups,
//! auto-extension and cancellation.

mod common;

use std::time::{Duration, Instant};

use common::{SEC, cluster, config, manager, ms, unique};
use ironlock::{AcquireOptions, ErrorKind, LockManager, Vote};

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn happy_path_n1_n3_n5() {
    for n in [1, 3, 5] {
        let c = cluster(n);
        let m = manager(&c).await;
        assert_eq!(m.quorum(), n / 2 + 1);
        let r = unique("happy");
        let lock = m.acquire(&[&r], 5 * SEC).await.unwrap();
        assert!(lock.is_valid());
        let v = lock.validity();
        assert!(v > ms(4800) && v < 5 * SEC, "validity {v:?}");
        assert_eq!(lock.token().len(), 40);
        assert_eq!(
            lock.report().count(Vote::For) + lock.report().count(Vote::Pending),
            n
        );
        for url in c.urls() {
            let got: Option<String> = redis::cmd("GET")
                .arg(&r)
                .query_async(&mut redis_conn(&url).await)
                .await
                .unwrap();
            assert_eq!(got.as_deref(), Some(lock.token()));
        }
        let rel = lock.release().await;
        assert!(rel.held);
        assert!(rel.deleted_on >= m.quorum(), "{}", rel.report);
        assert_eq!(
            rel.deleted_on + rel.report.count(Vote::Pending),
            n,
            "{}",
            rel.report
        );
        assert!(!lock.is_valid());
        // The deletes the release did not wait for reach the other nodes in the background.
        m.flush().await;
        for url in c.urls() {
            let got: Option<String> = redis::cmd("GET")
                .arg(&r)
                .query_async(&mut redis_conn(&url).await)
                .await
                .unwrap();
            assert_eq!(got, None, "key left on {url}");
        }
    }
}

#[tokio::test]
async fn minority_down_is_granted_majority_down_is_unavailable_after_all_rounds() {
    let mut c = cluster(5);
    let m = LockManager::new(
        config(&c)
            .retry_count(3)
            .retry_delay(ms(10))
            .retry_jitter(ms(2)),
    )
    .await
    .unwrap();
    c.kill(0).unwrap();
    c.kill(1).unwrap();
    let lock = m.acquire(&[unique("minority")], 5 * SEC).await.unwrap();
    assert!(lock.release().await.held);
    c.kill(2).unwrap();
    let err = m.acquire(&[unique("majority")], 5 * SEC).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let report = err.report().unwrap();
    assert_eq!(report.rounds, 4, "retry_count 3 = 4 rounds: {report}");
    assert!(report.count(Vote::Error) >= 3, "{report}");
}

#[tokio::test]
async fn a_paused_node_times_out_instead_of_hanging() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).node_timeout(ms(100)).retry_count(0))
        .await
        .unwrap();
    c.pause(0).unwrap();
    c.pause(1).unwrap();
    let started = Instant::now();
    let err = m.acquire(&[unique("paused")], 5 * SEC).await.unwrap_err();
    let took = started.elapsed();
    c.resume(0).unwrap();
    c.resume(1).unwrap();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    let report = err.report().unwrap();
    assert_eq!(report.count(Vote::Timeout), 2, "{report}");
    assert_eq!(report.count(Vote::For), 1, "{report}");
    // Bounded by node_timeout plus the rollback's node_timeout, not by the stopped nodes.
    assert!(took < SEC, "round took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_keep_a_shared_counter_exact() {
    let c = cluster(3);
    let referee = cluster(1);
    // A generous node timeout: this test is about mutual exclusion, and a busy machine must not
    // turn a slow reply into a release that "did not find a quorum".
    let m = LockManager::new(
        config(&c)
            .retry_count(10_000)
            .retry_delay(ms(20))
            .retry_jitter(ms(10))
            .node_timeout(2 * SEC),
    )
    .await
    .unwrap();
    let resource = unique("counter");
    let counter_key = unique("counter-value");
    let referee_url = referee.urls()[0].clone();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (m, resource, key, url) = (
            m.clone(),
            resource.clone(),
            counter_key.clone(),
            referee_url.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut conn = redis_conn(&url).await;
            for _ in 0..200 {
                let lock = m.acquire(&[&resource], 2 * SEC).await.expect("acquire");
                // Read-modify-write in two round trips: any overlap of holders loses an update.
                let v: Option<u64> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(v.unwrap_or(0) + 1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert!(lock.is_valid(), "critical section outlived validity");
                let released = lock.release().await;
                assert!(released.held, "release: {}", released.report);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut conn = redis_conn(&referee_url).await;
    let v: u64 = redis::cmd("GET")
        .arg(&counter_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(v, 1600);
    assert!(
        m.stats().wakeups > 0,
        "waiters should be woken by releases: {:?}",
        m.stats()
    );
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_two_managers() {
    let c = cluster(3);
    let a = manager(&c).await;
    let b = manager(&c).await;
    let r = unique("fence");
    let mut last = 0u64;
    for i in 0..1000 {
        let m = if i % 2 == 0 { &a } else { &b };
        let lock = m
            .acquire_with(&[&r], 5 * SEC, AcquireOptions::default().fencing(true))
            .await
            .unwrap();
        let f = lock.fence().expect("fence");
        assert!(f > last, "fence {f} after {last}");
        last = f;
        assert!(lock.release().await.held);
    }
}

/// A fenced grant raises the fence counter to its fence on a quorum of nodes (so that a later
/// grant, reading any quorum, sees it), not only on the nodes that granted it first.
#[tokio::test]
async fn a_fenced_grant_writes_its_fence_back_to_a_quorum() {
    let c = cluster(3);
    let m = manager(&c).await;
    let r = unique("writeback");
    for _ in 0..3 {
        let lock = m
            .acquire_with(&[&r], 5 * SEC, AcquireOptions::default().fencing(true))
            .await
            .unwrap();
        let f = lock.fence().expect("fence");
        m.flush().await;
        let counter = ironlock::scripts::fence_key(&lock.keys()[0]);
        let written = (0..3)
            .filter(|&i| {
                c.command(i, &["GET", &counter])
                    .is_ok_and(|v| v.contains(&f.to_string()))
            })
            .count();
        assert!(written >= 2, "fence {f} on {written} of 3 nodes");
        assert!(lock.release().await.held);
    }
}

/// Three nodes, a resource held by one manager for 10 s, and a second manager whose waiters
/// retry only after `retry_delay` (no jitter): only release wake-ups can hand the lock on sooner.
async fn held_with_slow_waiters(
    what: &str,
    retry_delay: Duration,
    retry_count: u32,
) -> (
    ironlock_harness::Cluster,
    LockManager,
    String,
    ironlock::Lock,
) {
    let c = cluster(3);
    let holder = manager(&c).await;
    let waiters = LockManager::new(
        config(&c)
            .retry_delay(retry_delay)
            .retry_jitter(ms(0))
            .retry_count(retry_count),
    )
    .await
    .unwrap();
    let r = unique(what);
    let lock = holder.acquire(&[&r], 10 * SEC).await.unwrap();
    (c, waiters, r, lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_before_its_retry_delay() {
    let (_c, waiter, r, lock) = held_with_slow_waiters("wake", ms(4000), 1).await;
    let w = {
        let (waiter, r) = (waiter.clone(), r.clone());
        tokio::spawn(async move { waiter.acquire(&[&r], 5 * SEC).await })
    };
    // Let the waiter fail its first round and subscribe.
    tokio::time::sleep(ms(300)).await;
    assert_eq!(waiter.stats().wakeups, 0);
    assert!(lock.release().await.held);
    let got = w.await.unwrap().expect("woken waiter acquires");
    assert_eq!(waiter.stats().wakeups, 1, "{:?}", waiter.stats());
    assert_eq!(got.report().rounds, 2);
    got.release().await;
}

/// A waiter that comes right after the last waiter of its resource left (the channel is
/// unsubscribed and subscribed again at once, from two background tasks) still hears the
/// release: the two cannot overtake each other and leave it deaf until its retry delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_right_after_another_left_still_hears_the_release() {
    let (c, waiter, r, mut lock) = held_with_slow_waiters("rewatch", 10 * SEC, 1).await;
    let holder = manager(&c).await;
    for turn in 0..10 {
        // A waiter that subscribes, then is cancelled: its channel empties and unsubscribes.
        let gone = tokio::time::timeout(ms(40), waiter.acquire(&[&r], 5 * SEC)).await;
        assert!(gone.is_err(), "turn {turn}: acquired a held lock");
        let w = {
            let (waiter, r) = (waiter.clone(), r.clone());
            tokio::spawn(async move { waiter.acquire(&[&r], 5 * SEC).await })
        };
        tokio::time::sleep(ms(60)).await;
        assert!(lock.release().await.held);
        let got = tokio::time::timeout(2 * SEC, w)
            .await
            .unwrap_or_else(|_| panic!("turn {turn}: the release woke nobody"))
            .unwrap()
            .expect("woken waiter acquires");
        assert!(got.release().await.held);
        lock = holder.acquire(&[&r], 10 * SEC).await.unwrap();
    }
    lock.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn using_keeps_the_lock_alive_and_signals_loss() {
    let c = cluster(3);
    let m = manager(&c).await;
    let r = unique("using");
    // Alive across 3 × ttl.
    let out = m
        .using(&[&r], ms(500), |lock| async move {
            tokio::time::sleep(ms(1500)).await;
            assert!(lock.is_valid());
            lock.extensions()
        })
        .await
        .unwrap();
    assert!(out >= 3, "extended {out} times");
    // Keys deleted behind its back: lost() resolves well before the work would end.
    let urls = c.urls();
    let r2 = r.clone();
    let err = m
        .using(&[&r], ms(600), |lock| async move {
            for url in &urls {
                let _: () = redis::cmd("DEL")
                    .arg(&r2)
                    .query_async(&mut redis_conn(url).await)
                    .await
                    .unwrap();
            }
            let started = Instant::now();
            tokio::select! {
                _ = lock.lost() => {}
                _ = tokio::time::sleep(5 * SEC) => panic!("loss not signalled"),
            }
            assert!(
                started.elapsed() < ms(700),
                "signalled after {:?}",
                started.elapsed()
            );
            assert!(lock.is_lost());
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost);
}

#[tokio::test]
async fn a_cancelled_acquire_leaves_no_key_behind() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).node_timeout(ms(300)))
        .await
        .unwrap();
    let r = unique("cancel");
    c.pause(2).unwrap();
    // Node 2 is stopped, so the round cannot finish quickly; cancel it mid-flight.
    let res = tokio::time::timeout(ms(30), m.acquire(&[&r], 5 * SEC)).await;
    assert!(
        res.is_err() || res.as_ref().is_ok_and(|r| r.is_ok()),
        "{res:?}"
    );
    let granted_then_dropped = matches!(res, Ok(Ok(_)));
    c.resume(2).unwrap();
    tokio::time::sleep(ms(500)).await;
    if !granted_then_dropped {
        for url in c.urls() {
            let n: u64 = redis::cmd("EXISTS")
                .arg(&r)
                .query_async(&mut redis_conn(&url).await)
                .await
                .unwrap();
            assert_eq!(n, 0, "key left on {url}");
        }
    }
}

#[tokio::test]
async fn a_node_down_at_start_joins_when_it_comes_up() {
    let mut c = cluster(3);
    c.kill(0).unwrap();
    c.kill(1).unwrap();
    let m = LockManager::new(config(&c).retry_count(0))
        .await
        .expect("starts with nodes down");
    assert_eq!(
        m.acquire(&[unique("x")], 5 * SEC).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    c.start_node(0).unwrap();
    c.start_node(1).unwrap();
    let deadline = Instant::now() + 5 * SEC;
    let lock = loop {
        match m.acquire(&[unique("y")], 5 * SEC).await {
            Ok(l) => break l,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.kind(), ErrorKind::Unavailable);
                tokio::time::sleep(ms(50)).await;
            }
            Err(e) => panic!("never rejoined: {e}"),
        }
    };
    lock.release().await;
    assert!(m.node_status().iter().all(|s| s.connected));
}

#[tokio::test]
async fn a_restarted_node_is_quarantined_and_reported() {
    let mut c = cluster(3);
    let m = LockManager::new(Config2::quarantined(&c)).await.unwrap();
    // Fresh nodes: all quarantined for max_ttl + drift + 1 s.
    let err = m.acquire(&[unique("q")], SEC).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    let report = err.report().unwrap();
    assert!(
        report.count(Vote::NotEligible) >= 2 && report.count(Vote::For) == 0,
        "{err}"
    );
    assert!(
        m.node_status()
            .iter()
            .all(|s| !s.eligible && s.quarantine_remaining > Duration::ZERO)
    );
    tokio::time::sleep(ms(2100)).await;
    let lock = m
        .acquire(&[unique("q")], SEC)
        .await
        .expect("eligible after the quarantine");
    lock.release().await;
    c.restart(1).unwrap();
    let r = unique("q2");
    // The first request notices the broken connection; the reconnect reads uptime 0.
    if let Ok(probe) = m.acquire(&[unique("probe")], SEC).await {
        probe.release().await;
    }
    tokio::time::sleep(ms(200)).await;
    let st = &m.node_status()[1];
    assert!(st.connected && !st.eligible, "{st:?}");
    let lock = m
        .acquire(&[&r], SEC)
        .await
        .expect("two eligible nodes are a quorum");
    assert!(lock.report().count(Vote::NotEligible) <= 1);
    lock.release().await;
    assert!(m.node_status()[1].not_eligible >= 1);
}

struct Config2;
impl Config2 {
    fn quarantined(c: &common::Cluster) -> ironlock::Config {
        // max_ttl 1 s: quarantine = 1 s + 12 ms drift + 1 s.
        ironlock::Config::new(c.urls()).max_ttl(SEC).retry_count(0)
    }
}

#[tokio::test]
async fn extend_recomputes_validity_and_max_extensions_bounds_it() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).max_extensions(Some(2)))
        .await
        .unwrap();
    let lock = m.acquire(&[unique("ext")], SEC).await.unwrap();
    lock.extend(5 * SEC).await.unwrap();
    assert!(lock.validity() > 4 * SEC);
    assert_eq!(lock.ttl(), 5 * SEC);
    lock.extend(5 * SEC).await.unwrap();
    let e = lock.extend(5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("max_extensions"));
    lock.release().await;
    assert_eq!(lock.extend(SEC).await.unwrap_err().kind(), ErrorKind::Lost);
}

#[tokio::test]
async fn stats_count_every_outcome_and_the_histograms_every_call() {
    let mut c = cluster(3);
    let m = manager(&c).await;
    let r = unique("stats");
    let a = m.acquire(&[&r], 5 * SEC).await.unwrap();
    let e = m
        .acquire_with(&[&r], 5 * SEC, AcquireOptions::try_once())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended);
    // Two rounds, one retry, contended again.
    let e = m
        .acquire_with(
            &[&r],
            5 * SEC,
            AcquireOptions {
                retry_count: Some(1),
                ..AcquireOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended);
    a.extend(5 * SEC).await.unwrap();
    a.release().await;
    // A lock whose keys vanished: its extension fails and marks it lost.
    let b = m.acquire(&[unique("stats-lost")], 5 * SEC).await.unwrap();
    for i in 0..3 {
        c.command(i, &["FLUSHALL"]).unwrap();
    }
    assert_eq!(b.extend(5 * SEC).await.unwrap_err().kind(), ErrorKind::Lost);
    // No quorum: two of three nodes down.
    c.kill(1).unwrap();
    c.kill(2).unwrap();
    let e = m
        .acquire_with(&[unique("stats-down")], 5 * SEC, AcquireOptions::try_once())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    let s = m.stats();
    assert_eq!((s.granted, s.contended, s.unavailable), (2, 2, 1), "{s:?}");
    assert_eq!((s.rounds, s.retries), (6, 1), "{s:?}");
    assert_eq!(
        (s.extensions, s.extension_failures, s.lost),
        (1, 1, 1),
        "{s:?}"
    );
    assert_eq!(s.releases, 1, "{s:?}");
    assert_eq!(s.acquire_latency.count, 5, "{s:?}");
    assert_eq!(s.round_latency.count, 6, "{s:?}");
    assert_eq!(
        s.acquire_latency.counts.len(),
        ironlock::LATENCY_BUCKETS.len() + 1
    );
    assert!(s.acquire_latency.sum_seconds > 0.0);
    let per_node: u64 = m.node_status().iter().map(|n| n.votes_against).sum();
    assert_eq!(s.votes_against, per_node);
    assert!(s.votes_against >= 2, "{s:?}");
    assert!(s.votes_error >= 1, "{s:?}");
    assert_eq!(s.counter("granted"), Some(2));
    let text = s.prometheus();
    assert!(text.contains("ironlock_granted_total 2\n"), "{text}");
    assert!(
        text.contains("ironlock_acquire_seconds_count 5\n"),
        "{text}"
    );
}

#[tokio::test]
async fn a_wait_too_long_to_represent_means_no_deadline() {
    let c = cluster(1);
    let m = manager(&c).await;
    let lock = m
        .acquire_with(
            &[unique("forever")],
            SEC,
            AcquireOptions::wait(Duration::MAX),
        )
        .await
        .unwrap();
    assert!(lock.release().await.held);
}

#[tokio::test]
async fn release_returns_at_a_quorum_and_flush_waits_for_the_straggler() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).node_timeout(ms(400)))
        .await
        .unwrap();
    let r = unique("release-quorum");
    let lock = m.acquire(&[&r], 5 * SEC).await.unwrap();
    m.flush().await;
    c.pause(2).unwrap();
    let rel = lock.release().await;
    // Two of three deleted: the lock is gone, so the release does not wait for node 2.
    assert!(rel.held, "{}", rel.report);
    assert_eq!(rel.deleted_on, 2, "{}", rel.report);
    assert_eq!(rel.report.nodes[2].vote, Vote::Pending, "{}", rel.report);
    c.resume(2).unwrap();
    // The delete already sent to node 2 is answered in the background; flush waits for it.
    m.flush().await;
    let left: u64 = redis::cmd("EXISTS")
        .arg(&r)
        .query_async(&mut redis_conn(&c.urls()[2]).await)
        .await
        .unwrap();
    assert_eq!(left, 0, "the straggler's delete reached node 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_wakes_one_waiter_in_turn() {
    let (_c, waiters, r, lock) = held_with_slow_waiters("wake-one", ms(20_000), 5).await;
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (m, r) = (waiters.clone(), r.clone());
            tokio::spawn(async move {
                let got = m.acquire(&[&r], 10 * SEC).await?;
                tokio::time::sleep(ms(20)).await;
                let rounds = got.report().rounds;
                assert!(got.release().await.held);
                Ok::<u32, ironlock::Error>(rounds)
            })
        })
        .collect();
    // Let every waiter fail its first round and subscribe.
    tokio::time::sleep(ms(500)).await;
    assert_eq!(waiters.stats().wakeups, 0);
    assert!(lock.release().await.held);
    // Each release wakes one waiter, which wins its second round: no herd, no lost turn (the
    // retry delay is far longer than the test, so only wake-ups can hand the lock on).
    for t in tasks {
        let rounds = tokio::time::timeout(10 * SEC, t)
            .await
            .expect("every waiter acquires through wake-ups")
            .unwrap()
            .expect("acquire");
        assert_eq!(rounds, 2);
    }
    assert_eq!(waiters.stats().wakeups, 4, "{:?}", waiters.stats());
}

/// Clients connected to the node at `url`, as the node counts them.
async fn connected_clients(url: &str) -> u64 {
    let mut conn = redis_conn(url).await;
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// `close()` closes the connections at once (a Node or Python manager object may live on until
/// the garbage collector runs), even while a lock it granted is still around, and never
/// reconnects.
#[tokio::test]
async fn close_closes_the_connections_at_once_and_for_good() {
    let c = cluster(3);
    let url = c.urls()[0].clone();
    // The probe's own connection is counted too: compare against a baseline measured alike.
    let before = connected_clients(&url).await;
    let m = manager(&c).await;
    let lock = m.acquire(&[unique("close")], SEC).await.expect("granted");
    assert_eq!(connected_clients(&url).await, before + 1);
    lock.release().await;
    m.close();
    let deadline = Instant::now() + 2 * SEC;
    while connected_clients(&url).await != before {
        assert!(Instant::now() < deadline, "the connection stayed open");
        tokio::time::sleep(ms(20)).await;
    }
    let e = m.acquire(&[unique("close")], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("closed"), "{e}");
    tokio::time::sleep(ms(300)).await;
    assert_eq!(connected_clients(&url).await, before, "it reconnected");
    drop(lock);
}

/// An extension that a quorum confirms only after the lock's validity ran out does not bring
/// the lock back to life: in that gap another client may have held it (found by the protocol
/// model in `verify/`). The node here answers late (paused past the deadline) but still has the
/// key (its ttl outlives the client's validity by the drift allowance): the extension happened
/// on the node, yet the lock is lost and its key deleted.
#[tokio::test]
async fn an_extension_confirmed_after_the_deadline_loses_the_lock() {
    let mut c = cluster(1);
    let m = LockManager::new(
        config(&c)
            .drift_constant(ms(1500))
            .node_timeout(SEC)
            .retry_count(0),
    )
    .await
    .unwrap();
    let r = unique("late-extend");
    let lock = m.acquire(&[&r], 4 * SEC).await.unwrap();
    // Validity about 2.46 s (4 s less 1.54 s of drift); the key lives 4 s on the node, so the
    // late reply (150 ms past the deadline) still finds it, with well over a second to spare.
    let deadline = lock.deadline();
    tokio::time::sleep_until((deadline - ms(150)).into()).await;
    c.pause(0).unwrap();
    let extending = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.extend(4 * SEC).await })
    };
    tokio::time::sleep_until((deadline + ms(150)).into()).await;
    c.resume(0).unwrap();
    let e = extending
        .await
        .unwrap()
        .expect_err("an extension confirmed after the deadline revived the lock");
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert!(
        e.message()
            .contains("its validity ran out before a quorum confirmed the extension"),
        "{e}"
    );
    assert!(lock.is_lost() && !lock.is_valid());
    // The key the late extension renewed is gone, so the next client need not wait its ttl.
    let mut conn = redis_conn(&c.urls()[0]).await;
    let left: Option<String> = redis::cmd("GET")
        .arg(&r)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, None, "the renewed key was left behind");
}

#[tokio::test]
async fn min_hold_keeps_the_lock_taken_until_it_is_over() {
    let c = cluster(3);
    let m = manager(&c).await;
    let r = unique("min-hold");
    let once = AcquireOptions::try_once();
    let lock = m
        .acquire_with(&[&r], 5 * SEC, once.clone().min_hold(ms(800)))
        .await
        .unwrap();
    let granted = Instant::now();
    let rel = lock.release().await;
    assert!(rel.held, "{}", rel.report);
    assert!(!lock.is_valid());
    m.flush().await;
    // Released, yet nobody gets the lock before the hold is over: the keys stay, set to expire
    // when it is (not at the lock's 5 s ttl).
    let early = m.acquire_with(&[&r], 5 * SEC, once.clone()).await;
    assert_eq!(early.unwrap_err().kind(), ErrorKind::Contended);
    for url in c.urls() {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&r)
            .query_async(&mut redis_conn(&url).await)
            .await
            .unwrap();
        assert!(pttl > 0 && pttl <= 800, "pttl {pttl} on {url}");
    }
    let mut next = None;
    while granted.elapsed() < 3 * SEC {
        match m.acquire_with(&[&r], 5 * SEC, once.clone()).await {
            Ok(lock) => {
                next = Some(granted.elapsed());
                lock.release().await;
                break;
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::Contended),
        }
        tokio::time::sleep(ms(20)).await;
    }
    let next = next.expect("the lock is free once the hold is over");
    assert!(next >= ms(800) - ms(50), "taken again after {next:?}");
    // A release after the hold is over deletes at once.
    let lock = m
        .acquire_with(&[&r], 5 * SEC, once.clone().min_hold(ms(100)))
        .await
        .unwrap();
    tokio::time::sleep(ms(150)).await;
    assert!(lock.release().await.held);
    assert!(m.acquire_with(&[&r], SEC, once.clone()).await.is_ok());
}

#[tokio::test]
async fn min_hold_is_checked() {
    let c = cluster(1);
    let m = manager(&c).await;
    let r = unique("min-hold-bad");
    let e = m
        .acquire_with(&[&r], SEC, AcquireOptions::try_once().min_hold(ms(1500)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("min_hold"), "{e}");
    let e = m
        .semaphore(&r, 2)
        .acquire_with(SEC, AcquireOptions::try_once().min_hold(ms(100)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("min_hold"), "{e}");
}

/// Every connection to a node sets `TCP_NODELAY`, as the server does on its side: a request is
/// written at once even while an earlier one to that node is unanswered (a round decided by the
/// quorum leaves the slowest node's request outstanding), instead of waiting behind the node's
/// acknowledgement.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn connections_to_the_nodes_set_tcp_nodelay() {
    let c = cluster(1);
    let port: u16 = c.urls()[0].rsplit(':').next().unwrap().parse().unwrap();
    let m = manager(&c).await;
    let lock = m.acquire(&[unique("nodelay")], 5 * SEC).await.unwrap();
    assert!(lock.release().await.held);
    let options = common::nodelay_of_sockets_to(port);
    assert!(!options.is_empty(), "no connection to port {port} found");
    assert!(
        options.iter().all(|&on| on != 0),
        "TCP_NODELAY per connection to the node: {options:?}"
    );
}
