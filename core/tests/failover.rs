//! A voter whose master changed (a replica promoted by a failover, `REPLICAOF NO ONE`) may lack
//! keys its old master granted: its "yes" must not count, for any client, until every lock the
//! old master could have granted has expired. Real master/replica processes.

mod common;

use std::time::{Duration, Instant};

use common::{Failover, SEC, ms, sentinel_failover_while_trying, unique};
use ironlock::{AcquireOptions, Config, ErrorKind, LockManager, Vote};
use ironlock_harness::Cluster;

/// Restart and failover quarantine: max_ttl + drift + 1 s, about 3 s with max_ttl 2 s.
const MAX_TTL: Duration = Duration::from_secs(2);

/// Adds a replica of node `of` to `c` and waits until it is linked; returns its index.
fn add_replica(c: &mut Cluster, of: usize) -> usize {
    let port = c.nodes()[of].port().to_string();
    c.add_node(&["--replicaof", "127.0.0.1", &port])
        .expect("replica");
    let i = c.nodes().len() - 1;
    let deadline = Instant::now() + 10 * SEC;
    while !c
        .command(i, &["INFO", "replication"])
        .is_ok_and(|r| r.contains("master_link_status:up"))
    {
        assert!(
            Instant::now() < deadline,
            "replica of node {of} never linked"
        );
        std::thread::sleep(ms(20));
    }
    i
}

/// A master (node 0) and one replica (node 1), both up for longer than the quarantine.
fn replicated() -> Cluster {
    let mut c = Cluster::start(1).expect("master");
    add_replica(&mut c, 0);
    // Both nodes out of the uptime-based restart quarantine.
    std::thread::sleep(Duration::from_millis(4100));
    c
}

