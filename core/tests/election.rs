//! Leader election against real nodes: candidates lead in the order they queued, with terms
//! that grow; `leader()` and `observe()` see each leader with its value; proclaim; resign wakes
//! the next; a cancelled campaign leaves the line on every node; a leader whose nodes go away
//! is told it lost before its validity ends; an abandoned leadership passes on once it expires;
//! bad input names its argument; an observer ends when the manager closes.

mod common;

use std::time::{Duration, Instant};

use common::{SEC, cluster, config, ms, unique};
use ironlock::{ErrorKind, LockManager};

#[tokio::test]
async fn candidates_lead_in_line_and_observers_see_every_leader_in_order() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_delay(SEC)).await.unwrap();
    let name = unique("elect");
    let e = m.election(name.clone());
    assert_eq!(e.leader().await.unwrap(), None);
    let mut observer = e.observe().unwrap();
    assert_eq!(observer.next().await.unwrap(), None, "nobody leads yet");

    let a = e.campaign("a:1", 5 * SEC).await.unwrap();
    assert!(a.is_leader());
    let seen = observer.next().await.unwrap().expect("a leads");
    assert_eq!((seen.value.as_str(), seen.term), ("a:1", a.term()));
    assert_eq!(seen.token, a.lock().token());
    assert!(
        seen.validity > 4 * SEC && seen.validity <= 5 * SEC,
        "{seen:?}"
    );

    // B then C queue behind A, in that order.
    let (eb, ec) = (e.clone(), e.clone());
    let b = tokio::spawn(async move { eb.campaign("b:1", 5 * SEC).await });
    tokio::time::sleep(ms(150)).await;
    let cc = tokio::spawn(async move { ec.campaign("c:1", 5 * SEC).await });
    tokio::time::sleep(ms(150)).await;

    a.proclaim("a:2").await.unwrap();
    let seen = observer.next().await.unwrap().expect("a still leads");
    assert_eq!((seen.value.as_str(), seen.term), ("a:2", a.term()));
    assert_eq!(e.leader().await.unwrap().unwrap().value, "a:2");

    let resigned_at = Instant::now();
    assert!(a.resign().await.held);
    assert!(!a.is_leader());
    let e2 = a.proclaim("a:3").await.unwrap_err();
    assert_eq!(e2.kind(), ErrorKind::Lost, "{e2}");
    let b = b.await.unwrap().unwrap();
    // Woken by the resignation, not by its 1 s retry.
    assert!(
        resigned_at.elapsed() < ms(900),
        "{:?}",
        resigned_at.elapsed()
    );
    assert!(
        b.term() > a.term(),
        "terms grow: {} then {}",
        a.term(),
        b.term()
    );
    assert!(!cc.is_finished(), "C queued after B");
    let mut seen_terms = vec![a.term()];
    loop {
        let l = observer.next().await.unwrap();
        match l {
            Some(l) if l.token == b.lock().token() => {
                assert_eq!(l.value, "b:1");
                seen_terms.push(l.term);
                break;
            }
            // A read between A's resignation and B's record: nobody leads for a moment.
            None => {}
            Some(other) => panic!("unexpected leader {other:?}"),
        }
    }
    b.resign().await;
    let c1 = cc.await.unwrap().unwrap();
    assert!(c1.term() > b.term());
    loop {
        if let Some(l) = observer.next().await.unwrap() {
            assert_eq!(l.value, "c:1");
            seen_terms.push(l.term);
            break;
        }
    }
    assert!(seen_terms.windows(2).all(|w| w[0] < w[1]), "{seen_terms:?}");
    c1.resign().await;
    // Neither the key nor a leader record is left (the term counter stays, the line's ticket
    // counter expires).
    let record = format!("{name}{{{name}}}:ironlock:leader");
    for i in 0..3 {
        let left = c.command(i, &["EXISTS", &name, &record]).unwrap();
        assert_eq!(left.trim(), ":0", "node {i}");
    }
    // The observer ends once the manager is closed.
    m.close();
    let end = observer.next().await.unwrap_err();
    assert_eq!(end.kind(), ErrorKind::Unavailable, "{end}");
}

