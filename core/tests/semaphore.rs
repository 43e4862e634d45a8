//! Counting semaphores across the quorum (SPEC §11) against real nodes: at most `limit` holders,
//! the quorum Q(limit) and its error, wake-ups, expiry, extension, fencing, keys kept apart from
//! locks, and a referee that counts holders while a node is killed and restarted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{SEC, cluster, config, ms, unique};
use ironlock::{AcquireOptions, Config, ErrorKind, LockManager};

#[tokio::test]
async fn the_quorum_grows_with_the_limit_and_bad_limits_name_the_argument() {
    let c = cluster(5);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let q: Vec<usize> = [1, 2, 3, 4, 1000]
        .iter()
        .map(|&k| m.semaphore("s", k).quorum())
        .collect();
    assert_eq!(q, [3, 4, 4, 5, 5]);
    for limit in [0, ironlock::MAX_SEMAPHORE_LIMIT + 1] {
        let e = m.semaphore("s", limit).acquire(SEC).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(
            e.message()
                .starts_with(&format!("limit: must be between 1 and 10000, got {limit}")),
            "{e}"
        );
    }
    let e = m.semaphore("", 2).acquire(SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(e.message(), "resource: empty resource name", "{e}");
}

#[tokio::test]
async fn at_most_limit_holders_and_a_release_wakes_a_waiter() {
    let c = cluster(3);
    // A 10 s retry delay: a waiter that gets its permit quickly was woken by the release.
    let m = LockManager::new(config(&c).retry_count(0).retry_delay(10 * SEC))
        .await
        .unwrap();
    let name = unique("sem");
    let sem = m.semaphore(name.clone(), 2);
    let a = sem.acquire(5 * SEC).await.unwrap();
    let b = sem.acquire(5 * SEC).await.unwrap();
    assert_eq!((a.limit(), a.quorum()), (Some(2), 3));
    assert_ne!(a.token(), b.token());
    let e = sem.acquire(5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    assert!(
        e.message().contains(&format!(
            "could not acquire a permit of semaphore [\"{name}\"] (limit 2): all 2 permits are held elsewhere"
        )),
        "{e}"
    );
    // A lock on the same name is another key: it is free.
    let lock = m.acquire(&[&name], SEC).await.expect("kept apart");
    assert!(lock.release().await.held);
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let p = sem
                .acquire_with(5 * SEC, AcquireOptions::wait(8 * SEC))
                .await
                .unwrap();
            (started.elapsed(), p)
        })
    };
    tokio::time::sleep(ms(300)).await;
    assert!(a.release().await.held);
    let (waited, c_permit) = waiter.await.unwrap();
    assert!(waited < 5 * SEC, "not woken by the release: {waited:?}");
    assert!(m.stats().wakeups >= 1);
    assert!(b.finish().await.unwrap().held);
    assert!(c_permit.release().await.held);
    // Every holder is gone, and so is the key on every node.
    let key = ironlock::scripts::semaphore_key(&name);
    for i in 0..3 {
        let mut left = String::new();
        for _ in 0..40 {
            left = c.command(i, &["EXISTS", &key]).unwrap();
            if left.starts_with(":0") {
                break;
            }
            tokio::time::sleep(ms(5)).await;
        }
        assert!(left.starts_with(":0"), "node {i}: {left}");
    }
}

#[tokio::test]
async fn expired_permits_free_their_seat_and_cannot_be_extended() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let sem = m.semaphore(unique("sem"), 1);
    let old = sem.acquire(ms(300)).await.unwrap();
    assert_eq!(
        sem.acquire(SEC).await.unwrap_err().kind(),
        ErrorKind::Contended
    );
    tokio::time::sleep(ms(400)).await;
    let new = sem
        .acquire(SEC)
        .await
        .expect("the expired holder was dropped");
    let e = old.extend(SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    new.extend(2 * SEC).await.expect("the holder extends");
    assert!(new.validity() > SEC);
    assert!(new.release().await.held);
}

#[tokio::test]
async fn fencing_tokens_increase_across_permits() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let sem = m.semaphore(unique("sem"), 3);
    let fenced = || AcquireOptions::default().fencing(true);
    let mut fences = Vec::new();
    let mut permits = Vec::new();
    for _ in 0..3 {
        let p = sem.acquire_with(SEC, fenced()).await.unwrap();
        fences.push(p.fence().expect("a fence"));
        permits.push(p);
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    for p in permits {
        assert!(p.release().await.held);
    }
}

