//! What kind of server a voter is and which one answers: the `INFO` a connection reads
//! (`run_id`, uptime, role, replication ID), the servers a manager's nodes turned out to be (one
//! server is one vote), and the master a Sentinel voter's sentinels name.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use crate::config::{EffectiveTls, SentinelSpec};

/// Which server each of a manager's nodes turned out to be, by the `run_id` (or data epoch) read
/// at its last connection: two URLs that name one server (a DNS alias, a second address of the
/// same host) must never be counted as two votes. The later one in the node list does not count
/// while both say they are the same server.
pub(crate) struct Identities {
    pub(crate) displays: Vec<Arc<str>>,
    ids: Mutex<Vec<Option<String>>>,
    /// Bit i: node i is the same server as an earlier node (read on every vote, without a lock).
    shadowed: AtomicU64,
}

impl Identities {
    pub(crate) fn new(displays: Vec<Arc<str>>) -> Arc<Identities> {
        let n = displays.len();
        Arc::new(Identities {
            displays,
            ids: Mutex::new(vec![None; n]),
            shadowed: AtomicU64::new(0),
        })
    }

    /// Records what node `index` said it is, and which nodes are now one server with an earlier.
    pub(crate) fn record(&self, index: usize, id: &str) {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        ids[index] = (!id.is_empty()).then(|| id.to_owned());
        let mut mask = 0u64;
        for (i, id) in ids.iter().enumerate() {
            if id.is_some() && ids[..i].contains(id) {
                mask |= 1 << i;
            }
        }
        self.shadowed.store(mask, Ordering::Release);
    }

    pub(crate) fn is_shadowed(&self, index: usize) -> bool {
        self.shadowed.load(Ordering::Acquire) & (1 << index) != 0
    }

    /// The earlier node that node `index` is the same server as, with its URL and the id.
    pub(crate) fn same_as(&self, index: usize) -> Option<(usize, Arc<str>, String)> {
        if !self.is_shadowed(index) {
            return None;
        }
        let ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        let id = ids[index].clone()?;
        let first = ids.iter().position(|other| other.as_deref() == Some(&id))?;
        (first < index).then(|| (first, self.displays[first].clone(), id))
    }
}

/// What `INFO server` and `INFO replication` said at the last (re)connection.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerInfo {
    pub(crate) run_id: String,
    pub(crate) version: String,
    pub(crate) uptime: Duration,
    /// `role`: `master` or `slave`; empty when not read (no `INFO`).
    pub(crate) role: String,
    /// A replica's master, `host:port`.
    pub(crate) master_of_replica: String,
    /// `master_replid`: changes when a replica is promoted (and at every start).
    pub(crate) replid: String,
    /// `master_replid2` is set: this master was promoted from a replica during its lifetime
    /// (a failover, `REPLICAOF NO ONE`), so it may lack keys its old master granted.
    pub(crate) promoted: bool,
    /// A master's connected replicas (`slaveN:ip=…,port=…`), as `host:port`.
    pub(crate) replicas: Vec<String>,
    /// `redis_mode:cluster`: a node of a Redis Cluster, which serves only its own slots.
    pub(crate) cluster_node: bool,
}

/// How long a Sentinel voter's master counts after a majority of its sentinels last named it:
/// its votes count only while the sentinels confirmed it within this time, and a master promoted
/// by a failover serves this much more quarantine. Sentinel can fail over from a master that is
/// still running (a pause, a partition, or a new master it wrongly saw as down right after a
/// failover, then failed back from), and that master keeps answering as a master, its clients
/// none the wiser, until the sentinels demote it seconds later: each vote from it counts only
/// if the sentinels named it less than this long before, and the new master counts only once
/// every lock granted by the old one until then has expired.
pub(crate) const SENTINEL_LEASE: Duration = Duration::from_secs(2);

/// How often a connected Sentinel voter asks its sentinels again (a quarter of the lease, so
/// that a sentinel or two slow to answer does not let the lease lapse).
pub(crate) const SENTINEL_RECHECK: Duration = Duration::from_millis(500);

/// How long a question to the sentinels waits, once a majority agreed, for the others'
/// answers before their connections are given up.
const LATE_ANSWER: Duration = Duration::from_millis(100);

/// Connections to a Sentinel voter's sentinels, made when first needed and again after an
/// error (the connect-time lookup uses fresh ones; the watch of a connected voter keeps them).
pub(crate) struct SentinelLinks {
    conns: Vec<Option<MultiplexedConnection>>,
}

impl SentinelLinks {
    pub(crate) fn new(spec: &SentinelSpec) -> SentinelLinks {
        SentinelLinks {
            conns: vec![None; spec.sentinels.len()],
        }
    }

