//! A master with replicas under a group of real Sentinel processes (`redis-server CONF
//! --sentinel`), failed over for real (`SENTINEL FAILOVER`, or a killed master).

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::{Cluster, free_port, raw_command, redis_server, unique};

/// A Sentinel-managed master: `data` node 0 is the first master and the others its replicas;
/// which one is master now is what the sentinels say ([`SentinelGroup::master`]).
pub struct SentinelGroup {
    /// The data nodes (kill, pause, restart them through this).
    pub data: Cluster,
    /// The master's name in the sentinels' configuration.
    pub name: String,
    sentinels: Vec<(u16, Child)>,
    dir: PathBuf,
}

/// Waits until `ready` holds, polling every 20 ms, for at most `limit`.
fn wait(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("{what}: not within {limit:?}"))
}

/// The `field:value` lines of an INFO reply, as `value` of `field`.
fn info_field(raw: &str, field: &str) -> Option<String> {
    raw.split("\r\n")
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':').map(str::to_owned))
}

impl SentinelGroup {
    /// Starts a master, `replicas` replicas of it, and `sentinels` sentinels (quorum: a
    /// majority of them) that watch it, and waits until every replica is in sync and every
    /// sentinel knows every replica.
    pub fn start(replicas: usize, sentinels: usize) -> Result<SentinelGroup, String> {
        let mut data = Cluster::start(1)?;
        let port = data.nodes()[0].port().to_string();
        for _ in 0..replicas {
            data.add_node(&["--replicaof", "127.0.0.1", &port])?;
        }
        for i in 1..=replicas {
            let p = data.nodes()[i].port();
            wait(Duration::from_secs(10), "replica link up", || {
                raw_command(p, &["INFO", "replication"])
                    .is_ok_and(|r| r.contains("master_link_status:up"))
            })?;
        }
        let name = unique("master").replace('-', "");
        let dir = std::env::temp_dir().join(unique("ironlock-sentinels"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut group = SentinelGroup {
            data,
            name,
            sentinels: Vec::new(),
            dir,
        };
        for i in 0..sentinels {
            group.start_sentinel(i, &port, sentinels / 2 + 1)?;
        }
        for &(sp, _) in &group.sentinels {
            let name = group.name.clone();
            wait(
                Duration::from_secs(15),
                "sentinel sees the replicas",
                || {
                    raw_command(sp, &["SENTINEL", "REPLICAS", &name])
                        .is_ok_and(|r| r.starts_with(&format!("*{replicas}\r\n")))
                },
            )?;
        }
        Ok(group)
    }

    fn start_sentinel(&mut self, i: usize, master_port: &str, quorum: usize) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port().map_err(|e| e.to_string())?;
            let conf = self.dir.join(format!("sentinel{i}.conf"));
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\nloglevel warning\ndir {}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 4000\n\
                 sentinel parallel-syncs {name} 1\n",
                self.dir.display(),
                name = self.name,
            );
            std::fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
            let mut cmd = Command::new(redis_server());
            cmd.arg(&conf).arg("--sentinel");
            let mut child = crate::spawn_quiet(&mut cmd)
                .map_err(|e| format!("cannot start a sentinel: {e}"))?;
            match crate::await_own_listener(&mut child, port, "a sentinel", Duration::from_secs(10))
            {
                Ok(()) => {
                    self.sentinels.push((port, child));
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|(p, _)| *p).collect()
    }

    /// `redis-sentinel://127.0.0.1:S1,127.0.0.1:S2,…#NAME`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(p, _)| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis-sentinel://{}#{}", hosts.join(","), self.name)
    }

    /// The port of the master the first sentinel that answers names.
    pub fn master_port(&self) -> Option<u16> {
        master_port(&self.sentinel_ports(), &self.name)
    }

    /// The index in `data` of the node on `port`.
    pub fn index_of(&self, port: u16) -> Option<usize> {
        self.data.nodes().iter().position(|n| n.port() == port)
    }

    /// The index in `data` of the current master.
    pub fn master(&self) -> Option<usize> {
        self.index_of(self.master_port()?)
    }

    /// SIGSTOPs sentinel `i`: it keeps its sockets but answers nothing (a host that drops
    /// packets).
    pub fn pause_sentinel(&self, i: usize) {
        crate::signal(self.sentinels[i].1.id(), libc::SIGSTOP);
    }

    /// SIGCONTs sentinel `i`.
    pub fn resume_sentinel(&self, i: usize) {
        crate::signal(self.sentinels[i].1.id(), libc::SIGCONT);
    }

    /// SIGSTOPs every sentinel (a client cut off from its sentinels).
    pub fn pause_sentinels(&self) {
        (0..self.sentinels.len()).for_each(|i| self.pause_sentinel(i));
    }

    /// SIGCONTs every sentinel.
    pub fn resume_sentinels(&self) {
        (0..self.sentinels.len()).for_each(|i| self.resume_sentinel(i));
    }

    /// `SENTINEL FAILOVER` and waits until a replica is the master the sentinels name and says
    /// so itself (`role:master`), and the old master is a replica; returns its index in `data`.
    pub fn failover(&self) -> Result<usize, String> {
        failover(&self.sentinel_ports(), &self.name, &self.data)
    }

    /// Waits until the sentinels name a master other than the one on `old` and it says it is
    /// master (after a failover they started themselves, e.g. for a killed master).
    pub fn await_new_master(&self, old: u16) -> Result<usize, String> {
        await_new_master(&self.sentinel_ports(), &self.name, &self.data, old)
    }
}

/// [`SentinelGroup::failover`] for a group known by its sentinels' ports, its master's name and
/// its data nodes.
pub fn failover(sentinels: &[u16], name: &str, data: &Cluster) -> Result<usize, String> {
    let old = master_port(sentinels, name).ok_or("no sentinel names a master")?;
    let sp = sentinels.first().ok_or("no sentinels")?;
    let reply = raw_command(*sp, &["SENTINEL", "FAILOVER", name])?;
    if !reply.starts_with("+OK") {
        return Err(format!("SENTINEL FAILOVER: {}", reply.trim()));
    }
    let new = await_new_master(sentinels, name, data, old)?;
    // The old master is alive: wait until the sentinels have made it a replica.
    wait(Duration::from_secs(30), "the old master demoted", || {
        raw_command(old, &["INFO", "replication"])
            .is_ok_and(|r| info_field(&r, "role").as_deref() == Some("slave"))
    })?;
    Ok(new)
}

/// [`SentinelGroup::await_new_master`] for a group known by its parts.
pub fn await_new_master(
    sentinels: &[u16],
    name: &str,
    data: &Cluster,
    old: u16,
) -> Result<usize, String> {
    let mut found = None;
    wait(Duration::from_secs(30), "a new master", || {
        let Some(p) = master_port(sentinels, name).filter(|p| *p != old) else {
            return false;
        };
        let role = raw_command(p, &["INFO", "replication"]).ok();
        let ok = role
            .as_deref()
            .and_then(|r| info_field(r, "role"))
            .as_deref()
            == Some("master");
        if ok {
            found = Some(p);
        }
        ok
    })?;
    found
        .and_then(|p| data.nodes().iter().position(|n| n.port() == p))
        .ok_or_else(|| "the new master is not one of the data nodes".to_owned())
}

/// The port of the master named `name` by the first of these sentinels that answers.
pub fn master_port(sentinels: &[u16], name: &str) -> Option<u16> {
    sentinels.iter().find_map(|sp| {
        let raw = raw_command(*sp, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name]).ok()?;
        raw.split("\r\n").nth(4)?.parse().ok()
    })
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
