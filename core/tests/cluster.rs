//! A Redis Cluster as one voter: real `--cluster-enabled` processes formed with
//! `redis-cli --cluster create`, three shards with a replica each, failed over for real.

mod common;

use std::time::{Duration, Instant};

use common::{SEC, ms, unique};
use ironlock::{AcquireOptions, Config, ErrorKind, LockManager};
use ironlock_harness::RedisCluster;

const MAX_TTL: Duration = Duration::from_secs(2);

fn guarded(url: &str) -> Config {
    Config::new([url])
        .max_ttl(MAX_TTL)
        .connect_timeout(5 * SEC)
        .node_timeout(ms(500))
}

/// The raw reply of GET `key` on the node serving its slot.
fn get(c: &RedisCluster, key: &str) -> String {
    let slot: u16 = c
        .nodes
        .command(0, &["CLUSTER", "KEYSLOT", key])
        .expect("KEYSLOT")
        .trim_start_matches(':')
        .trim()
        .parse()
        .expect("slot");
    let m = c.master_of_slot(slot).expect("a master serves the slot");
    c.nodes.command(m, &["GET", key]).expect("GET")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_voter_locks_any_name_and_keeps_exclusion_through_a_shard_failover() {
    let c = RedisCluster::start(3, 1).expect("cluster");
    // Every master out of the uptime-based restart quarantine.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let manager = LockManager::new(guarded(&c.url())).await.expect("manager");
    let status = &manager.node_status()[0];
    assert_eq!(status.kind, "cluster");
    assert_eq!(status.shards, 3, "{status:?}");
    assert!(
        status.eligible && status.not_counted_because.is_none(),
        "{status:?}"
    );

    // Names in every slot, with fencing and a fair waiter: each lands on its slot's master.
    for i in 0..100 {
        let name = format!("{}:{i}", unique("cl"));
        let lock = manager
            .acquire_with(&[&name], MAX_TTL, AcquireOptions::try_once().fencing(true))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(lock.fence().is_some());
        assert!(get(&c, &name).contains(lock.token()), "{name}");
        if i % 25 == 0 {
            // A fair waiter queued behind the holder gets the lock when it is released.
            let m2 = manager.clone();
            let n2 = name.clone();
            let waiter = tokio::spawn(async move {
                m2.acquire_with(&[&n2], MAX_TTL, AcquireOptions::wait(5 * SEC).fair(true))
                    .await
            });
            tokio::time::sleep(ms(100)).await;
            assert!(lock.release().await.held);
            let next = waiter
                .await
                .expect("join")
                .expect("the fair waiter gets it");
            assert!(next.release().await.held);
        } else {
            assert!(lock.release().await.held, "{name}");
        }
    }
    // Every connection to the cluster's nodes writes a request at once (TCP_NODELAY).
    #[cfg(target_os = "linux")]
    {
        let ports = c.url();
        let ports: Vec<u16> = ports
            .trim_start_matches("redis-cluster://")
            .split(',')
            .map(|a| a.rsplit(':').next().unwrap().parse().unwrap())
            .collect();
        let options: Vec<i32> = ports
            .iter()
            .flat_map(|&p| common::nodelay_of_sockets_to(p))
            .collect();
        assert!(!options.is_empty(), "no connection to {ports:?}");
        assert!(options.iter().all(|&on| on != 0), "{options:?}");
    }
    // A semaphore on a cluster voter.
    let sem = manager.semaphore(unique("cl-sem").as_str(), 2);
    let a = sem.acquire(MAX_TTL).await.expect("permit 1");
    let b = sem.acquire(MAX_TTL).await.expect("permit 2");
    a.release().await;
    b.release().await;
    // A read-write lock on a cluster voter: its keys share the lock key's slot.
    let rw = manager.rw_lock(unique("cl-rw"));
    let r1 = rw.read(MAX_TTL).await.expect("read 1");
    let r2 = rw.read(MAX_TTL).await.expect("readers share");
    let e = rw
        .write_with(MAX_TTL, AcquireOptions::try_once())
        .await
        .expect_err("readers hold");
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    assert_eq!(get(&c, rw.resource()).trim_end(), "$16\r\nironlock readers");
    r1.release().await;
    r2.release().await;
    let w = rw.write(MAX_TTL).await.expect("the write lock");
    assert!(get(&c, rw.resource()).contains(w.token()));
    assert!(w.release().await.held);

    // Resources in different slots cannot be one request on a cluster; with a common hash
    // tag they can.
    let e = manager
        .acquire_with(
            &["a-slot", "another-slot"],
            MAX_TTL,
            AcquireOptions::try_once(),
        )
        .await
        .expect_err("different slots");
    assert!(e.to_string().contains("different hash slots"), "{e}");
    let tag = unique("tag");
    let both = manager
        .acquire(&[format!("{{{tag}}}:a"), format!("{{{tag}}}:b")], MAX_TTL)
        .await
        .expect("one slot");
    both.release().await;

    // A shard fails over: a name on it does not count until the old master's locks expired,
    // also for a client that never saw the old master; other shards are not affected.
    let name = unique("cl-failover");
    let held = manager.acquire(&[&name], MAX_TTL).await.expect("held");
    let slot: u16 = c
        .nodes
        .command(0, &["CLUSTER", "KEYSLOT", &name])
        .expect("KEYSLOT")
        .trim_start_matches(':')
        .trim()
        .parse()
        .expect("slot");
    let old = c.master_of_slot(slot).expect("master");
    let new = c.failover(old).expect("CLUSTER FAILOVER");
    let fresh = LockManager::new(guarded(&c.url())).await.expect("manager");
    // A name in the same slot, so on the shard that failed over.
    let other = format!("{{{name}}}:{}", unique("cl-failover-other"));
    let deadline = Instant::now() + 10 * SEC;
    let e = loop {
        match fresh
            .acquire_with(&[&other], MAX_TTL, AcquireOptions::try_once())
            .await
        {
            Err(e) if e.to_string().contains("was promoted from a replica") => break e,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
            Ok(l) => panic!("a promoted shard master counted at once: {:?}", l.report()),
        }
        tokio::time::sleep(ms(100)).await;
    };
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(c.role(new).as_deref() == Some("master"));
    tokio::time::sleep(MAX_TTL + 2 * SEC).await;
    let l = fresh
        .acquire_with(&[&other], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect("counted once the quarantine is over");
    l.release().await;
    drop(held);
}

#[test]
fn cluster_urls_parse_and_bad_ones_name_the_argument() {
    let ok = Config::new(["redis-cluster://u:s3cret@127.0.0.1:7000,127.0.0.1:7001"]);
    ok.check().expect("valid");
    assert!(!format!("{ok:?}").contains("s3cret"));
    for (url, says) in [
        ("redis-cluster://127.0.0.1:7000/1", "only database 0"),
        ("redis-cluster://127.0.0.1:7000#x", "no '#' part"),
        ("redis-cluster://,127.0.0.1:7000", "seed node 0"),
    ] {
        let e = Config::new([url]).check().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}: {e}");
        assert!(
            e.message().starts_with("nodes[0]: ") && e.message().contains(says),
            "{url}: {e}"
        );
    }
    let nodes = ironlock::split_node_list(
        "IRONLOCK_NODES",
        "redis-cluster://127.0.0.1:1,127.0.0.1:2,redis://127.0.0.1:3",
    )
    .expect("list");
    assert_eq!(
        nodes,
        [
            "redis-cluster://127.0.0.1:1,127.0.0.1:2",
            "redis://127.0.0.1:3"
        ]
    );
}

#[test]
fn unparsable_parts_of_sentinel_and_cluster_urls_never_quote_a_password() {
    // Found by the config fuzzer: a seed host with a `?…pass=` tail was quoted in the error.
    for url in [
        "rediss-cluster://.soc\0k?db=1&pass=hunter2secret",
        "redis-cluster://h:1/x?pass=hunter2secret",
        "redis-sentinel://h:1?password=hunter2secret#m",
        "redis-sentinel://u:hunter2#secret@h:1",
        "redis-sentinel://h:1/x?pass=hunter2secret#m",
        "redis-cluster://h:1,hunter2secret@@x",
    ] {
        let checked = Config::new([url]).check();
        let shown = match &checked {
            Err(e) => {
                assert!(e.message().starts_with("nodes[0]: "), "{url:?}: {e}");
                format!("{e} {e:?}")
            }
            Ok(()) => String::new(),
        } + &format!("{:?}", Config::new([url]));
        for piece in ["hunter2", "secret"] {
            assert!(!shown.contains(piece), "{url:?}: {shown}");
        }
    }
}

/// One node of a cluster given as a plain `redis://` URL would serve only its own slots (MOVED
/// for most names) and, listed with its siblings, vote more than once: it is not a voter, and
/// the error says what to give instead.
#[tokio::test]
async fn a_cluster_node_given_as_redis_url_is_refused_with_what_to_give() {
    let c = RedisCluster::start(3, 0).expect("cluster");
    let port = c.nodes.nodes()[0].port();
    let m =
        LockManager::new(guarded(&format!("redis://127.0.0.1:{port}")).restart_quarantine(false))
            .await
            .expect("manager");
    let e = m
        .acquire_with(&[&unique("plain")], MAX_TTL, AcquireOptions::try_once())
        .await
        .expect_err("a cluster node counted as a standalone voter");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(
        e.to_string().contains(&format!(
            "is a node of a Redis Cluster (redis_mode:cluster), which serves only its own hash slots: give the whole cluster as one voter, redis-cluster://127.0.0.1:{port}"
        )),
        "{e}"
    );
}
