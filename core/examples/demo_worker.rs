//! Demo worker (Rust): read-modify-write a shared counter under the lock until the deadline.
//! Settings come from the environment set by `demo/run.py`; prints one JSON summary line.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ironlock::{AcquireOptions, Config, LockManager, Report};

type Votes = BTreeMap<String, BTreeMap<&'static str, u64>>;

fn tally(votes: &mut Votes, report: &Report) {
    for n in &report.nodes {
        *votes
            .entry(n.url.to_string())
            .or_default()
            .entry(n.vote.as_str())
            .or_default() += 1;
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        eprintln!("demo_worker: {name} is not set (run demo/run.py)");
        std::process::exit(64)
    })
}

fn json_map<V: std::fmt::Display>(items: impl Iterator<Item = (String, V)>) -> String {
    let parts: Vec<String> = items.map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", parts.join(","))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: Vec<String> = env("DEMO_NODES").split(',').map(str::to_owned).collect();
    let config = Config::new(nodes)
        .max_ttl(Duration::from_secs(2))
        .retry_delay(Duration::from_millis(30))
        .retry_jitter(Duration::from_millis(20))
        .node_timeout(Duration::from_millis(100));
    let manager = LockManager::new(config).await?;
    let referee = format!("redis://127.0.0.1:{}", env("DEMO_REFEREE_PORT"));
    let mut conn = redis::Client::open(referee)?
        .get_multiplexed_async_connection()
        .await?;
    let (resource, counter) = (env("DEMO_RESOURCE"), env("DEMO_COUNTER"));
    let deadline = Instant::now() + Duration::from_secs_f64(env("DEMO_SECONDS").parse()?);
    let mut acquisitions = 0u64;
    let mut failures = BTreeMap::<&str, u64>::new();
    let mut votes = Votes::new();
    while Instant::now() < deadline {
        let opts = AcquireOptions::wait(Duration::from_secs(2));
        let lock = match manager
            .acquire_with(&[&resource], Duration::from_secs(1), opts)
            .await
        {
            Ok(lock) => lock,
            Err(e) => {
                *failures.entry(e.kind().code()).or_default() += 1;
                if let Some(r) = e.report() {
                    tally(&mut votes, r);
                }
                continue;
            }
        };
        let v: Option<u64> = redis::cmd("GET")
            .arg(&counter)
            .query_async(&mut conn)
            .await?;
        let next = v.unwrap_or(0) + 1;
        let _: () = redis::cmd("SET")
            .arg(&counter)
            .arg(next)
            .query_async(&mut conn)
            .await?;
        acquisitions += 1;
        tally(&mut votes, &lock.report());
        lock.release().await;
    }
    // The last release returned at a quorum: let its other deletes reach their nodes.
    manager.flush().await;
    let votes = json_map(votes.into_iter().map(|(url, per)| {
        (
            url,
            json_map(per.into_iter().map(|(k, v)| (k.to_owned(), v))),
        )
    }));
    let failures = json_map(failures.into_iter().map(|(k, v)| (k.to_owned(), v)));
    println!(
        "{{\"name\":\"{}\",\"language\":\"rust\",\"acquisitions\":{acquisitions},\"failures\":{failures},\"votes\":{votes}}}",
        env("DEMO_NAME")
    );
    Ok(())
}
