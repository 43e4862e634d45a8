//! Soak worker (Rust): manager churn, then lock cycles through one manager while auto-extended
//! locks stay held. Driven by `tests/soak/run.py`; the protocol (SOAK_* environment, JSON lines)
//! is in tests/soak/README.md.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ironlock::{AcquireOptions, Config, ErrorKind, LockManager};
use serde_json::json;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        eprintln!("soak_worker: {name} is not set (run tests/soak/run.py)");
        std::process::exit(2)
    })
}

fn env_u64(name: &str) -> u64 {
    env(name).parse().unwrap_or_else(|_| {
        eprintln!("soak_worker: {name} is not a number");
        std::process::exit(2)
    })
}

fn emit(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Settings {
    nodes: Vec<String>,
    ttl: Duration,
    node_timeout: Duration,
    max_ttl: Duration,
}

impl Settings {
    fn config(&self) -> Config {
        Config::new(self.nodes.clone())
            .retry_count(0)
            .node_timeout(self.node_timeout)
            .max_ttl(self.max_ttl)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let s = Settings {
        nodes: env("SOAK_NODES").split(',').map(str::to_owned).collect(),
        ttl: Duration::from_millis(env_u64("SOAK_TTL_MS")),
        node_timeout: Duration::from_millis(env_u64("SOAK_NODE_TIMEOUT_MS")),
        max_ttl: Duration::from_millis(env_u64("SOAK_MAX_TTL_MS")),
    };
    let managers = env_u64("SOAK_MANAGERS");
    let managers_marks: Vec<u64> = env("SOAK_MANAGERS_MARKS")
        .split(',')
        .map(|m| {
            m.parse()
                .expect("SOAK_MANAGERS_MARKS: comma-separated counts")
        })
        .collect();
    let held_count = env_u64("SOAK_HELD");
    let prefix = env("SOAK_PREFIX");
    let control = PathBuf::from(env("SOAK_CONTROL"));
    let max_run = Duration::from_secs(env_u64("SOAK_MAX_SECONDS"));
    let once = AcquireOptions {
        retry_count: Some(0),
        ..Default::default()
    };

    // Managers: create, sometimes lock once, close.
    let mut last = Instant::now();
    let mut manager_errors = 0u64;
    for k in 0..managers {
        match LockManager::new(s.config()).await {
            Ok(m) => {
                if k % 10 == 0 {
                    if let Ok(lock) = m
                        .acquire_with(&[format!("{prefix}:churn")], s.ttl, once.clone())
                        .await
                    {
                        lock.release().await;
                    }
                }
                m.close();
            }
            Err(_) => manager_errors += 1,
        }
        if managers_marks.contains(&(k + 1)) {
            emit(json!({"event": "managers_mark", "done": k + 1}));
            wait_for(&control.join(format!("mark-{}", k + 1)), max_run).await;
        }
        if last.elapsed() >= Duration::from_millis(500) {
            emit(json!({"event": "progress", "phase": "managers", "done": k + 1}));
            last = Instant::now();
        }
    }
    emit(json!({"event": "managers_done", "done": managers, "manager_errors": manager_errors}));
    wait_for(&control.join("go"), max_run).await;

    // Cycles through one manager while `held_count` locks stay held under auto-extension.
    let m = LockManager::new(s.config()).await.unwrap_or_else(|e| {
        eprintln!("soak_worker: {e}");
        std::process::exit(2)
    });
    let mut held = Vec::new();
    for i in 0..held_count {
        let lock = m
            .acquire(&[format!("{prefix}:held:{i}")], s.ttl)
            .await
            .unwrap_or_else(|e| {
                eprintln!("soak_worker: held lock {i}: {e}");
                std::process::exit(2)
            });
        let keep = lock.keep_alive();
        held.push((lock, keep));
    }
    let resources: Vec<String> = (0..16).map(|i| format!("{prefix}:cycle:{i}")).collect();
    let (mut done, mut granted) = (0u64, 0u64);
    let mut failed: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut unclear: Vec<String> = Vec::new();
    let (mut max_acquire, mut max_release) = (Duration::ZERO, Duration::ZERO);
    let started = Instant::now();
    let stop = control.join("stop");
    loop {
        if done % 64 == 0 && (stop.exists() || started.elapsed() >= max_run) {
            break;
        }
        let resource = &resources[(done % 16) as usize];
        let t = Instant::now();
        let result = m
            .acquire_with(std::slice::from_ref(resource), s.ttl, once.clone())
            .await;
        max_acquire = max_acquire.max(t.elapsed());
        done += 1;
        match result {
            Ok(lock) => {
                granted += 1;
                let t = Instant::now();
                lock.release().await;
                max_release = max_release.max(t.elapsed());
            }
            Err(e) => {
                *failed.entry(e.kind().code()).or_default() += 1;
                let clear = e.kind() == ErrorKind::Unavailable && e.message().contains(resource);
                if !clear && unclear.len() < 5 {
                    unclear.push(e.to_string());
                }
            }
        }
        if last.elapsed() >= Duration::from_millis(500) {
            let failures: u64 = failed.values().sum();
            emit(json!({"event": "progress", "phase": "cycles", "done": done,
                        "granted": granted, "failed": failures}));
            last = Instant::now();
        }
    }
    let held_lost = held
        .iter()
        .filter(|(lock, _)| lock.is_lost() || !lock.is_valid())
        .count();
    for (lock, keep) in held {
        keep.stop();
        lock.release().await;
    }
    emit(json!({
        "event": "end", "done": done, "granted": granted, "failed": failed, "unclear": unclear,
        "max_acquire_ms": ms(max_acquire), "max_release_ms": ms(max_release),
        "held": held_count, "held_lost": held_lost,
    }));
    wait_for(&control.join("quit"), max_run).await;
    m.close();
}

async fn wait_for(path: &Path, limit: Duration) {
    let until = Instant::now() + limit;
    while !path.exists() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
