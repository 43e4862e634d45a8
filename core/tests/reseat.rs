//! Re-seating (SPEC §12) against real nodes: a lock held under auto-extension survives a rolling
//! restart of every node; with `reseat` off the same run loses it; a contender never gets it;
//! re-seating never writes to a node that did not restart nor over another token, and a failed
//! extension takes its re-seated keys back; release wake-ups come back with the restarted nodes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Cluster, SEC, cluster, eventually, ms, reconnected, restart, unique};
use ironlock::{AcquireOptions, Config, ErrorKind, LockManager, Vote};

/// One command on one node, through a connection of its own.
async fn cmd<T: redis::FromRedisValue>(url: &str, args: &[&str]) -> T {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(&mut conn)
        .await
        .unwrap()
}

async fn get(url: &str, key: &str) -> Option<String> {
    cmd(url, &["GET", key]).await
}

/// Restart quarantine on, with a short `max_ttl` so that a restarted node sits out
/// `max_ttl` + drift + 1 s.
fn quarantined(c: &Cluster, max_ttl: Duration) -> Config {
    Config::new(c.urls())
        .max_ttl(max_ttl)
        .retry_count(0)
        .connect_timeout(5 * SEC)
        .node_timeout(ms(200))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reseating_writes_only_to_restarted_nodes_never_over_a_token_and_rolls_back() {
    let mut c = cluster(5);
    let urls = c.urls();
    let m = LockManager::new(quarantined(&c, 3 * SEC)).await.unwrap();
    // Fresh nodes are quarantined for max_ttl + drift + 1 s.
    tokio::time::sleep(ms(4200)).await;
    let r = unique("reseat");
    let lock = m.acquire(&[&r], 3 * SEC).await.expect("granted");

    // A node that restarted lost the key; the extension writes it back there. It stays in
    // quarantine (its vote does not count yet) and the report says why.
    restart(&mut c, &m, 4).await;
    assert_eq!(get(&urls[4], &r).await, None, "the restart lost the key");
    lock.extend(3 * SEC).await.expect("four nodes hold it");
    let report = lock.report();
    // The round may be decided before node 4 answers; its re-seat happens all the same.
    assert!(
        matches!(report.nodes[4].vote, Vote::Reseated | Vote::Pending),
        "{report:?}"
    );
    assert!(!report.nodes[4].counted(), "{report:?}");
    tokio::time::sleep(ms(100)).await;
    assert_eq!(get(&urls[4], &r).await.as_deref(), Some(lock.token()));
    assert_eq!(m.node_status()[4].reseats, 1);

    // A key gone from a node that did not restart is never written back.
    let deleted: i64 = cmd(&urls[0], &["DEL", &r]).await;
    assert_eq!(deleted, 1);
    lock.extend(3 * SEC).await.expect("nodes 1 to 3 hold it");
    assert!(matches!(
        lock.report().nodes[0].vote,
        Vote::Against | Vote::Pending
    ));
    tokio::time::sleep(ms(100)).await;
    assert_eq!(get(&urls[0], &r).await, None);
    assert_eq!(m.node_status()[0].reseats, 0);

    // A restarted node where another token now holds the key is not re-seated; a restarted
    // node with the key absent is, but this extension fails (node 1 counts, node 4 may: 0 and 3
    // refuse, 2 is in quarantine), so it takes that key back.
    restart(&mut c, &m, 3).await;
    restart(&mut c, &m, 2).await;
    let _: () = cmd(&urls[3], &["SET", &r, "someone-else"]).await;
    let deadline = lock.deadline();
    let e = lock.extend(3 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let votes: Vec<Vote> = e.report().unwrap().nodes.iter().map(|n| n.vote).collect();
    assert!(votes.contains(&Vote::Against), "{e}");
    assert!(!votes.contains(&Vote::Error), "{e}");
    tokio::time::sleep(ms(100)).await;
    assert_eq!(get(&urls[3], &r).await.as_deref(), Some("someone-else"));
    assert_eq!(m.node_status()[3].reseats, 0, "never over another token");
    assert_eq!(m.node_status()[2].reseats, 1, "node 2 was re-seated");
    assert_eq!(get(&urls[2], &r).await, None, "and its key taken back");
    assert_eq!(
        lock.deadline(),
        deadline,
        "a failed extension keeps the deadline"
    );
    assert!(!lock.is_lost());
    lock.release().await;
}

/// A re-seat that the round did not wait for may have failed on its node (here: another
/// client's key was still there): the next extension asks that node again instead of never. A
/// node that was down at acquire and restarted is re-seated too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_after_the_acquire_is_reseated_even_if_it_did_not_answer_yes() {
    let mut c = cluster(5);
    let urls = c.urls();
    let m = LockManager::new(quarantined(&c, 3 * SEC)).await.unwrap();
    tokio::time::sleep(ms(4200)).await;
    let r = unique("late-reseat");
    let lock = m.acquire(&[&r], 3 * SEC).await.expect("granted");
    restart(&mut c, &m, 4).await;
    // Node 4 holds another client's key and answers late: the round is decided without it and
    // the re-seat it was sent finds that key.
    // (The other key outlives the pause however slow the machine: it is deleted by hand below,
    // not left to expire in a race with the late re-seat.)
    let _: () = cmd(&urls[4], &["SET", &r, "someone-else", "PX", "10000"]).await;
    let _: () = cmd(&urls[4], &["CLIENT", "PAUSE", "300"]).await;
    lock.extend(3 * SEC).await.expect("four nodes hold it");
    assert_eq!(
        lock.report().nodes[4].vote,
        Vote::Pending,
        "{:?}",
        lock.report()
    );
    // The pause is over: the late re-seat found the other key and left it alone. It goes now.
    tokio::time::sleep(ms(500)).await;
    assert_eq!(get(&urls[4], &r).await.as_deref(), Some("someone-else"));
    assert_eq!(m.node_status()[4].reseats, 0);
    let deleted: i64 = cmd(&urls[4], &["DEL", &r]).await;
    assert_eq!(deleted, 1);
    lock.extend(3 * SEC).await.expect("granted");
    tokio::time::sleep(ms(100)).await;
    assert_eq!(get(&urls[4], &r).await.as_deref(), Some(lock.token()));
    assert_eq!(m.node_status()[4].reseats, 1);
    lock.release().await;

    // A node that was down when the lock was granted and comes back (a new process) restarted
    // after the acquire: it is re-seated like the others.
    let before = m.node_status()[3].run_id.clone();
    tokio::task::block_in_place(|| c.kill(3)).unwrap();
    let deadline = Instant::now() + 5 * SEC;
    while m.node_status()[3].connected {
        assert!(
            Instant::now() < deadline,
            "the kill of node 3 went unnoticed"
        );
        if let Ok(probe) = m.acquire(&[unique("probe")], ms(500)).await {
            probe.release().await;
        }
        tokio::time::sleep(ms(20)).await;
    }
    let r = unique("down-at-acquire");
    let lock = m.acquire(&[&r], 3 * SEC).await.expect("four nodes");
    assert_eq!(
        lock.report().nodes[3].vote,
        Vote::Error,
        "{:?}",
        lock.report()
    );
    tokio::task::block_in_place(|| c.start_node(3)).unwrap();
    reconnected(&m, 3, &before).await;
    lock.extend(3 * SEC).await.expect("granted");
    tokio::time::sleep(ms(100)).await;
    assert_eq!(get(&urls[3], &r).await.as_deref(), Some(lock.token()));
    assert_eq!(m.node_status()[3].reseats, 1);
    lock.release().await;
    assert_eq!(get(&urls[3], &r).await, None);
}

/// A connection to a node that broke while the server kept running (here `CLIENT KILL`) is not
/// a restart: the manager reconnects to the same process (same `run_id`), whose data did not
/// go away, so a key of the lock missing there is not written back — only a restarted node's
/// keys are re-seated. (Were a reconnection counted as a new lifetime of the node's data, the
/// next extension would re-seat here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnection_to_the_same_server_process_is_not_a_restart() {
    let c = cluster(3);
    let urls = c.urls();
    let m = LockManager::new(quarantined(&c, 2 * SEC)).await.unwrap();
    // Past the quarantine of a node this young (max_ttl + drift + 1 s), with a second to spare:
    // the quarantine goes by the server's uptime, so a reconnection now owes none.
    tokio::time::sleep(ms(4200)).await;
    let r = unique("same-process");
    let lock = m.acquire(&[&r], 2 * SEC).await.expect("granted");
    let before = m.node_status()[0].clone();
    let deleted: i64 = cmd(&urls[0], &["DEL", &r]).await;
    assert_eq!(deleted, 1);
    // Every other plain connection to node 0 (the manager's) is closed; the server runs on.
    let killed: i64 = cmd(
        &urls[0],
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    )
    .await;
    assert!(
        killed >= 1,
        "the manager's connection to node 0 was not found"
    );
    let reconnected = || async {
        if let Ok(probe) = m.acquire(&[unique("probe")], ms(500)).await {
            probe.release().await;
        }
        let st = &m.node_status()[0];
        st.connected && st.reconnects > before.reconnects
    };
    let why = || format!("node 0 never reconnected: {:?}", m.node_status()[0]);
    eventually(5 * SEC, reconnected, why).await;
    let after = m.node_status()[0].clone();
    assert_eq!(after.run_id, before.run_id, "the same server process");
    assert!(
        after.eligible,
        "a reconnection is not quarantined: {after:?}"
    );
    assert_eq!(after.quarantines, before.quarantines, "{after:?}");

    lock.extend(2 * SEC).await.expect("nodes 1 and 2 hold it");
    assert!(
        matches!(lock.report().nodes[0].vote, Vote::Against | Vote::Pending),
        "{:?}",
        lock.report()
    );
    tokio::time::sleep(ms(100)).await;
    assert_eq!(get(&urls[0], &r).await, None, "never written back");
    assert_eq!(m.node_status()[0].reseats, 0);
    assert!(lock.release().await.held);
    m.flush().await;
    for url in &urls {
        assert_eq!(get(url, &r).await, None, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reseat_off_leaves_a_restarted_node_empty() {
    let mut c = cluster(3);
    let urls = c.urls();
    let m = LockManager::new(quarantined(&c, 2 * SEC).reseat(false))
        .await
        .unwrap();
    tokio::time::sleep(ms(3200)).await;
    let r = unique("noreseat");
    let lock = m.acquire(&[&r], 2 * SEC).await.expect("granted");
    restart(&mut c, &m, 2).await;
    lock.extend(2 * SEC).await.expect("two nodes hold it");
    assert!(matches!(
        lock.report().nodes[2].vote,
        Vote::Against | Vote::Pending
    ));
    tokio::time::sleep(ms(100)).await;
    assert_eq!(get(&urls[2], &r).await, None);
    assert_eq!(m.node_status()[2].reseats, 0);
    lock.release().await;
}

/// One auto-extended lock per manager (re-seat on, re-seat off) while every one of 5 nodes is
/// killed and restarted once, one after another; a third manager contends all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_through_a_rolling_restart_of_every_node_is_kept() {
    let mut c = cluster(5);
    // Quarantine 1.5 s + drift + 1 s: a restarted node counts again well before the next one
    // restarts; auto-extension runs every ~330 ms.
    let config = || quarantined(&c, ms(1500));
    let on = LockManager::new(config()).await.unwrap();
    let off = LockManager::new(config().reseat(false)).await.unwrap();
    let other = LockManager::new(config()).await.unwrap();
    tokio::time::sleep(ms(2700)).await;
    let (r_on, r_off) = (unique("rolling-on"), unique("rolling-off"));
    let held_on = on.acquire(&[&r_on], SEC).await.expect("granted");
    let held_off = off.acquire(&[&r_off], SEC).await.expect("granted");
    let _keep_on = held_on.keep_alive();
    let _keep_off = held_off.keep_alive();
    let told_lost = Arc::new(AtomicBool::new(false));
    {
        let (lock, told) = (held_on.clone(), told_lost.clone());
        tokio::spawn(async move {
            lock.lost().await;
            if !lock.is_released() {
                told.store(true, Ordering::SeqCst);
            }
        });
    }
    // The contender tries both resources every 20 ms, one round each.
    let stop = Arc::new(AtomicBool::new(false));
    let (stolen, tries) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let contender = {
        let (stop, stolen, tries) = (stop.clone(), stolen.clone(), tries.clone());
        let r = r_on.clone();
        tokio::spawn(async move {
            let once = AcquireOptions {
                retry_count: Some(0),
                ..Default::default()
            };
            while !stop.load(Ordering::SeqCst) {
                tries.fetch_add(1, Ordering::SeqCst);
                if let Ok(l) = other.acquire_with(&[&r], SEC, once.clone()).await {
                    stolen.fetch_add(1, Ordering::SeqCst);
                    l.release().await;
                }
                tokio::time::sleep(ms(20)).await;
            }
        })
    };
    let start = Instant::now();
    for i in 0..5 {
        tokio::time::sleep(ms(7000)).await;
        let before = on.node_status()[i].run_id.clone();
        tokio::task::block_in_place(|| c.restart(i)).unwrap();
        eprintln!(
            "{:>5.1} s: node {i} restarted (was {before}); on: valid {}, off: valid {} lost {}",
            start.elapsed().as_secs_f64(),
            held_on.is_valid(),
            held_off.is_valid(),
            held_off.is_lost()
        );
    }
    tokio::time::sleep(ms(4000)).await;
    stop.store(true, Ordering::SeqCst);
    contender.await.unwrap();

    let reseats: u64 = on.node_status().iter().map(|s| s.reseats).sum();
    assert!(
        held_on.is_valid() && !held_on.is_lost(),
        "re-seat on: the lock was lost ({:?})",
        held_on.report()
    );
    assert!(
        !told_lost.load(Ordering::SeqCst),
        "the holder was told it was lost"
    );
    assert!(reseats >= 5, "every node re-seated: {:?}", on.node_status());
    assert_eq!(on.stats().reseats, reseats);
    assert_eq!(off.stats().reseats, 0);
    assert!(
        held_off.is_lost(),
        "re-seat off: a lock whose keys every node forgot must be lost ({:?})",
        held_off.report()
    );
    assert_eq!(stolen.load(Ordering::SeqCst), 0, "a contender got the lock");
    assert!(tries.load(Ordering::SeqCst) > 100);
    for url in c.urls() {
        assert_eq!(get(&url, &r_on).await.as_deref(), Some(held_on.token()));
    }
    assert!(held_on.finish().await.is_ok());
    eprintln!(
        "rolling restart of 5 nodes over {:.0} s: re-seat on kept the lock ({reseats} re-seats, {} extensions); re-seat off lost it; contender: {} tries, 0 grants",
        start.elapsed().as_secs_f64(),
        held_on.extensions(),
        tries.load(Ordering::SeqCst)
    );
}

/// Waits until node `url` has a subscriber on `channel` (bounded: fails after 10 s).
async fn subscribed(url: &str, channel: &str, what: &str) {
    let ok = || async {
        let (_, n): (String, u64) = cmd(url, &["PUBSUB", "NUMSUB", channel]).await;
        n > 0
    };
    let why = || format!("{what}: nobody subscribed to {channel} on {url}");
    eventually(10 * SEC, ok, why).await;
}

/// A manager to hold locks with, and one whose waiters retry only after 20 s (two rounds in
/// all): only a release wake-up hands them a lock sooner. Restart quarantine off.
async fn holder_and_slow_waiters(c: &Cluster) -> (LockManager, LockManager) {
    let config = || {
        Config::new(c.urls())
            .restart_quarantine(false)
            .connect_timeout(5 * SEC)
    };
    let holder = LockManager::new(config()).await.unwrap();
    let waiters = config()
        .retry_delay(20 * SEC)
        .retry_jitter(ms(0))
        .retry_count(1);
    (holder, LockManager::new(waiters).await.unwrap())
}

/// Release wake-ups survive a rolling restart (SPEC §3.2, §12): the pub/sub connection to a
/// restarted node comes back by itself and subscribes again to the channels still watched
/// (here by one waiter that listens throughout), so after two of three nodes restarted one
/// after the other, a release still reaches a quorum of announcements and wakes the waiter.
/// Deaf on the two restarted nodes, one announcement of three wakes nobody and the waiter sits
/// out its 20 s retry delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wake_ups_survive_a_rolling_restart_while_a_waiter_listens() {
    let mut c = cluster(3);
    let urls = c.urls();
    let (holder, waiters) = holder_and_slow_waiters(&c).await;
    let r = unique("rolling-wake");
    let channel = format!("{r}:ironlock:release");
    let lock = holder.acquire(&[&r], 20 * SEC).await.expect("granted");
    let w = {
        let (waiters, r) = (waiters.clone(), r.clone());
        tokio::spawn(async move { waiters.acquire(&[&r], 30 * SEC).await })
    };
    for u in &urls {
        subscribed(u, &channel, "before the restarts").await;
    }
    for i in [0, 1] {
        let before = waiters.node_status()[i].run_id.clone();
        restart(&mut c, &holder, i).await;
        reconnected(&waiters, i, &before).await;
        lock.extend(20 * SEC)
            .await
            .expect("two nodes still hold it");
        let seated = || async { get(&urls[i], &r).await.as_deref() == Some(lock.token()) };
        eventually(5 * SEC, seated, || format!("node {i} was never re-seated")).await;
        subscribed(&urls[i], &channel, &format!("after node {i} restarted")).await;
    }
    assert_eq!(waiters.stats().wakeups, 0, "{:?}", waiters.stats());
    assert!(lock.release().await.held);
    let got = tokio::time::timeout(15 * SEC, w)
        .await
        .expect("woken by the announcements, not after its 20 s retry delay")
        .unwrap()
        .expect("the woken waiter acquires");
    assert_eq!(waiters.stats().wakeups, 1, "{:?}", waiters.stats());
    assert_eq!(got.report().rounds, 2);
    got.release().await;
}

/// A node that is down when a waiter starts listening is subscribed as soon as it is back,
/// while the waiter still waits (not only when some later waiter watches a fresh channel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_when_a_waiter_subscribes_is_subscribed_when_it_comes_back() {
    let mut c = cluster(3);
    let urls = c.urls();
    let (holder, waiters) = holder_and_slow_waiters(&c).await;
    let r = unique("down-at-watch");
    let channel = format!("{r}:ironlock:release");
    let lock = holder.acquire(&[&r], 20 * SEC).await.expect("granted");
    tokio::task::block_in_place(|| c.kill(2)).unwrap();
    let w = {
        let (waiters, r) = (waiters.clone(), r.clone());
        tokio::spawn(async move { waiters.acquire(&[&r], 30 * SEC).await })
    };
    subscribed(&urls[0], &channel, "node 0").await;
    tokio::time::sleep(ms(500)).await; // a few reconnection attempts fail meanwhile
    tokio::task::block_in_place(|| c.start_node(2)).unwrap();
    subscribed(&urls[2], &channel, "node 2, back").await;
    assert!(!w.is_finished());
    lock.release().await;
    w.abort();
}
