//! Sentinel and Cluster voters as a least-privilege ACL user: on the data nodes only
//! `+@all -@dangerous +info` on the key prefix's keys and channels (`~app:* &app:*`), exactly
//! the line the user guide gives. Locks, fencing, a fair waiter, failover dating (the reign
//! record) and replica acknowledgement all work with it, and a user without `+info` is told
//! what it lacks. Real processes.

mod common;

use std::time::{Duration, Instant};

use common::{SEC, ms, sentinel_failover_while_trying, unique};
use ironlock::{AcquireOptions, Config, ErrorKind, LockManager};
use ironlock_harness::{Cluster, RedisCluster, SentinelGroup};

const MAX_TTL: Duration = Duration::from_secs(2);
/// The user guide's least-privilege line for the data nodes, with the key prefix `app:`.
const ACL: [&str; 7] = [
    "on",
    ">app-pw",
    "~app:*",
    "&app:*",
    "+@all",
    "-@dangerous",
    "+info",
];

/// Adds the user `app` with `rules` on every node of `c` (ACLs are not replicated).
fn add_user(c: &Cluster, rules: &[&str]) {
    for i in 0..c.nodes().len() {
        let mut args = vec!["ACL", "SETUSER", "app", "reset"];
        args.extend_from_slice(rules);
        let reply = c.command(i, &args).expect("ACL SETUSER");
        assert!(reply.contains("OK"), "{reply}");
    }
}

/// `url` (`redis-sentinel://…` or `redis-cluster://…`) with the user `app`'s credentials.
fn as_app(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    format!("{scheme}://app:app-pw@{rest}")
}

fn config(url: &str) -> Config {
    Config::new([url])
        .key_prefix("app:")
        .max_ttl(MAX_TTL)
        .connect_timeout(5 * SEC)
        .node_timeout(ms(500))
}

/// A lock with fencing and a fair waiter behind it, then its release: what a user does.
async fn lock_fence_and_wait_in_line(manager: &LockManager, what: &str) {
    let key = unique(what);
    let lock = manager
        .acquire_with(
            &[&key],
            MAX_TTL,
            AcquireOptions::try_once().fencing(true).fair(true),
        )
        .await
        .unwrap_or_else(|e| panic!("{what}: granted as the least-privilege user: {e}"));
    assert!(lock.fence().is_some_and(|f| f > 0), "{what}: {lock:?}");
    let waiter = {
        let (m, k) = (manager.clone(), key.clone());
        tokio::spawn(async move {
            m.acquire_with(&[&k], MAX_TTL, AcquireOptions::wait(5 * SEC).fair(true))
                .await
        })
    };
    tokio::time::sleep(ms(200)).await;
    let released = lock.release().await;
    assert!(released.held, "{what}: {released:?}");
    let next = waiter
        .await
        .expect("waiter task")
        .unwrap_or_else(|e| panic!("{what}: the fair waiter after the release: {e}"));
    next.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_voter_as_the_least_privilege_user() {
    let group = SentinelGroup::start(1, 3).expect("sentinel group");
    add_user(&group.data, &ACL);
    std::thread::sleep(Duration::from_millis(4100));
    let url = as_app(&group.url());
    let manager = LockManager::new(config(&url)).await.expect("manager");
    assert!(
        manager.node_status()[0].eligible,
        "{:?}",
        manager.node_status()
    );
    lock_fence_and_wait_in_line(&manager, "sentinel-acl").await;

    // Replica acknowledgement needs nothing more (WAIT is not @dangerous).
    let acked = LockManager::new(config(&url).replica_acks(1))
        .await
        .expect("manager");
    acked
        .acquire_with(&[&unique("acl-acks")], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect("granted with replica acknowledgement as the least-privilege user")
        .release()
        .await;

    // A failover: the promoted master is dated by this user (the reign record under the key
    // prefix), quarantined, then counted.
    let group = std::sync::Arc::new(group);
    let key = unique("sentinel-acl-after");
    let no_noperm = |e: &ironlock::Error| {
        let text = e.to_string();
        assert!(
            !text.contains("NOPERM") && !text.contains("no permissions"),
            "{text}"
        );
    };
    let failover = sentinel_failover_while_trying(&group, &manager, &key, no_noperm).await;
    assert!(
        failover.refusal.to_string().contains("failover quarantine"),
        "{}",
        failover.refusal
    );
    let second = failover.new_master;
    let deadline = Instant::now() + 30 * SEC;
    loop {
        match manager
            .acquire_with(&[&key], MAX_TTL, AcquireOptions::try_once())
            .await
        {
            Ok(l) => {
                l.release().await;
                break;
            }
            Err(e) => {
                no_noperm(&e);
                assert!(Instant::now() < deadline, "never counted again: {e}");
            }
        }
        tokio::time::sleep(ms(100)).await;
    }
    let record = group
        .data
        .command(second, &["HGETALL", "app:ironlock:master"])
        .expect("HGETALL");
    assert!(
        !record.trim().is_empty() && record != "*0\r\n",
        "{record:?}"
    );

    // Without +info the user cannot read what quarantine needs: said so, naming the command.
    add_user(&group.data, &ACL[..6]);
    let e = LockManager::new(config(&url))
        .await
        .expect("manager")
        .acquire_with(&[&unique("noinfo")], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect_err("counted without INFO");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_voter_as_the_least_privilege_user() {
    let c = RedisCluster::start(3, 0).expect("cluster");
    add_user(&c.nodes, &ACL);
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let manager = LockManager::new(config(&as_app(&c.url())))
        .await
        .expect("manager");
    let status = &manager.node_status()[0];
    assert!(status.eligible && status.shards == 3, "{status:?}");
    for i in 0..5 {
        lock_fence_and_wait_in_line(&manager, &format!("cluster-acl-{i}")).await;
    }
}
