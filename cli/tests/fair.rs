//! `ironlock run --fair` (SPEC §10) with real processes: commands run in the order their waiters
//! queued, and a waiter killed with SIGKILL at the head of the line holds the queue up for no
//! longer than the queue timeout (2 × the retry delay, 400 ms by default).

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// Live entries of `key`'s queue on node `i`.
fn queued(cluster: &ironlock_harness::Cluster, i: usize, key: &str) -> usize {
    let raw = cluster
        .command(i, &["ZCARD", &format!("{key}{{{key}}}:ironlock:queue")])
        .expect("ZCARD");
    raw.trim().trim_start_matches(':').parse().expect("a count")
}

/// Waits (bounded) until `key`'s queue has `n` entries on every node, and still has them a
/// moment later (a waiter's first try-once round joins and leaves the line before its waiting
/// attempt joins for good).
fn wait_queued(cluster: &ironlock_harness::Cluster, key: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let all = || (0..3).all(|i| queued(cluster, i, key) == n);
    loop {
        while !all() {
            assert!(
                Instant::now() < deadline,
                "{key}: {n} waiters never in line on every node"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(150));
        if all() {
            return;
        }
    }
}

/// `ironlock run` holding `key` (plain) until the file `go` exists; returns once it holds.
fn hold_until(urls: &[String], key: &str, held: &Path, go: &Path) -> Child {
    let holder = spawn(ironlock(urls).args([
        "run",
        "--ttl",
        "10",
        key,
        "-c",
        &format!(
            "touch {}; while [ ! -f {} ]; do sleep 0.01; done",
            held.display(),
            go.display()
        ),
    ]));
    wait_for_file(held, LIMIT, |_| true);
    holder
}

fn fair_waiter(urls: &[String], key: &str, script: &str) -> Child {
    spawn(ironlock(urls).args(["run", "--fair", "--ttl", "5", key, "-c", script]))
}

#[test]
fn a_killed_head_delays_the_queue_by_at_most_the_queue_timeout() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let dir = temp_dir();
    let (held, go, order, second) = (
        dir.join("held"),
        dir.join("go"),
        dir.join("order"),
        dir.join("second"),
    );
    let key = unique("fair");
    let holder = hold_until(&urls, &key, &held, &go);
    let mut head = fair_waiter(&urls, &key, &format!("echo head >> {}", order.display()));
    wait_queued(&cluster, &key, 1);
    let next = fair_waiter(
        &urls,
        &key,
        &format!(
            "echo next >> {0}; touch {1}",
            order.display(),
            second.display()
        ),
    );
    wait_queued(&cluster, &key, 2);
    // The head dies without a word (its entries stay until their heartbeat runs out), and the
    // lock is released at the same moment.
    head.kill().expect("SIGKILL the head");
    let killed = Instant::now();
    std::fs::write(&go, "").unwrap();
    let out = finish(holder, LIMIT);
    assert_eq!(code(&out), 0, "holder: {}", stderr(&out));
    wait_for_file(&second, LIMIT, |_| true);
    let delay = killed.elapsed();
    // 400 ms of queue timeout, one retry pause (at most 200 ms for a fair waiter), two process
    // starts and rounds of slack on a busy machine.
    assert!(
        delay < Duration::from_millis(2000),
        "the dead head held the queue for {delay:?}"
    );
    let out = finish(next, LIMIT);
    assert_eq!(code(&out), 0, "next: {}", stderr(&out));
    let _ = head.wait();
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "next\n");
    // Nothing is left in line, and the lock is free.
    for i in 0..3 {
        assert_eq!(queued(&cluster, i, &key), 0, "node {i}");
        assert_eq!(get(&cluster, i, &key), None, "key left on node {i}");
    }
}

#[test]
fn fair_commands_run_in_the_order_they_queued() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let dir = temp_dir();
    let (held, go, order) = (dir.join("held"), dir.join("go"), dir.join("order"));
    let key = unique("fair");
    let holder = hold_until(&urls, &key, &held, &go);
    let mut waiters = Vec::new();
    for w in 0..4 {
        waiters.push(fair_waiter(
            &urls,
            &key,
            &format!("echo {w} >> {}", order.display()),
        ));
        wait_queued(&cluster, &key, w + 1);
    }
    std::fs::write(&go, "").unwrap();
    assert_eq!(code(&finish(holder, LIMIT)), 0);
    for w in waiters {
        let out = finish(w, LIMIT);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "0\n1\n2\n3\n");
}