/// SPEC §11: with N = 5 and a limit of 2, a majority (3) is not enough; with two nodes
/// unreachable no permit is granted, and the error says how many nodes a permit needs. A
/// semaphore that admitted with a majority would grant here, and three such holders can each
/// hold a majority (3 × 3 = 9 memberships in 2 × 5 = 10 seats).
#[tokio::test]
async fn a_majority_does_not_admit_a_permit_when_the_limit_is_two() {
    let mut c = cluster(5);
    let m = LockManager::new(
        config(&c)
            .retry_count(0)
            .node_timeout(ms(200))
            .connect_timeout(5 * SEC),
    )
    .await
    .unwrap();
    c.pause(3).unwrap();
    c.pause(4).unwrap();
    let sem = m.semaphore(unique("sem"), 2);
    let e = sem.acquire(5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(
        e.message().contains(
            "a limit of 2 needs 4 of the 5 nodes to admit it, so at most 1 may be down (3 of 5 nodes granted, quorum 4)"
        ),
        "{e}"
    );
    // A lock (limit 1) needs the majority only: granted.
    let lock = m.acquire(&[unique("lock")], 5 * SEC).await.unwrap();
    assert!(lock.release().await.held);
    c.resume(3).unwrap();
    c.resume(4).unwrap();
    let p = sem
        .acquire(5 * SEC)
        .await
        .expect("granted with every node back");
    assert!(p.release().await.held);
}

/// A grant's 5 ms on the referee: counts the holders (INCR), records the grant and the most
/// holders seen, and leaves (DECR).
async fn hold_counted(
    r: &mut redis::aio::MultiplexedConnection,
    grants: &AtomicU64,
    most: &AtomicU64,
) {
    let holders: u64 = redis::cmd("INCR")
        .arg("holders")
        .query_async(r)
        .await
        .unwrap();
    grants.fetch_add(1, Ordering::Relaxed);
    most.fetch_max(holders, Ordering::Relaxed);
    tokio::time::sleep(ms(5)).await;
    let _: i64 = redis::cmd("DECR")
        .arg("holders")
        .query_async(r)
        .await
        .unwrap();
}

/// Twelve workers contend for 3 permits on 5 nodes while one node is killed and restarted
/// empty (restart quarantine on); a referee counter on a separate node counts the holders at
/// every grant. Never more than 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twelve_workers_never_exceed_three_holders_while_a_node_restarts() {
    const LIMIT: u32 = 3;
    let mut c = cluster(5);
    let referee = cluster(1);
    // max_ttl 2 s: the quarantine of a fresh node is 2 s + drift + 1 s; wait it out first.
    tokio::time::sleep(ms(3100)).await;
    let resource = unique("sem");
    let config = Config::new(c.urls())
        .max_ttl(2 * SEC)
        .retry_delay(ms(20))
        .retry_jitter(ms(10))
        .node_timeout(ms(200))
        .connect_timeout(5 * SEC);
    let stop = Arc::new(AtomicBool::new(false));
    let (grants, most) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let referee_url = referee.urls()[0].clone();
    let mut workers = Vec::new();
    for _ in 0..12 {
        let (config, resource, stop) = (config.clone(), resource.clone(), stop.clone());
        let (grants, most, referee_url) = (grants.clone(), most.clone(), referee_url.clone());
        workers.push(tokio::spawn(async move {
            let m = LockManager::new(config).await.unwrap();
            let r = redis::Client::open(referee_url).unwrap();
            let mut r = r.get_multiplexed_async_connection().await.unwrap();
            let sem = m.semaphore(resource, LIMIT);
            let deadline = Instant::now() + 12 * SEC;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let Ok(p) = sem.acquire_with(SEC, AcquireOptions::wait(ms(500))).await else {
                    continue;
                };
                hold_counted(&mut r, &grants, &most).await;
                p.release().await;
            }
            m.close();
        }));
    }
    tokio::time::sleep(ms(1500)).await;
    c.kill(2).unwrap();
    tokio::time::sleep(ms(1000)).await;
    c.start_node(2).unwrap();
    tokio::time::sleep(ms(1500)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let (grants, most) = (grants.load(Ordering::Relaxed), most.load(Ordering::Relaxed));
    eprintln!("{grants} grants to 12 workers, at most {most} holders at once (limit {LIMIT})");
    assert!(grants >= 50, "too few grants to show anything: {grants}");
    assert!(most <= u64::from(LIMIT), "{most} holders at once");
    assert_eq!(most, u64::from(LIMIT), "the permits were never all in use");
}