    /// Asks every sentinel at once which node is the master now, and returns its `host:port`
    /// when a majority of the configured sentinels name the same address: a lone sentinel cut
    /// off from the others may still name a master that was replaced.
    pub(crate) async fn majority(
        &mut self,
        spec: &SentinelSpec,
        tls: &EffectiveTls,
        timeout: Duration,
        scrub: impl Fn(&str) -> String,
    ) -> Result<(String, u16), String> {
        let asks = self
            .conns
            .iter_mut()
            .zip(&spec.sentinels)
            .map(|(slot, info)| async move {
                if slot.is_none() {
                    let client = build_client(tls, info.clone())?;
                    let config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout));
                    *slot = Some(
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                            .map_err(|e| e.to_string())?,
                    );
                }
                let conn = slot.as_mut().expect("connected above");
                let reply = redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&spec.master)
                    .query_async::<Option<(String, u16)>>(conn)
                    .await;
                if reply.is_err() {
                    *slot = None;
                }
                reply.map_err(|e| e.to_string())
            });
        // Done as soon as a majority agrees: a sentinel that hangs (a host that drops packets)
        // costs nothing while the others answer.
        let mut answers: futures_util::stream::FuturesUnordered<_> = asks
            .enumerate()
            .map(|(k, ask)| async move { (k, ask.await) })
            .collect();
        let need = spec.sentinels.len() / 2 + 1;
        let mut named: Vec<((String, u16), usize)> = Vec::new();
        let mut errors = Vec::new();
        let mut answered = vec![false; spec.sentinels.len()];
        let mut agreed = None;
        while let Some((k, a)) = answers.next().await {
            answered[k] = true;
            match a {
                Ok(Some(addr)) => match named.iter_mut().find(|(x, _)| *x == addr) {
                    Some((_, n)) => *n += 1,
                    None => named.push((addr, 1)),
                },
                Ok(None) => errors.push((
                    k,
                    format!("sentinel {k} knows no master named {:?}", spec.master),
                )),
                Err(e) => errors.push((k, format!("sentinel {k}: {}", scrub(&e)))),
            }
            if let Some((addr, _)) = named.iter().find(|(_, n)| *n >= need) {
                agreed = Some(addr.clone());
                break;
            }
        }
        if agreed.is_some() {
            // The others, if they answer soon (a healthy sentinel a little slower than the
            // first two), keep their connections; a question left unanswered would hold its
            // place on its sentinel's connection, so that one connects afresh next time.
            let _ = tokio::time::timeout(LATE_ANSWER, async {
                while let Some((k, _)) = answers.next().await {
                    answered[k] = true;
                }
            })
            .await;
        }
        drop(answers);
        if let Some(addr) = agreed {
            for (slot, done) in self.conns.iter_mut().zip(answered) {
                if !done {
                    *slot = None;
                }
            }
            return Ok(addr);
        }
        errors.sort();
        let errors: Vec<String> = errors.into_iter().map(|(_, e)| e).collect();
        let said: Vec<String> = named
            .iter()
            .map(|((h, p), n)| format!("{h}:{p} ({n})"))
            .collect();
        Err(format!(
            "no majority of the {} sentinels names the master of {:?} (need {need}; named: {}{}{})",
            spec.sentinels.len(),
            spec.master,
            if said.is_empty() {
                "none".to_owned()
            } else {
                said.join(", ")
            },
            if errors.is_empty() { "" } else { "; " },
            errors.join("; ")
        ))
    }
}

/// Asks the sentinels of a Sentinel voter which node is the master now (a majority must agree,
/// see [`SentinelLinks::majority`]), and returns a client for it (built from the data nodes'
/// `template`) and its `host:port`.
pub(crate) async fn find_master(
    spec: &SentinelSpec,
    template: &redis::ConnectionInfo,
    tls: &EffectiveTls,
    timeout: Duration,
    scrub: impl Fn(&str) -> String,
) -> Result<(redis::Client, String), String> {
    let (host, port) = SentinelLinks::new(spec)
        .majority(spec, tls, timeout, scrub)
        .await?;
    let addr = addr_like(template, host.clone(), port);
    let client = build_client(tls, template.clone().set_addr(addr))?;
    Ok((client, format!("{host}:{port}")))
}

/// A client for `info`, with the node's CA and client certificate when it uses TLS.
pub(crate) fn build_client(
    tls: &EffectiveTls,
    info: redis::ConnectionInfo,
) -> Result<redis::Client, String> {
    // TCP_NODELAY, as the server sets on its side: a request is written at once even while an
    // earlier one to the node is unanswered (a round decided by the quorum leaves the slowest
    // node's request outstanding), instead of waiting for that node's acknowledgement.
    let nodelay = info.tcp_settings().clone().set_nodelay(true);
    let info = info.set_tcp_settings(nodelay);
    let uses_tls = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
    match certificates(tls) {
        Some(certs) if uses_tls => {
            redis::Client::build_with_tls(info, certs).map_err(|e| format!("tls: {e}"))
        }
        _ => redis::Client::open(info).map_err(|e| e.to_string()),
    }
}

/// The node's own CA and client certificate, when it has either.
pub(crate) fn certificates(tls: &EffectiveTls) -> Option<redis::TlsCertificates> {
    (tls.ca_cert.is_some() || tls.client.is_some()).then(|| redis::TlsCertificates {
        client_tls: tls
            .client
            .clone()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert,
                client_key: key,
            }),
        root_cert: tls.ca_cert.clone(),
    })
}

