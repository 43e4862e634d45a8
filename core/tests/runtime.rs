//! The manager keeps the runtime it was created on: background work (rollback of a cancelled
//! acquire, reconnection) runs there, whatever thread triggered it, inside a runtime or not.
//! These tests use no `#[tokio::test]`: the manager lives on a runtime of its own and is used
//! from plain threads, as the C, Python and Node bindings use it.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::{SEC, cluster, config, ms, unique};
use ironlock::LockManager;

/// A runtime like a binding's: its own worker threads, the caller's thread outside it.
fn binding_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `fut` on a fresh single-threaded runtime of a fresh thread, and drops that runtime
/// before returning: nothing spawned there can outlive the call.
fn on_foreign_thread<F, T>(fut: F) -> T
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(fut)
    })
    .join()
    .unwrap()
}

fn exists_anywhere(c: &common::Cluster, key: &str) -> Vec<usize> {
    (0..c.len())
        .filter(|&i| c.command(i, &["EXISTS", key]).unwrap().trim() != ":0")
        .collect()
}

#[test]
fn a_cancelled_acquire_dropped_outside_any_runtime_leaves_no_key() {
    let mut c = cluster(3);
    let rt = binding_runtime();
    let m = rt
        .block_on(LockManager::new(config(&c).node_timeout(ms(300))))
        .unwrap();
    let r = unique("foreign-cancel");
    // Two of three nodes answer nothing: node 0 sets the key and the round waits for a quorum.
    c.pause(1).unwrap();
    c.pause(2).unwrap();
    let (m2, r2) = (m.clone(), r.clone());
    std::thread::spawn(move || {
        let mut acquire = Box::pin(async move { m2.acquire(&[&r2], 10 * SEC).await });
        let poller = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let res =
            poller.block_on(async { tokio::time::timeout(ms(100), &mut acquire).await.is_err() });
        assert!(
            res,
            "the acquire finished although 2 of 3 nodes were paused"
        );
        drop(poller);
        // No runtime on this thread any more: the cancelled acquire is dropped here.
        assert!(tokio::runtime::Handle::try_current().is_err());
        drop(acquire);
    })
    .join()
    .unwrap();
    c.resume(1).unwrap();
    c.resume(2).unwrap();
    // The rollback was queued behind the acquire on every connection; wait for the nodes to
    // work through both.
    let deadline = Instant::now() + 5 * SEC;
    let mut left = exists_anywhere(&c, &r);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(ms(20));
        left = exists_anywhere(&c, &r);
    }
    assert!(left.is_empty(), "key left on nodes {left:?}");
}

#[test]
fn a_manager_used_only_from_foreign_threads_reconnects_after_a_restart() {
    let mut c = cluster(1);
    let rt = binding_runtime();
    let m = rt
        .block_on(LockManager::new(config(&c).retry_count(0)))
        .unwrap();
    let r = unique("foreign-reconnect");
    let m2 = m.clone();
    let r2 = r.clone();
    let lock = on_foreign_thread(async move { m2.acquire(&[&r2], 5 * SEC).await }).unwrap();
    on_foreign_thread(async move { lock.release().await });
    c.restart(0).unwrap();
    // Every attempt runs on a runtime that is gone when it returns: a reconnection spawned on
    // the caller's runtime would die with it, and the node would never come back.
    let deadline = Instant::now() + 10 * SEC;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (m2, r2) = (m.clone(), r.clone());
        let got = on_foreign_thread(async move {
            match m2.acquire(&[&r2], 5 * SEC).await {
                Ok(lock) => lock.release().await.held,
                Err(_) => false,
            }
        });
        if got {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never reconnected after {attempts} attempts: {:?}",
            m.node_status()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        attempts > 1,
        "the first call after the restart should have failed"
    );
    assert!(m.node_status()[0].reconnects >= 1, "{:?}", m.node_status());
}

/// A TCP listener that accepts connections and never answers (a blackholed node).
fn silent_node() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    (listener, url)
}

#[test]
fn a_bad_node_among_good_ones_is_a_node_error_not_a_start_up_failure() {
    let c = cluster(3);
    let rt = binding_runtime();
    let (_silent, silent) = silent_node();
    let mut urls = c.urls();
    urls.push(silent.clone());
    urls.push("redis://no-such-host.invalid:6379".to_owned());
    // N = 5, quorum 3: the three real nodes are enough.
    let config = ironlock::Config::new(urls)
        .restart_quarantine(false)
        .connect_timeout(10 * SEC);
    let started = Instant::now();
    let m = rt.block_on(LockManager::new(config)).unwrap();
    let took = started.elapsed();
    assert!(
        took < 5 * SEC,
        "start-up waited for the silent node's connect_timeout: {took:?}"
    );
    let lock = rt
        .block_on(m.acquire(&[unique("bad-node")], 5 * SEC))
        .unwrap();
    let status = m.node_status();
    let dns = status[4].last_error.clone().unwrap_or_default();
    assert!(dns.contains("cannot resolve host"), "{dns}");
    assert!(!status[3].connected, "{:?}", status[3]);
    assert!(rt.block_on(lock.release()).held);
    // Fewer resolvable hosts than a quorum: the node list cannot be used at all.
    let mut urls = vec![c.urls()[0].clone()];
    urls.push("redis://no-such-host.invalid:6379".to_owned());
    urls.push("redis://another-host.invalid:6380".to_owned());
    let e = rt
        .block_on(LockManager::new(ironlock::Config::new(urls)))
        .unwrap_err();
    assert_eq!(e.kind(), ironlock::ErrorKind::Connection, "{e}");
    assert!(
        e.message().contains("nodes[1]") && e.message().contains("nodes[2]"),
        "{e}"
    );
}

#[test]
fn a_refused_node_is_reported_at_once() {
    let rt = binding_runtime();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let config = ironlock::Config::new([format!("redis://127.0.0.1:{port}")])
        .connect_timeout(10 * SEC)
        .retry_count(0);
    let started = Instant::now();
    let m = rt.block_on(LockManager::new(config)).unwrap();
    let e = rt.block_on(m.acquire(&["x"], SEC)).unwrap_err();
    assert!(started.elapsed() < 5 * SEC, "{:?}", started.elapsed());
    let report = e.report().unwrap();
    assert_eq!(report.nodes[0].vote, ironlock::Vote::Error);
    assert!(
        report.nodes[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("refused"),
        "{report}"
    );
}