/// The negative control of the referee test above, in the same scenario (twelve workers, limit
/// 3, five nodes, node 2 killed and restarted empty): each worker runs the real admission and
/// release scripts on every node but counts itself admitted by a MAJORITY of them (3), as
/// redis-semaphore's RedlockSemaphore does, instead of Q(3) = 4. The referee then sees more than
/// 3 holders at once, so the referee test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn negative_control_with_a_majority_quorum_the_same_scenario_exceeds_three_holders() {
    const LIMIT: u32 = 3;
    let mut c = cluster(5);
    let referee = cluster(1);
    let key = ironlock::scripts::semaphore_key(&unique("negsem"));
    let majority = ironlock::quorum(5);
    assert!(majority < ironlock::semaphore_quorum(5, LIMIT));
    let (urls, referee_url) = (c.urls(), referee.urls()[0].clone());
    let stop = Arc::new(AtomicBool::new(false));
    let (grants, most) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut workers = Vec::new();
    for w in 0..12 {
        let (urls, referee_url, key, stop) =
            (urls.clone(), referee_url.clone(), key.clone(), stop.clone());
        let (grants, most) = (grants.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            let admit = redis::Script::new(ironlock::scripts::SEM_ACQUIRE_SOURCE);
            let leave = redis::Script::new(ironlock::scripts::SEM_RELEASE_SOURCE);
            let clients: Vec<_> = urls
                .iter()
                .map(|u| redis::Client::open(u.as_str()).unwrap())
                .collect();
            let mut conns: Vec<Option<redis::aio::MultiplexedConnection>> = vec![None; 5];
            let r = redis::Client::open(referee_url).unwrap();
            let mut r = r.get_multiplexed_async_connection().await.unwrap();
            let deadline = Instant::now() + 12 * SEC;
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                round += 1;
                let token = format!("w{w}-{round}");
                for (slot, client) in conns.iter_mut().zip(&clients) {
                    if slot.is_none() {
                        let connect = client.get_multiplexed_async_connection();
                        *slot = tokio::time::timeout(ms(200), connect)
                            .await
                            .ok()
                            .and_then(Result::ok);
                    }
                }
                let asks = conns.iter().map(|conn| {
                    let (admit, key, token) = (&admit, &key, &token);
                    async move {
                        let mut conn = conn.clone()?;
                        let mut call = admit.key(key);
                        call.key(ironlock::scripts::limit_key(key));
                        call.arg(token).arg(1000).arg(0).arg(LIMIT);
                        let reply = call.invoke_async::<(i64, i64)>(&mut conn);
                        match tokio::time::timeout(ms(200), reply).await {
                            Ok(Ok((admitted, _fence))) => Some(admitted),
                            _ => None,
                        }
                    }
                });
                let replies = futures_util::future::join_all(asks).await;
                for (slot, reply) in conns.iter_mut().zip(&replies) {
                    if reply.is_none() {
                        *slot = None;
                    }
                }
                let admitted = replies.iter().filter(|r| **r == Some(1)).count();
                if admitted >= majority {
                    hold_counted(&mut r, &grants, &most).await;
                }
                for conn in conns.iter().flatten() {
                    let mut conn = conn.clone();
                    let mut call = leave.key(&key);
                    call.key(ironlock::scripts::limit_key(&key));
                    call.arg(&token).arg(0);
                    let _ =
                        tokio::time::timeout(ms(200), call.invoke_async::<i64>(&mut conn)).await;
                }
                if admitted < majority {
                    tokio::time::sleep(ms(2 + round % 5)).await;
                }
            }
        }));
    }
    tokio::time::sleep(ms(1500)).await;
    c.kill(2).unwrap();
    tokio::time::sleep(ms(1000)).await;
    c.start_node(2).unwrap();
    // As long as the referee test runs after its restart, and up to 5 s more until the control
    // has bitten (bounded: it fails if it never does).
    let restarted = Instant::now();
    while restarted.elapsed() < ms(1500)
        || (most.load(Ordering::Relaxed) <= u64::from(LIMIT) && restarted.elapsed() < 5 * SEC)
    {
        tokio::time::sleep(ms(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let (grants, most) = (grants.load(Ordering::Relaxed), most.load(Ordering::Relaxed));
    eprintln!(
        "majority quorum: {grants} grants to 12 workers, at most {most} holders at once (limit {LIMIT})"
    );
    assert!(grants >= 50, "too few grants to show anything: {grants}");
    assert!(
        most > u64::from(LIMIT),
        "a majority quorum never let more than {LIMIT} hold: the control did not bite"
    );
}

#[test]
fn q_of_limit_matches_the_spec_formula() {
    for n in 1..=9 {
        for k in 1..=20u32 {
            let q = ironlock::semaphore_quorum(n, k);
            assert_eq!(q, (k as usize * n) / (k as usize + 1) + 1);
        }
    }
    let _ = Duration::ZERO;
}

/// The negative control of SPEC §11, on real nodes with the real admission script: N = 5, limit
/// 2. Holder A is admitted by nodes {0, 1, 2}, B by {2, 3, 4}, C by {0, 1, 3} — each node admits
/// (it has fewer than 2 holders when asked), and each holder has a majority (3). A semaphore that
/// granted with a majority would have THREE valid holders of a limit of 2. Q(2) = 4 refuses all
/// three: no holder was admitted by 4 nodes.
#[tokio::test]
async fn negative_control_a_majority_admits_three_holders_of_a_limit_of_two() {
    let c = cluster(5);
    let key = ironlock::scripts::semaphore_key(&unique("neg"));
    let admit = |node: usize, token: &str| -> bool {
        let sha = c
            .command(
                node,
                &["SCRIPT", "LOAD", ironlock::scripts::SEM_ACQUIRE_SOURCE],
            )
            .unwrap();
        let sha = sha.lines().nth(1).unwrap().to_owned();
        let reply = c
            .command(
                node,
                &[
                    "EVALSHA",
                    &sha,
                    "2",
                    &key,
                    &ironlock::scripts::limit_key(&key),
                    token,
                    "10000",
                    "0",
                    "2",
                ],
            )
            .unwrap();
        // `*2\r\n:1\r\n:0\r\n` when admitted, `:0` first when full.
        reply.lines().nth(1) == Some(":1")
    };
    let plan = [("A", [0, 1, 2]), ("B", [2, 3, 4]), ("C", [0, 1, 3])];
    let mut admitted_by = Vec::new();
    for (token, nodes) in plan {
        let n = nodes.iter().filter(|&&i| admit(i, token)).count();
        admitted_by.push(n);
    }
    let majority = ironlock::quorum(5);
    let q = ironlock::semaphore_quorum(5, 2);
    assert_eq!(admitted_by, [3, 3, 3], "every node admitted its holders");
    let holders_with_majority = admitted_by.iter().filter(|&&n| n >= majority).count();
    let holders_with_q = admitted_by.iter().filter(|&&n| n >= q).count();
    assert_eq!(
        holders_with_majority, 3,
        "with a majority quorum, 3 holders of a limit of 2"
    );
    assert_eq!(holders_with_q, 0, "Q(2) = {q} grants none of them");
    // And node 2, asked by a fourth holder, is full.
    assert!(!admit(2, "D"));
}

/// A fair waiter cut off from some nodes (here: two of its five addresses lead nowhere) can never
/// collect Q(2) = 4 admissions; it must not keep a place in line that stalls the others (SPEC
/// §10: fairness never costs liveness). A fair waiter that reaches every node gets the free
/// permit while the cut-off one still waits, and no queue entry is left once both are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_that_cannot_reach_a_quorum_does_not_stall_the_line() {
    let c = cluster(5);
    let urls = c.urls();
    let settings = |urls: Vec<String>| {
        Config::new(urls)
            .restart_quarantine(false)
            .connect_timeout(ms(300))
            .retry_delay(ms(50))
            .retry_jitter(ms(10))
    };
    let all = LockManager::new(settings(urls.clone())).await.unwrap();
    let mut cut_urls = urls[..3].to_vec();
    cut_urls.extend([
        "redis://127.0.0.1:1".to_owned(),
        "redis://127.0.0.1:2".to_owned(),
    ]);
    let cut = LockManager::new(settings(cut_urls)).await.unwrap();
    let name = unique("sem-cut");
    let sem = all.semaphore(name.clone(), 2);
    let held = sem.acquire(20 * SEC).await.expect("one of two permits");
    let fair = |wait| AcquireOptions::wait(wait).fair(true);
    let w = {
        let (cut, name) = (cut.clone(), name.clone());
        tokio::spawn(async move {
            cut.semaphore(name, 2)
                .acquire_with(5 * SEC, AcquireOptions::wait(3 * SEC).fair(true))
                .await
        })
    };
    tokio::time::sleep(ms(300)).await; // the cut-off waiter has had several rounds
    assert!(!w.is_finished());
    let x = sem
        .acquire_with(5 * SEC, fair(2 * SEC))
        .await
        .expect("the free permit, although a cut-off waiter came first");
    let e = w.await.unwrap().expect_err("never 4 admitting nodes");
    assert!(
        matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Contended),
        "{e}"
    );
    x.release().await;
    held.release().await;
    all.flush().await;
    cut.flush().await;
    for u in &urls {
        let mut conn = redis::Client::open(u.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let queued: u64 = redis::cmd("EXISTS")
            .arg(ironlock::scripts::queue_key(
                &ironlock::scripts::semaphore_key(&name),
            ))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(queued, 0, "a queue is left on {u}");
    }
}

/// Three requesters (three managers, as three `ironlock run --slots 2 -w 0` processes) each try
/// once, at the same moment, for one of 2 permits on 3 nodes (Q(2) = 3: every node must admit).
/// Two of them can be granted; when the nodes admit different pairs, the vote splits and none
/// may be. Returns the trials (of `trials`) in which fewer than 2 were granted.
async fn split_trials(trials: usize) -> (usize, Duration) {
    let c = cluster(3);
    let mut managers = Vec::new();
    for _ in 0..3 {
        managers.push(LockManager::new(config(&c).retry_count(0)).await.unwrap());
    }
    let (mut short, mut slowest) = (0, Duration::ZERO);
    for t in 0..trials {
        let name = format!("{}-{t}", unique("split"));
        let start = Arc::new(tokio::sync::Barrier::new(3));
        let tries: Vec<_> = managers
            .iter()
            .map(|m| {
                let (sem, start) = (m.semaphore(name.clone(), 2), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    let started = Instant::now();
                    let got = sem.acquire_with(5 * SEC, AcquireOptions::try_once()).await;
                    (got, started.elapsed())
                })
            })
            .collect();
        let mut granted = Vec::new();
        for t in tries {
            let (got, took) = t.await.unwrap();
            slowest = slowest.max(took);
            match got {
                Ok(p) => granted.push(p),
                Err(e) => assert_eq!(e.kind(), ErrorKind::Contended, "{e}"),
            }
        }
        assert!(granted.len() <= 2, "{} permits of 2", granted.len());
        if granted.len() < 2 {
            short += 1;
        }
        for p in granted {
            p.release().await;
        }
    }
    for m in &managers {
        m.close();
    }
    (short, slowest)
}

