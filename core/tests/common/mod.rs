//! Shared helpers for the integration tests: real redis-server nodes and managers over them.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use ironlock::{Config, LockManager};
pub use ironlock_harness::Cluster;

/// Starts `n` fresh nodes. Panics with the harness's message if redis-server cannot start.
pub fn cluster(n: usize) -> Cluster {
    Cluster::start(n).unwrap_or_else(|e| panic!("harness: {e}"))
}

/// A configuration for the cluster with restart quarantine off (fresh nodes have uptime 0).
pub fn config(c: &Cluster) -> Config {
    // A generous connect timeout: CI machines can be busy.
    Config::new(c.urls())
        .restart_quarantine(false)
        .connect_timeout(Duration::from_secs(5))
}

pub async fn manager(c: &Cluster) -> LockManager {
    LockManager::new(config(c)).await.expect("manager starts")
}

#[allow(unused_imports)]
pub use ironlock_harness::unique;

pub const SEC: Duration = Duration::from_secs(1);

pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Checks that an acquire error's counts add up to the `n` nodes of the report: "(G of N nodes
/// granted, quorum Q): K of N nodes did not grant: …; P of N nodes had not answered …" names
/// every node once. Returns G and the K, P that follow it.
pub fn assert_counts_add_up(message: &str, n: usize) -> Vec<usize> {
    let at = message
        .find(" nodes granted, quorum ")
        .unwrap_or_else(|| panic!("no 'nodes granted' in: {message}"));
    let start = message[..at].rfind('(').expect("'(G of N nodes granted'");
    let words: Vec<&str> = message[start + 1..].split_whitespace().collect();
    let counts: Vec<usize> = words
        .windows(4)
        .filter(|w| w[1] == "of" && w[3].trim_end_matches(':') == "nodes")
        .map(|w| {
            assert_eq!(w[2].parse::<usize>().ok(), Some(n), "{message}");
            w[0].parse().unwrap_or_else(|_| panic!("{message}"))
        })
        .collect();
    assert_eq!(
        counts.iter().sum::<usize>(),
        n,
        "counts do not add up: {message}"
    );
    counts
}

/// Polls `done` every 20 ms until it holds; fails with `why()` after `limit`.
pub async fn eventually<F: Future<Output = bool>>(
    limit: Duration,
    mut done: impl FnMut() -> F,
    why: impl Fn() -> String,
) {
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "{}", why());
        tokio::time::sleep(ms(20)).await;
    }
}

/// Waits until `m` is connected to node `i` in a process other than `before` (a run_id).
pub async fn reconnected(m: &LockManager, i: usize, before: &str) {
    let ok = || async {
        // Any request notices the broken connection and starts the reconnection.
        if let Ok(probe) = m.acquire(&[unique("probe")], ms(500)).await {
            probe.release().await;
        }
        let st = &m.node_status()[i];
        st.connected && st.run_id != before && !st.run_id.is_empty()
    };
    let why = || format!("node {i} never reconnected: {:?}", m.node_status()[i]);
    eventually(5 * SEC, ok, why).await;
}

/// Kills and restarts node `i`, then waits until `m` has reconnected to the new process.
pub async fn restart(c: &mut Cluster, m: &LockManager, i: usize) {
    let before = m.node_status()[i].run_id.clone();
    tokio::task::block_in_place(|| c.restart(i)).unwrap();
    reconnected(m, i, &before).await;
}

/// The `TCP_NODELAY` option of every socket of this process connected to `port` on loopback.
#[cfg(target_os = "linux")]
pub fn nodelay_of_sockets_to(port: u16) -> Vec<i32> {
    use std::os::fd::RawFd;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        // SAFETY: getpeername and getsockopt fill initialised structs of the sizes given; a
        // descriptor that is not a connected IPv4 socket just fails.
        unsafe {
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::getpeername(fd, std::ptr::from_mut(&mut addr).cast(), &mut len) != 0
                || i32::from(addr.sin_family) != libc::AF_INET
                || u16::from_be(addr.sin_port) != port
            {
                continue;
            }
            let mut on: libc::c_int = 0;
            let mut size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            let got = libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                std::ptr::from_mut(&mut on).cast(),
                &mut size,
            );
            assert_eq!(got, 0, "getsockopt on fd {fd}");
            found.push(on);
        }
    }
    found
}

/// What [`sentinel_failover_while_trying`] saw: the first refusal by the new master's failover
/// quarantine, the voter's status just after it (and when it was read), and the new master.
pub struct Failover {
    pub refusal: ironlock::Error,
    pub status: ironlock::NodeStatus,
    pub seen: Instant,
    pub new_master: usize,
}

/// Fails `group` over (`SENTINEL FAILOVER`, in the background) while `manager`, whose one voter
/// is the group, tries for `key` once every 50 ms, until a vote does not count. A Sentinel voter
/// asks its sentinels again every 0.5 s, so it may move to the new master (and serve its
/// quarantine) long before the old one is demoted: the attempts run all along. Until then only
/// the old master may grant: a grant counts as the old master's when the voter named it before
/// and after the attempt (it is released; a grant by the new master fails the test). Every
/// error is shown to `each_error`.
pub async fn sentinel_failover_while_trying(
    group: &std::sync::Arc<ironlock_harness::SentinelGroup>,
    manager: &LockManager,
    key: &str,
    each_error: impl Fn(&ironlock::Error),
) -> Failover {
    let old = manager.node_status()[0].master.clone().expect("a master");
    let failing = {
        let group = group.clone();
        tokio::task::spawn_blocking(move || group.failover())
    };
    let master = || manager.node_status()[0].master.clone().unwrap_or_default();
    let deadline = Instant::now() + 30 * SEC;
    let refusal = loop {
        let before = master();
        match manager
            .acquire_with(
                &[key],
                Duration::from_secs(2),
                ironlock::AcquireOptions::try_once(),
            )
            .await
        {
            Err(e) => {
                each_error(&e);
                if e.report()
                    .is_some_and(|r| r.nodes[0].vote == ironlock::Vote::NotEligible)
                {
                    break e;
                }
                assert!(
                    Instant::now() < deadline,
                    "never reached the new master: {e}"
                );
            }
            Ok(lock) => {
                let after = master();
                assert!(
                    before == old || after == old,
                    "the new master ({after}) counted at once after a failover: {:?}",
                    lock.report()
                );
                lock.release().await;
            }
        }
        tokio::time::sleep(ms(50)).await;
    };
    let status = manager.node_status()[0].clone();
    let seen = Instant::now();
    let new_master = failing.await.expect("join").expect("failover");
    Failover {
        refusal,
        status,
        seen,
        new_master,
    }
}
