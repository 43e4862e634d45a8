//! A real Redis Cluster: `redis-server --cluster-enabled yes` processes formed with
//! `redis-cli --cluster create`, masters with replicas, failed over for real
//! (`CLUSTER FAILOVER` on a replica, or a killed master).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Cluster, raw_command};

/// A Redis Cluster of `masters` shards with `replicas` replicas each. `nodes` holds every
/// process (kill, pause, restart them through it); which is a master changes with failovers.
pub struct RedisCluster {
    /// The processes, in the order `redis-cli --cluster create` was given them (it makes the
    /// first `masters` the masters).
    pub nodes: Cluster,
}

fn wait(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{what}: not within {limit:?}"))
}

/// The bulk-string text of a raw RESP reply (INFO, CLUSTER INFO, CLUSTER NODES).
fn bulk(raw: &str) -> String {
    match raw.split_once("\r\n") {
        Some((head, rest)) if head.starts_with('$') => rest.to_owned(),
        _ => raw.to_owned(),
    }
}

impl RedisCluster {
    /// Starts `masters × (1 + replicas)` cluster-enabled nodes, forms the cluster and waits
    /// until every node reports `cluster_state:ok` and every replica is in sync.
    pub fn start(masters: usize, replicas: usize) -> Result<RedisCluster, String> {
        let n = masters * (1 + replicas);
        let nodes = Cluster::start_with(
            n,
            &["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"],
        )?;
        let addrs: Vec<String> = nodes
            .nodes()
            .iter()
            .map(|x| format!("127.0.0.1:{}", x.port()))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("redis-cli --cluster create: {e} (is redis-tools installed?)"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        let c = RedisCluster { nodes };
        for i in 0..n {
            let port = c.nodes.nodes()[i].port();
            wait(Duration::from_secs(30), "cluster_state:ok", || {
                raw_command(port, &["CLUSTER", "INFO"])
                    .is_ok_and(|r| r.contains("cluster_state:ok"))
            })?;
        }
        for i in 0..n {
            if c.role(i).as_deref() == Some("slave") {
                let port = c.nodes.nodes()[i].port();
                wait(Duration::from_secs(30), "replica link up", || {
                    raw_command(port, &["INFO", "replication"])
                        .is_ok_and(|r| r.contains("master_link_status:up"))
                })?;
            }
        }
        Ok(c)
    }

    /// `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,…` with every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .nodes()
            .iter()
            .map(|x| format!("127.0.0.1:{}", x.port()))
            .collect();
        format!("redis-cluster://{}", seeds.join(","))
    }

    /// `role` of node `i` from `INFO replication` (`master` / `slave`), if it answers.
    pub fn role(&self, i: usize) -> Option<String> {
        role(&self.nodes, i)
    }

    /// The index of the node serving `slot` as master.
    pub fn master_of_slot(&self, slot: u16) -> Option<usize> {
        master_of_slot(&self.nodes, slot)
    }

    /// A replica of the master at index `master`.
    pub fn replica_of(&self, master: usize) -> Option<usize> {
        replica_of(&self.nodes, master)
    }

    /// `CLUSTER FAILOVER` on a replica of the master at index `master`: waits until that
    /// replica is a master and the old one a replica; returns the new master's index.
    pub fn failover(&self, master: usize) -> Result<usize, String> {
        failover(&self.nodes, master)
    }
}

/// [`RedisCluster::role`] over the cluster's processes.
pub fn role(nodes: &Cluster, i: usize) -> Option<String> {
    let port = nodes.nodes().get(i)?.port();
    let raw = raw_command(port, &["INFO", "replication"]).ok()?;
    bulk(&raw)
        .split("\r\n")
        .find_map(|l| l.strip_prefix("role:").map(str::to_owned))
}

/// [`RedisCluster::master_of_slot`] over the cluster's processes.
pub fn master_of_slot(nodes: &Cluster, slot: u16) -> Option<usize> {
    for via in 0..nodes.len() {
        let Ok(raw) = raw_command(nodes.nodes()[via].port(), &["CLUSTER", "NODES"]) else {
            continue;
        };
        for line in bulk(&raw).lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|r| match r.split_once('-') {
                Some((a, b)) => {
                    a.parse::<u16>().is_ok_and(|a| a <= slot)
                        && b.parse::<u16>().is_ok_and(|b| slot <= b)
                }
                None => r.parse::<u16>().is_ok_and(|s| s == slot),
            });
            if serves {
                let port: u16 = f[1].split(['@', ':']).nth(1)?.parse().ok()?;
                return nodes.nodes().iter().position(|x| x.port() == port);
            }
        }
    }
    None
}

/// [`RedisCluster::replica_of`] over the cluster's processes.
pub fn replica_of(nodes: &Cluster, master: usize) -> Option<usize> {
    let mport = nodes.nodes().get(master)?.port();
    (0..nodes.len()).find(|&i| {
        let port = nodes.nodes()[i].port();
        raw_command(port, &["INFO", "replication"]).is_ok_and(|r| {
            let r = bulk(&r);
            r.contains("role:slave") && r.contains(&format!("master_port:{mport}"))
        })
    })
}

/// [`RedisCluster::failover`] over the cluster's processes.
pub fn failover(nodes: &Cluster, master: usize) -> Result<usize, String> {
    let r = replica_of(nodes, master).ok_or_else(|| format!("node {master} has no replica"))?;
    let port = nodes.nodes()[r].port();
    let reply = raw_command(port, &["CLUSTER", "FAILOVER"])?;
    if !reply.starts_with("+OK") {
        return Err(format!("CLUSTER FAILOVER: {}", reply.trim()));
    }
    wait(Duration::from_secs(30), "the replica promoted", || {
        role(nodes, r).as_deref() == Some("master")
            && role(nodes, master).as_deref() == Some("slave")
    })?;
    Ok(r)
}