/// The split-vote rate of concurrent try-once permits (issue 29): three requesters, limit 2,
/// three nodes, 200 trials. Measured on a 2-core machine: before split votes were told apart
/// and re-tried at once, 23 to 65 of 200 trials (12-33 %) granted fewer than 2 permits; with up
/// to 3 quick re-tries of a split (a random pause of at most 5 ms each), 0 or 1 of 200 (also with
/// three runs at once), the slowest try-once taking 4-22 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_concurrent_try_once_permits_of_two_mostly_get_two() {
    const TRIALS: usize = 200;
    let (short, slowest) = split_trials(TRIALS).await;
    eprintln!(
        "{short} of {TRIALS} trials granted fewer than 2 of 2 permits to 3 requesters; the slowest try-once took {slowest:?}"
    );
    assert!(
        short <= TRIALS / 20,
        "{short} of {TRIALS} trials granted fewer than 2 permits"
    );
    // A try-once stays quick: never a retry_delay (200 ms) of sleep.
    assert!(slowest < ms(200), "a try-once took {slowest:?}");
}

/// Seats of two other requests (never expiring) on node `i`: the semaphore is full there.
fn fill(c: &ironlock_harness::Cluster, i: usize, key: &str) {
    let far = "99999999999999";
    c.command(i, &["ZADD", key, far, "other-1", far, "other-2"])
        .unwrap();
}