fn guarded(url: &str) -> Config {
    Config::new([url])
        .max_ttl(MAX_TTL)
        .connect_timeout(5 * SEC)
        .node_timeout(ms(500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_does_not_count_until_the_old_masters_locks_expired() {
    let c = replicated();
    let (master, replica) = (c.urls()[0].clone(), c.urls()[1].clone());
    let holder = LockManager::new(guarded(&master)).await.expect("manager");
    let key = unique("failover");
    let lock = holder
        .acquire(&[&key], MAX_TTL)
        .await
        .expect("the master counts");

    // The replica is promoted (a failover); a client that never saw the old master connects.
    c.command(1, &["REPLICAOF", "NO", "ONE"]).expect("promote");
    let fresh = LockManager::new(guarded(&replica)).await.expect("manager");
    let status = &fresh.node_status()[0];
    assert!(
        !status.eligible && status.quarantine_remaining > 2 * SEC,
        "a promoted master counted at once: {status:?}"
    );
    let other = unique("failover-other");
    let e = fresh
        .acquire_with(&[&other], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect_err("not counted while the old master's locks may live");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let node = &e.report().expect("report").nodes[0];
    assert_eq!(node.vote, Vote::NotEligible, "{e}");
    let why = node.error.as_deref().unwrap_or_default();
    assert!(
        why.contains("failover quarantine") && why.contains("promoted from a replica"),
        "{why}"
    );
    assert!(
        e.message()
            .contains("1 of 1 nodes is in failover quarantine (this master was promoted"),
        "{e}"
    );

    // A second client, later, reads the same date from the node: its wait is shorter, not reset.
    tokio::time::sleep(SEC).await;
    let later = LockManager::new(guarded(&replica)).await.expect("manager");
    let left = later.node_status()[0].quarantine_remaining;
    assert!(
        left < status.quarantine_remaining && left > ms(500),
        "the record should date the promotion: {left:?} vs {:?}",
        status.quarantine_remaining
    );

    // The control: with the protection off, the promoted master counts at once.
    let unguarded = LockManager::new(guarded(&replica).restart_quarantine(false))
        .await
        .expect("manager");
    let l = unguarded
        .acquire_with(
            &[&unique("failover-off")],
            MAX_TTL,
            AcquireOptions::try_once(),
        )
        .await
        .expect("without the protection the promoted master counts at once");
    l.release().await;

    // Once every lock the old master could have granted has expired, it counts.
    tokio::time::sleep(left + ms(100)).await;
    let l = later
        .acquire_with(&[&other], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect("counted after the quarantine");
    l.release().await;
    drop(lock);
}

#[tokio::test]
async fn a_replica_is_not_a_voter() {
    let c = replicated();
    let manager = LockManager::new(guarded(&c.urls()[1]).restart_quarantine(false))
        .await
        .expect("starts; the node is a failing voter");
    let e = manager
        .acquire_with(&[&unique("replica")], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect_err("a replica cannot take a lock");
    let why = e.report().expect("report").nodes[0]
        .error
        .clone()
        .unwrap_or_default();
    assert!(why.contains("is a replica (of 127.0.0.1:"), "{e}");

    // A master demoted while connected answers READONLY; the next connection reports why.
    let master = LockManager::new(guarded(&c.urls()[0]).restart_quarantine(false))
        .await
        .expect("manager");
    let port = c.nodes()[1].port().to_string();
    c.command(1, &["REPLICAOF", "NO", "ONE"]).expect("promote");
    c.command(0, &["REPLICAOF", "127.0.0.1", &port])
        .expect("demote");
    let key = unique("demoted");
    let e = master
        .acquire_with(&[&key], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect_err("a demoted master cannot grant");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let deadline = Instant::now() + 10 * SEC;
    loop {
        let last = master.node_status()[0]
            .last_error
            .clone()
            .unwrap_or_default();
        if last.contains("is a replica") {
            break;
        }
        assert!(Instant::now() < deadline, "never reconnected: {last}");
        tokio::time::sleep(ms(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_voter_follows_its_master_through_a_failover() {
    let group = ironlock_harness::SentinelGroup::start(1, 3).expect("sentinel group");
    // Every data node out of the uptime-based restart quarantine.
    std::thread::sleep(Duration::from_millis(4100));
    let first = group.master().expect("a master");
    let manager = LockManager::new(guarded(&group.url()))
        .await
        .expect("manager");
    let status = &manager.node_status()[0];
    assert_eq!(status.kind, "sentinel");
    let port = group.data.nodes()[first].port();
    assert_eq!(
        status.master.as_deref(),
        Some(format!("127.0.0.1:{port}").as_str())
    );
    assert!(status.eligible, "{status:?}");
    assert!(
        status.url.ends_with(&format!("#{}", group.name)),
        "{}",
        status.url
    );

    let key = unique("sentinel");
    let lock = manager.acquire(&[&key], MAX_TTL).await.expect("granted");
    let on_master = group.data.command(first, &["GET", &key]).expect("GET");
    assert!(on_master.contains(lock.token()), "{on_master}");
    lock.release().await;

    // A real failover, tried for all along (see `sentinel_failover_while_trying`): the voter
    // moves to the new master, which does not count until every lock the old one could have
    // granted has expired.
    let group = std::sync::Arc::new(group);
    let key = unique("sentinel-after");
    let Failover {
        refusal: e,
        status,
        seen,
        new_master: second,
    } = sentinel_failover_while_trying(&group, &manager, &key, |_| {}).await;
    assert_ne!(first, second);
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(
        status
            .not_counted_because
            .as_deref()
            .is_some_and(|w| w.contains("failover quarantine")),
        "{status:?}"
    );
    // max_ttl + drift + 1 s (3.02 s), and the old master's 2 s lease: it may still have counted
    // for a client that had not yet heard of the failover.
    let left = status.quarantine_remaining;
    assert!(
        left > ms(3100),
        "a Sentinel voter's failover quarantine outlasts the old master's lease: {left:?} left"
    );
    let new_port = group.data.nodes()[second].port();
    assert_eq!(
        status.master.as_deref(),
        Some(format!("127.0.0.1:{new_port}").as_str())
    );
    tokio::time::sleep(left.saturating_sub(seen.elapsed()) + ms(100)).await;
    let lock = manager
        .acquire_with(&[&key], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect("counted once the quarantine is over");
    let on_new = group.data.command(second, &["GET", &key]).expect("GET");
    assert!(on_new.contains(lock.token()), "{on_new}");
    lock.release().await;
}

/// The first vote that does not count, retrying every 100 ms for at most 10 s; each lock
/// granted meanwhile is released.
async fn first_refusal(manager: &LockManager, key: &str) -> ironlock::Error {
    let deadline = Instant::now() + 10 * SEC;
    loop {
        match manager
            .acquire_with(&[key], MAX_TTL, AcquireOptions::try_once())
            .await
        {
            Ok(lock) => {
                lock.release().await;
                assert!(Instant::now() < deadline, "still counted after 10 s");
            }
            Err(e) => return e,
        }
        tokio::time::sleep(ms(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_voter_counts_only_while_its_sentinels_confirm_its_master() {
    let group = ironlock_harness::SentinelGroup::start(1, 3).expect("sentinel group");
    std::thread::sleep(Duration::from_millis(4100));
    let manager = LockManager::new(guarded(&group.url()))
        .await
        .expect("manager");
    let key = unique("lease");
    // Counted long after the connection: the sentinels are asked again while it lasts.
    tokio::time::sleep(3 * SEC).await;
    let lock = manager.acquire(&[&key], MAX_TTL).await.expect("granted");
    lock.release().await;

    // The voter keeps one connection per sentinel: asked every 0.5 s, none connects again.
    let accepted = || -> Vec<u64> {
        group
            .sentinel_ports()
            .into_iter()
            .map(|p| {
                let info = ironlock_harness::raw_command(p, &["INFO", "stats"]).expect("INFO");
                info.lines()
                    .find_map(|l| l.strip_prefix("total_connections_received:"))
                    .and_then(|v| v.trim().parse().ok())
                    .expect("total_connections_received")
            })
            .collect()
    };
    let before = accepted();
    tokio::time::sleep(3 * SEC).await;
    let after = accepted();
    for (b, a) in before.iter().zip(&after) {
        // One: the INFO that read the count before.
        assert!(
            a - b <= 1,
            "connections accepted by the sentinels in 3 s: {before:?} -> {after:?}"
        );
    }

    // One sentinel that hangs (connect_timeout is 5 s here) does not hold the others' answers
    // back: the master stays confirmed.
    group.pause_sentinel(0);
    tokio::time::sleep(3 * SEC).await;
    let held = manager
        .acquire_with(&[&key], MAX_TTL, AcquireOptions::try_once())
        .await;
    group.resume_sentinel(0);
    held.expect("counted with one sentinel of three silent")
        .release()
        .await;

    // Sentinels that answer nothing cannot say whether the master was replaced: its votes stop
    // counting once the last confirmation is 2 s old.
    group.pause_sentinels();
    let e = first_refusal(&manager, &key).await;
    group.resume_sentinels();
    let report = e.report().expect("a report");
    assert_eq!(report.nodes[0].vote, Vote::NotEligible, "{e}");
    let why = report.nodes[0].error.as_deref().unwrap_or("");
    assert!(why.contains("not confirmed as the master"), "{why}");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");

    // Counted again once they answer.
    let deadline = Instant::now() + 10 * SEC;
    let lock = loop {
        match manager
            .acquire_with(&[&key], MAX_TTL, AcquireOptions::try_once())
            .await
        {
            Ok(lock) => break lock,
            Err(e) => assert!(Instant::now() < deadline, "not counted again: {e}"),
        }
        tokio::time::sleep(ms(100)).await;
    };
    lock.release().await;
    assert!(manager.node_status()[0].eligible);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_voter_leaves_an_old_master_that_still_runs_after_a_failover() {
    let mut group = ironlock_harness::SentinelGroup::start(1, 3).expect("sentinel group");
    std::thread::sleep(Duration::from_millis(4100));
    let first = group.master().expect("a master");
    let old_port = group.data.nodes()[first].port();
    let early = LockManager::new(guarded(&group.url()))
        .await
        .expect("manager");
    let key = unique("split");
    early
        .acquire(&[&key], MAX_TTL)
        .await
        .expect("granted")
        .release()
        .await;

    // The sentinels take a paused master for dead and fail over; resumed, it is still a master
    // in its own eyes (until they demote it, seconds later), and its connection from `early`
    // never broke.
    group.data.pause(first).expect("pause");
    let second = group.await_new_master(old_port).expect("failover");
    group.data.resume(first).expect("resume");
    let late = LockManager::new(guarded(&group.url()))
        .await
        .expect("manager");

    // Both clients try for the lock (the early one while its voter still names the old
    // master, keeping what it gets) until the late one, on the new master, gets it: each lock
    // the early one got meanwhile must have expired by then.
    let old = format!("127.0.0.1:{old_port}");
    let mut early_until = Vec::new();
    let deadline = Instant::now() + 15 * SEC;
    let late_at = loop {
        assert!(Instant::now() < deadline, "the new master never counted");
        let t = Instant::now();
        if early.node_status()[0].master.as_deref() == Some(&old)
            && let Ok(lock) = early
                .acquire_with(&[&key], MAX_TTL, AcquireOptions::try_once())
                .await
        {
            early_until.push((t + MAX_TTL, lock.report()));
        }
        let t = Instant::now();
        if late
            .acquire_with(&[&key], MAX_TTL, AcquireOptions::try_once())
            .await
            .is_ok()
        {
            break t;
        }
        tokio::time::sleep(ms(50)).await;
    };
    for (until, report) in &early_until {
        assert!(
            *until <= late_at,
            "two holders: a lock from the old master still valid when the new one granted it ({report:?})"
        );
    }
    // The early client followed its sentinels to the new master.
    let new_port = group.data.nodes()[second].port();
    assert_eq!(
        early.node_status()[0].master.as_deref(),
        Some(format!("127.0.0.1:{new_port}").as_str())
    );
}

#[test]
fn sentinel_urls_parse_and_bad_ones_name_the_argument() {
    let ok = Config::new(["redis-sentinel://u:s3cret@127.0.0.1:26379,127.0.0.1:26380/2#mymaster"]);
    ok.check().expect("valid");
    let shown = format!("{ok:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    for (url, says) in [
        (
            "redis-sentinel://127.0.0.1:26379",
            "names its master after '#'",
        ),
        ("redis-sentinel://127.0.0.1:26379#", "master name"),
        ("redis-sentinel://127.0.0.1:26379/x#m", "database"),
        ("redis-sentinel://,127.0.0.1:1#m", "sentinel 0"),
    ] {
        let e = Config::new([url]).check().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}: {e}");
        assert!(
            e.message().starts_with("nodes[0]: ") && e.message().contains(says),
            "{url}: {e}"
        );
    }
    // One master named twice is one voter twice.
    let e = Config::new([
        "redis-sentinel://127.0.0.1:1#m",
        "redis-sentinel://127.0.0.1:2#m",
    ])
    .check()
    .unwrap_err();
    assert!(e.message().contains("nodes[1]: duplicate node"), "{e}");
    // A sentinel password is never shown.
    let c =
        Config::new(["redis-sentinel://127.0.0.1:1#m"]).sentinel_password(Some("hunter2".into()));
    assert!(!format!("{c:?}").contains("hunter2"));
    // In a comma-separated node list, a sentinel URL keeps its sentinels.
    let nodes = ironlock::split_node_list(
        "IRONLOCK_NODES",
        "redis-sentinel://127.0.0.1:1,127.0.0.1:2#m, redis://127.0.0.1:3",
    )
    .expect("list");
    assert_eq!(
        nodes,
        [
            "redis-sentinel://127.0.0.1:1,127.0.0.1:2#m",
            "redis://127.0.0.1:3"
        ]
    );
}

/// Replica acknowledgement (`replica_acks`): a vote counts only once the replica has the key,
/// so the promoted replica holds every granted lock and counts at once (no failover
/// quarantine), and a write the replica did not acknowledge in time is no vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_acknowledgement_a_promoted_replica_has_every_lock_and_counts_at_once() {
    let mut c = replicated();
    let (master, replica) = (c.urls()[0].clone(), c.urls()[1].clone());
    let acks = |url: &str| guarded(url).replica_acks(1);
    let holder = LockManager::new(acks(&master)).await.expect("manager");

    // The replica, paused, acknowledges nothing: the master's "yes" is no vote.
    c.pause(1).expect("pause the replica");
    let e = holder
        .acquire_with(&[&unique("unacked")], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect_err("a write no replica acknowledged counted");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let why = e.report().expect("report").nodes[0]
        .error
        .clone()
        .unwrap_or_default();
    assert!(
        why.contains("the write reached 0 of the 1 replicas replica_acks asks for"),
        "{why}"
    );
    c.resume(1).expect("resume the replica");

    // The replica gets a replica of its own (chained), so that once promoted it still has one
    // to acknowledge its writes.
    add_replica(&mut c, 1);

    let key = unique("acked");
    let lock = holder
        .acquire(&[&key], MAX_TTL)
        .await
        .expect("the master counts once its replica acknowledged");
    // Acknowledged means there: the replica holds the key as soon as the grant returns.
    let on_replica = c.command(1, &["GET", &key]).expect("GET on the replica");
    assert!(
        on_replica.contains(lock.token()),
        "granted before the replica had the key: {on_replica:?}"
    );

    // Promoted, the replica has the lock and counts at once for a client that never saw the
    // old master: the holder's key blocks it, a free name is granted.
    c.command(1, &["REPLICAOF", "NO", "ONE"]).expect("promote");
    let fresh = LockManager::new(acks(&replica)).await.expect("manager");
    let status = &fresh.node_status()[0];
    assert!(
        status.eligible,
        "quarantined although every grant was acknowledged: {status:?}"
    );
    let e = fresh
        .acquire_with(&[&key], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect_err("a second holder on the promoted replica");
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    fresh
        .acquire_with(&[&unique("free")], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect("counted at once after the failover")
        .release()
        .await;
    let unacked = LockManager::new(guarded(&replica)).await.expect("manager");
    assert!(
        !unacked.node_status()[0].eligible,
        "the control: without replica_acks the promoted master is quarantined"
    );
    drop(lock);
}

#[test]
fn replica_acks_names_itself_when_out_of_range_or_with_a_cluster_voter() {
    let e = Config::new(["redis://127.0.0.1:1"])
        .replica_acks(17)
        .check()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.message()
            .starts_with("replica_acks: must be 0 (off) to 16 replicas, got 17"),
        "{e}"
    );
    let e = Config::new(["redis-cluster://127.0.0.1:7000,127.0.0.1:7001"])
        .replica_acks(1)
        .check()
        .unwrap_err();
    assert!(
        e.message()
            .starts_with("replica_acks: not available with a Redis Cluster voter (nodes[0]"),
        "{e}"
    );
    assert!(
        Config::new(["redis://127.0.0.1:1"])
            .replica_acks(16)
            .check()
            .is_ok()
    );
}
