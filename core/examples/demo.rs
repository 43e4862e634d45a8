//! The main job, end to end: 5 local redis-server nodes, contending clients doing a
//! read-modify-write on a shared counter under the lock, one node killed and restarted empty
//! mid-run, and a table that proves no update was lost.
//!
//! `cargo run -p ironlock --example demo [-- --seconds N]`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ironlock::{AcquireOptions, Config, LockManager, NodeStatus};
use ironlock_harness::Cluster;

const WORKERS: usize = 6;
const NODES: usize = 5;

fn main() {
    let mut seconds = 10u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&s| s >= 4)
                    .unwrap_or_else(|| usage())
            }
            "--short" => seconds = 5,
            _ => usage(),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ok = rt.block_on(run(Duration::from_secs(seconds)));
    std::process::exit(if ok { 0 } else { 1 });
}

fn usage() -> ! {
    eprintln!("usage: demo [--seconds N (>= 4)] [--short]");
    std::process::exit(64);
}

async fn run(total: Duration) -> bool {
    let mut cluster = Cluster::start(NODES).unwrap_or_else(|e| fail(&e));
    let referee = Cluster::start(1).unwrap_or_else(|e| fail(&e));
    println!(
        "started {NODES} redis-server nodes on ports {:?} and a referee on {}",
        cluster.nodes().iter().map(|n| n.port()).collect::<Vec<_>>(),
        referee.nodes()[0].port()
    );
    // max_ttl 2 s keeps the restart quarantine (max_ttl + drift + 1 s = 3.02 s) short enough to watch.
    let config = Config::new(cluster.urls())
        .max_ttl(Duration::from_secs(2))
        .retry_delay(Duration::from_millis(30))
        .retry_jitter(Duration::from_millis(20));
    let mut managers = Vec::new();
    for _ in 0..WORKERS {
        managers.push(
            LockManager::new(config.clone())
                .await
                .unwrap_or_else(|e| fail(&e.to_string())),
        );
    }
    println!("fresh nodes have uptime 0 and are quarantined like restarted ones: waiting 3.1 s");
    tokio::time::sleep(Duration::from_millis(3100)).await;

    let counter_key = format!("demo:counter:{}", std::process::id());
    let resource = format!("demo:resource:{}", std::process::id());
    let acquisitions: Arc<Vec<AtomicU64>> =
        Arc::new((0..WORKERS).map(|_| AtomicU64::new(0)).collect());
    let stop_at = Instant::now() + total;
    let referee_url = referee.urls()[0].clone();
    let mut tasks = Vec::new();
    for (w, m) in managers.iter().cloned().enumerate() {
        let (acq, key, res, url) = (
            acquisitions.clone(),
            counter_key.clone(),
            resource.clone(),
            referee_url.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut conn = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            while Instant::now() < stop_at {
                let opts = AcquireOptions::wait(Duration::from_secs(2));
                let Ok(lock) = m.acquire_with(&[&res], Duration::from_secs(1), opts).await else {
                    continue;
                };
                let v: Option<u64> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(v.unwrap_or(0) + 1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                acq[w].fetch_add(1, Ordering::Relaxed);
                lock.release().await;
            }
        }));
    }
    let started = Instant::now();
    let kill_at = total / 3;
    let (mut killed, mut restarted) = (false, false);
    while Instant::now() < stop_at {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let t = started.elapsed();
        if !killed && t >= kill_at {
            cluster.kill(2).unwrap();
            killed = true;
            println!("  t={:>4.1}s  node 2 killed (-9)", t.as_secs_f64());
        } else if killed && !restarted && t >= kill_at + Duration::from_millis(700) {
            cluster.start_node(2).unwrap();
            restarted = true;
            println!(
                "  t={:>4.1}s  node 2 restarted empty: quarantined for 3.02 s",
                t.as_secs_f64()
            );
        }
        if t.as_millis() % 1000 < 250 {
            let n: u64 = acquisitions.iter().map(|a| a.load(Ordering::Relaxed)).sum();
            println!("  t={:>4.1}s  acquisitions so far: {n}", t.as_secs_f64());
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut conn = redis::Client::open(referee_url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let counter: u64 = redis::cmd("GET")
        .arg(&counter_key)
        .query_async(&mut conn)
        .await
        .unwrap_or(0);
    let total_acq: u64 = acquisitions.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    let status: Vec<Vec<NodeStatus>> = managers.iter().map(|m| m.node_status()).collect();
    let wakeups: u64 = managers.iter().map(|m| m.stats().wakeups).sum();

    println!("\n| client | acquisitions |\n| --- | ---: |");
    for (w, a) in acquisitions.iter().enumerate() {
        println!("| rust worker {w} | {} |", a.load(Ordering::Relaxed));
    }
    println!("| **total** | **{total_acq}** |");
    println!(
        "\n| node | votes for | against | errors | timeouts | refused by restart quarantine |\n| --- | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut quarantined = 0;
    for i in 0..NODES {
        let sum = |f: fn(&NodeStatus) -> u64| status.iter().map(|s| f(&s[i])).sum::<u64>();
        let q = sum(|s| s.not_eligible);
        quarantined += q;
        println!(
            "| {i} ({}) | {} | {} | {} | {} | {q} |",
            status[0][i].url,
            sum(|s| s.votes_for),
            sum(|s| s.votes_against),
            sum(|s| s.errors),
            sum(|s| s.timeouts)
        );
    }
    let lost = total_acq as i64 - counter as i64;
    println!("\n| check | value | ok |\n| --- | ---: | --- |");
    let checks = [
        ("acquisitions", total_acq.to_string(), total_acq > 0),
        ("final counter", counter.to_string(), counter == total_acq),
        ("lost updates", lost.to_string(), lost == 0),
        (
            "votes refused by restart quarantine",
            quarantined.to_string(),
            quarantined > 0,
        ),
        ("waits ended early by a release", wakeups.to_string(), true),
    ];
    let mut ok = true;
    for (name, v, pass) in checks {
        ok &= pass;
        println!("| {name} | {v} | {} |", if pass { "yes" } else { "NO" });
    }
    println!(
        "\n{}",
        if ok {
            "demo passed: one holder at a time, 0 lost updates"
        } else {
            "demo FAILED"
        }
    );
    ok
}

fn fail(e: &str) -> ! {
    eprintln!("demo: {e}");
    std::process::exit(1);
}