/// Issue 29: a permit refused by fewer full nodes than permits held elsewhere would fill is a
/// split vote: the error says the nodes disagreed (not "all 2 permits are held elsewhere"), and
/// the try-once re-tried it at once, a few times, without sleeping a retry delay. Every node
/// full is "held elsewhere", in one round. The counts of both messages add up to the nodes.
#[tokio::test]
async fn a_split_vote_says_the_nodes_disagreed_and_is_retried_at_once() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0).retry_delay(10 * SEC))
        .await
        .unwrap();
    let name = unique("split");
    let key = ironlock::scripts::semaphore_key(&name);
    fill(&c, 0, &key);
    let sem = m.semaphore(name.clone(), 2);
    let started = Instant::now();
    let e = sem.acquire(5 * SEC).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    let text = e.message();
    assert!(
        text.contains(&format!(
            "could not acquire a permit of semaphore [\"{name}\"] (limit 2): the nodes disagreed: 2 of 3 admitted it and 1 of 3 was full"
        )),
        "{text}"
    );
    assert!(text.contains("so a permit may be free; retry"), "{text}");
    assert!(!text.contains("permits are held elsewhere"), "{text}");
    assert!(
        text.contains("(2 of 3 nodes granted, quorum 3): 1 of 3 nodes did not grant: full ("),
        "{text}"
    );
    assert_eq!(common::assert_counts_add_up(text, 3), [2, 1]);
    let report = e.report().expect("a report");
    assert_eq!(report.rounds, 4, "one round and 3 quick re-tries: {report}");
    assert!(took < SEC, "slept a retry delay: {took:?}");
    // Nothing is left behind where it was admitted.
    m.flush().await;
    for i in 1..3 {
        assert_eq!(
            c.command(i, &["EXISTS", &key]).unwrap(),
            ":0\r\n",
            "node {i}"
        );
    }
    // Every node full: the permits are held elsewhere, and one round says so.
    fill(&c, 1, &key);
    fill(&c, 2, &key);
    let e = sem.acquire(5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    let text = e.message();
    assert!(
        text.contains(
            "(limit 2): all 2 permits are held elsewhere (0 of 3 nodes granted, quorum 3): 3 of 3 nodes did not grant: full ("
        ),
        "{text}"
    );
    assert_eq!(e.report().unwrap().rounds, 1, "{e}");
    common::assert_counts_add_up(text, 3);
}