#[tokio::test]
async fn a_cancelled_campaign_leaves_the_line_and_an_abandoned_leadership_passes_on() {
    let c = cluster(3);
    let m = LockManager::new(config(&c)).await.unwrap();
    let name = unique("elect");
    let e = m.election(name.clone());
    let a = e.campaign("a", ms(1500)).await.unwrap();
    // A campaign that gives up (or is dropped) takes its place out of every node's line.
    let gave_up = e.campaign_with("b", SEC, Some(ms(300))).await.unwrap_err();
    assert_eq!(gave_up.kind(), ErrorKind::Contended, "{gave_up}");
    let dropped = tokio::time::timeout(ms(300), e.campaign("c", SEC)).await;
    assert!(dropped.is_err());
    tokio::time::sleep(ms(200)).await;
    for i in 0..3 {
        let queue = format!("{name}{{{name}}}:ironlock:queue");
        let n = c.command(i, &["ZCARD", &queue]).unwrap();
        assert_eq!(n.trim(), ":0", "node {i}: the line still holds a candidate");
    }
    // The leader goes away without resigning (its process died): once its key expires, the
    // next candidate leads, with a larger term.
    let (term, deadline) = (a.term(), a.lock().deadline());
    drop(a);
    let b = e.campaign_with("b", SEC, Some(5 * SEC)).await.unwrap();
    assert!(
        Instant::now() > deadline,
        "granted while the old leader was still valid"
    );
    assert!(b.term() > term);
    b.resign().await;
}

#[tokio::test]
async fn a_leader_cut_off_from_its_nodes_is_told_before_its_validity_ends() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).node_timeout(ms(100)))
        .await
        .unwrap();
    let e = m.election(unique("elect"));
    let ttl = 2 * SEC;
    let granted = Instant::now();
    let l = e.campaign("x", ttl).await.unwrap();
    c.pause(0).unwrap();
    c.pause(1).unwrap();
    let told = tokio::time::timeout(5 * SEC, l.lost()).await;
    assert!(told.is_ok(), "never told");
    let at = granted.elapsed();
    assert!(l.is_lost() && !l.is_leader());
    // A tenth of the ttl before the lock's own validity (ttl − drift) would end.
    let drift = ironlock::drift(ttl, 0.01, ms(2));
    assert!(at <= ttl - drift - ttl / 10 + ms(50), "told at {at:?}");
    c.resume(0).unwrap();
    c.resume(1).unwrap();
}

#[tokio::test]
async fn bad_input_names_its_argument() {
    let c = cluster(1);
    let m = LockManager::new(config(&c)).await.unwrap();
    let e = m.election("");
    assert_eq!(
        e.campaign("v", SEC).await.unwrap_err().message(),
        "name: empty election name"
    );
    let err = m.election("e:ironlock:queue").leader().await.unwrap_err();
    assert!(
        err.message()
            .starts_with("name: a name ending in \":ironlock:queue\""),
        "{err}"
    );
    let e = m.election("ok");
    let long = "v".repeat(ironlock::MAX_ELECTION_VALUE_LEN + 1);
    let err = e.campaign(&long, SEC).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.message().starts_with("value: at most 65536 bytes"),
        "{err}"
    );
    let err = e.campaign("v", Duration::ZERO).await.unwrap_err();
    assert!(err.message().starts_with("ttl: "), "{err}");
    let l = e.campaign("v", SEC).await.unwrap();
    let err = l.proclaim(&long).await.unwrap_err();
    assert!(err.message().starts_with("value: "), "{err}");
    l.resign().await;
}