/// The address `host:port` over the connection `template`'s transport (TLS or not).
pub(crate) fn addr_like(
    template: &redis::ConnectionInfo,
    host: String,
    port: u16,
) -> redis::ConnectionAddr {
    match template.addr() {
        redis::ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => redis::ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => redis::ConnectionAddr::Tcp(host, port),
    }
}

pub(crate) fn parse_info(raw: &str) -> ServerInfo {
    let mut info = ServerInfo::default();
    for line in raw.lines() {
        let Some((k, v)) = line.trim().split_once(':') else {
            continue;
        };
        match k {
            "run_id" => info.run_id = v.to_owned(),
            "redis_version" | "valkey_version" if info.version.is_empty() => {
                info.version = v.to_owned()
            }
            "uptime_in_seconds" => {
                info.uptime = Duration::from_secs(v.parse().unwrap_or(0));
            }
            "role" => info.role = v.to_owned(),
            "redis_mode" => info.cluster_node = v == "cluster",
            "master_host" => info.master_of_replica.insert_str(0, v),
            "master_port" => {
                info.master_of_replica.push(':');
                info.master_of_replica.push_str(v);
            }
            "master_replid" => info.replid = v.to_owned(),
            "master_replid2" => info.promoted = v.bytes().any(|b| b != b'0'),
            k if k
                .strip_prefix("slave")
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) =>
            {
                let field = |name: &str| {
                    v.split(',')
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                };
                if let (Some(ip), Some(port)) = (field("ip"), field("port")) {
                    info.replicas.push(format!("{ip}:{port}"));
                }
            }
            _ => {}
        }
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_node_with_an_earlier_nodes_run_id_does_not_count() {
        let ids = Identities::new(vec!["a".into(), "b".into(), "c".into()]);
        ids.record(2, "R1");
        assert!(!ids.is_shadowed(2), "alone so far");
        ids.record(0, "R1");
        assert!(ids.is_shadowed(2) && !ids.is_shadowed(0));
        assert_eq!(ids.same_as(2).map(|(i, _, _)| i), Some(0));
        ids.record(1, "R2");
        assert!(!ids.is_shadowed(1));
        // Node 0 restarted (a new run_id): the two are no longer known to be one server.
        ids.record(0, "R3");
        assert!(!ids.is_shadowed(2) && ids.same_as(2).is_none());
        // A node that says nothing about itself matches nobody.
        ids.record(0, "");
        ids.record(1, "");
        assert_eq!(ids.shadowed.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn parses_info_server() {
        let raw = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n";
        let i = parse_info(raw);
        assert_eq!(i.run_id, "abc");
        assert_eq!(i.version, "7.0.15");
        assert_eq!(i.uptime, Duration::from_secs(42));
        assert!(!i.cluster_node);
        assert!(parse_info("redis_mode:cluster\r\n").cluster_node);
        assert!(!parse_info("redis_mode:standalone\r\n").cluster_node);
    }

    #[test]
    fn parses_what_restart_and_failover_quarantine_read() {
        // A replica: its master is named, and a master promoted from one is told apart from a
        // master that never was a replica (the failover quarantine reads this).
        let raw = "# Server\r\nredis_version:7.0.15\r\nvalkey_version:8.0.1\r\n\
            # Replication\r\nrole:slave\r\nmaster_host:10.0.0.7\r\nmaster_port:6380\r\n\
            master_replid:5d2e\r\nmaster_replid2:0000000000000000000000000000000000000000\r\n";
        let i = parse_info(raw);
        assert_eq!(i.version, "7.0.15", "the first version line wins");
        assert_eq!(i.role, "slave");
        assert_eq!(i.master_of_replica, "10.0.0.7:6380");
        assert_eq!(i.replid, "5d2e");
        assert!(!i.promoted, "an all-zero master_replid2: never promoted");
        let promoted = parse_info("master_replid2:9f1c00000000000000000000000000000000000a\r\n");
        assert!(promoted.promoted);
        assert_eq!(parse_info("redis_version:7.2.4\r\n").version, "7.2.4");
        assert_eq!(parse_info("valkey_version:8.0.1\r\n").version, "8.0.1");
    }

    #[test]
    fn parses_a_masters_replicas() {
        let raw = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
            slave0:ip=127.0.0.1,port=6380,state=online,offset=42,lag=0\r\n\
            slave1:ip=10.0.0.2,port=6381,state=wait_bgsave,offset=0,lag=1\r\n\
            slave_read_repl_offset:1\r\nmaster_replid:x\r\n";
        let i = parse_info(raw);
        assert_eq!(i.replicas, ["127.0.0.1:6380", "10.0.0.2:6381"]);
        assert_eq!(i.role, "master");
        assert!(
            parse_info("role:slave\r\nslave_priority:100\r\n")
                .replicas
                .is_empty()
        );
    }
}