/// Issue 29: every holder of a semaphore uses one limit. The limit is recorded on the nodes
/// (`<semaphore key>:ironlock:limit`, living as long as the semaphore key); a request with
/// another limit is refused naming `limit` — at once, even with a wait, and also a fair one —
/// while a permit is held, and takes the limit over once none is.
#[tokio::test]
async fn a_semaphore_in_use_refuses_another_limit_until_no_permit_is_held() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let name = unique("limits");
    let key = ironlock::scripts::semaphore_key(&name);
    let limit_key = ironlock::scripts::limit_key(&key);
    // The record's name, as every language writes it: in the resource's hash slot.
    assert_eq!(
        limit_key,
        format!("{name}{{{name}}}:ironlock:semaphore:ironlock:limit")
    );
    let a = m.semaphore(name.clone(), 2).acquire(5 * SEC).await.unwrap();
    for i in 0..3 {
        assert_eq!(c.command(i, &["GET", &limit_key]).unwrap(), "$1\r\n2\r\n");
        let pttl: i64 = c.command(i, &["PTTL", &limit_key]).unwrap()[1..]
            .trim()
            .parse()
            .unwrap();
        assert!(pttl > 4000 && pttl <= 5000, "node {i}: {pttl}");
    }
    // One permit of two held: a limit of 3 is refused all the same (it was granted before).
    let three = m.semaphore(name.clone(), 3);
    let started = Instant::now();
    let e = three
        .acquire_with(5 * SEC, AcquireOptions::wait(3 * SEC))
        .await
        .unwrap_err();
    assert!(started.elapsed() < SEC, "waited: {:?}", started.elapsed());
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(
        e.message().starts_with(&format!(
            "limit: the semaphore \"{name}\" is in use with limit 2 on 3 of 3 nodes; got 3"
        )),
        "{e}"
    );
    let report = e.report().expect("a report");
    assert_eq!(report.count(ironlock::Vote::Against), 3, "{report}");
    assert!(
        report
            .nodes
            .iter()
            .all(|r| r.error.as_deref() == Some("in use with limit 2")),
        "{report}"
    );
    let e = three
        .acquire_with(5 * SEC, AcquireOptions::try_once().fair(true))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "fair: {e}");
    let b = m.semaphore(name.clone(), 2).acquire(5 * SEC).await.unwrap();
    assert!(a.release().await.held);
    // One holder left: still in use with 2 (also with a limit of 1).
    let e = m.semaphore(name.clone(), 1).acquire(SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(b.release().await.held);
    // No permit held: the record went with the last holder, and the limit may change.
    m.flush().await;
    for i in 0..3 {
        assert_eq!(c.command(i, &["EXISTS", &limit_key]).unwrap(), ":0\r\n");
    }
    let p = three
        .acquire(5 * SEC)
        .await
        .expect("no permit held: limit 3");
    p.extend(8 * SEC).await.unwrap();
    for i in 0..3 {
        assert_eq!(c.command(i, &["GET", &limit_key]).unwrap(), "$1\r\n3\r\n");
        let pttl: i64 = c.command(i, &["PTTL", &limit_key]).unwrap()[1..]
            .trim()
            .parse()
            .unwrap();
        assert!(
            pttl > 7000,
            "the record lives on with the extension: {pttl}"
        );
    }
    assert!(p.release().await.held);
    // A permit that expired holds nothing: its limit does not count.
    let short = m.semaphore(name.clone(), 2).acquire(ms(200)).await.unwrap();
    tokio::time::sleep(ms(300)).await;
    let p = three
        .acquire(SEC)
        .await
        .expect("the expired permit's limit is gone");
    assert!(p.release().await.held);
    drop(short);
    // Fair waiters leave no queue behind.
    for i in 0..3 {
        let queue = ironlock::scripts::queue_key(&key);
        assert_eq!(c.command(i, &["EXISTS", &queue]).unwrap(), ":0\r\n");
    }
}