/// Four candidates on two managers campaign over and over on 5 nodes while node 2 is killed
/// and restarted empty twice (restart quarantine on); every third leadership is abandoned
/// (dropped without resigning, as a leader whose process died). A referee sees at most one
/// leader with valid leadership at any moment, and terms that only grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_one_valid_leader_and_growing_terms_while_leaders_die_and_a_node_restarts() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut c = cluster(5);
    // max_ttl 2 s: the quarantine of a fresh node is 2 s + drift + 1 s; wait it out first.
    tokio::time::sleep(ms(3100)).await;
    let cfg = ironlock::Config::new(c.urls())
        .max_ttl(2 * SEC)
        .retry_delay(ms(20))
        .node_timeout(ms(200))
        .connect_timeout(5 * SEC);
    let managers = [
        LockManager::new(cfg.clone()).await.unwrap(),
        LockManager::new(cfg).await.unwrap(),
    ];
    let name = unique("elect");
    // (leaders now, last term), terms out of order, overlaps, grants.
    let referee = Arc::new(std::sync::Mutex::new((0u32, 0u64)));
    let (overlaps, regressions, grants) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let until = Instant::now() + 7 * SEC;
    let mut tasks = Vec::new();
    for t in 0..4usize {
        let e = managers[t % 2].election(name.clone());
        let (referee, overlaps, regressions, grants) = (
            referee.clone(),
            overlaps.clone(),
            regressions.clone(),
            grants.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0u32;
            while Instant::now() < until {
                let Ok(l) = e.campaign_with(&format!("c{t}"), ms(800), Some(SEC)).await else {
                    continue;
                };
                n += 1;
                {
                    let mut r = referee.lock().unwrap();
                    r.0 += 1;
                    if r.0 > 1 {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    if l.term() <= r.1 {
                        regressions.fetch_add(1, Ordering::Relaxed);
                    }
                    r.1 = r.1.max(l.term());
                }
                grants.fetch_add(1, Ordering::Relaxed);
                // Lead for a while, leaving the referee before the leadership ends.
                let lead = ms(40 + 60 * u64::from(n % 3));
                let until = Instant::now() + lead;
                while Instant::now() < until && l.is_leader() {
                    tokio::time::sleep(ms(10).min(l.validity())).await;
                }
                referee.lock().unwrap().0 -= 1;
                if n % 3 == 0 {
                    // Died: never resigns; the next leader waits for the key to expire.
                    drop(l);
                } else {
                    l.resign().await;
                }
            }
        }));
    }
    for _ in 0..2 {
        tokio::time::sleep(ms(1500)).await;
        c.kill(2).unwrap();
        tokio::time::sleep(ms(800)).await;
        c.start_node(2).unwrap();
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (overlaps, regressions, grants) = (
        overlaps.load(Ordering::Relaxed),
        regressions.load(Ordering::Relaxed),
        grants.load(Ordering::Relaxed),
    );
    eprintln!("{grants} leaderships, {overlaps} overlaps, {regressions} terms out of order");
    assert_eq!((overlaps, regressions), (0, 0), "{grants} leaderships");
    assert!(
        grants >= 10,
        "too few leaderships to show anything: {grants}"
    );
}

/// A read that finds fewer than a quorum of nodes holding the leader — one restarted empty,
/// another paused — does not make an observer report "nobody leads" while the leader may still
/// be valid; a resignation, which a quorum sees, does.
#[tokio::test]
async fn an_observer_reports_nobody_only_when_a_quorum_says_the_leader_is_gone() {
    let mut c = cluster(3);
    let m = LockManager::new(config(&c).node_timeout(ms(100)).reseat(false))
        .await
        .unwrap();
    let e = m.election(unique("elect"));
    let mut observer = e.observe().unwrap();
    assert_eq!(observer.next().await.unwrap(), None);
    let leader = e.campaign("a", 10 * SEC).await.unwrap();
    assert_eq!(observer.next().await.unwrap().unwrap().term, leader.term());
    c.restart(2).unwrap();
    c.pause(1).unwrap();
    let flap = tokio::time::timeout(ms(1500), observer.next()).await;
    assert!(
        flap.is_err(),
        "reported a change from a partial view: {flap:?}"
    );
    c.resume(1).unwrap();
    assert!(leader.resign().await.held);
    let gone = tokio::time::timeout(5 * SEC, observer.next()).await;
    assert_eq!(gone.expect("told").unwrap(), None);
}
