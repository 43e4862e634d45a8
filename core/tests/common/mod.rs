//! Shared helpers for the integration tests: real redis-server nodes and managers over them.
#![allow(dead_code)]

use std::time::Duration;

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