/// Issue 29: `inspect` of a semaphore's name shows its permits on each node (token and ttl on
/// the node's clock) and the limit in use, not a free lock key.
#[tokio::test]
async fn inspect_shows_the_permits_of_a_semaphore() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let name = unique("inspect");
    let sem = m.semaphore(name.clone(), 2);
    let a = sem.acquire(5 * SEC).await.unwrap();
    let b = sem.acquire(3 * SEC).await.unwrap();
    let holders = m.inspect(&name).await.unwrap();
    assert_eq!(holders.len(), 3);
    for h in &holders {
        assert_eq!(
            (h.token.as_deref(), h.error.as_deref()),
            (None, None),
            "{h:?}"
        );
        assert_eq!(h.limit, Some(2), "{h:?}");
        let tokens: Vec<&str> = h.permits.iter().map(|p| p.token.as_str()).collect();
        assert_eq!(tokens, [a.token(), b.token()], "longest-lived first: {h:?}");
        assert!(
            h.permits[0].ttl > 4 * SEC && h.permits[0].ttl <= 5 * SEC,
            "{h:?}"
        );
        assert!(
            h.permits[1].ttl > 2 * SEC && h.permits[1].ttl <= 3 * SEC,
            "{h:?}"
        );
    }
    a.release().await;
    b.release().await;
    m.flush().await;
    let holders = m.inspect(&name).await.unwrap();
    assert!(
        holders
            .iter()
            .all(|h| h.permits.is_empty() && h.limit.is_none()),
        "{holders:?}"
    );
}
