//! `ironlock check`: one single-node manager per node (so each node's figures are its own),
//! showing what the core knows after connecting (`node_status`: version, uptime, restart
//! quarantine) and a measured latency: the median time of `SAMPLES` core `inspect` calls, each
//! one GET + PTTL pipeline round trip to that node.

use std::time::{Duration, Instant};

use ironlock::{Config, LockManager, NodeStatus};
use serde_json::json;

use crate::exit;
use crate::output::{Output, millis, secs};

const SAMPLES: usize = 5;
/// The key the latency probe reads (it never writes).
const PROBE: &str = "ironlock:check:probe";

struct NodeCheck {
    /// The URL with any password redacted.
    url: String,
    status: Option<NodeStatus>,
    latency: Option<Duration>,
    error: Option<String>,
}

/// `settings` builds a configuration for a node list from the command line's options.
pub async fn check(config: Config, settings: impl Fn(Vec<String>) -> Config, out: &Output) -> u8 {
    let nodes = config.nodes().to_vec();
    // The whole list first, so duplicates and bad URLs are reported as `run` would report them.
    match LockManager::new(config).await {
        Ok(m) => m.close(),
        Err(e) => return crate::fail(out, &e, 1),
    }
    let checks = nodes
        .iter()
        .map(|url| check_one(settings(vec![url.clone()])));
    let results: Vec<NodeCheck> = join(checks).await;
    let quorum = ironlock::quorum(results.len());
    let eligible = results
        .iter()
        .filter(|r| r.status.as_ref().is_some_and(|s| s.eligible))
        .count();
    let code = if eligible < quorum {
        exit::UNAVAILABLE
    } else if eligible < results.len() {
        exit::DEGRADED
    } else {
        0
    };
    if out.json() {
        let v = json!({
            "quorum": quorum,
            "eligible": eligible,
            "ok": code != exit::UNAVAILABLE,
            "degraded": code == exit::DEGRADED,
            "nodes": results.iter().map(|r| {
                let s = r.status.as_ref();
                json!({
                    "url": r.url,
                    "connected": s.is_some_and(|s| s.connected),
                    "version": s.map(|s| s.version.clone()),
                    "uptime_s": s.map(|s| s.uptime.as_secs()),
                    "eligible": s.is_some_and(|s| s.eligible),
                    "kind": s.map(|s| s.kind),
                    "master": s.and_then(|s| s.master.clone()),
                    "shards": s.map(|s| s.shards),
                    "replicas": s.map(|s| s.replicas.clone()),
                    "not_counted_because": s.and_then(|s| s.not_counted_because.clone()),
                    "quarantine_remaining_ms": s.map(|s| millis(s.quarantine_remaining)),
                    "latency_ms": r.latency.map(millis),
                    "error": r.error,
                })
            }).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else if out.human() {
        let width = results.iter().map(|r| r.url.len()).max().unwrap_or(0);
        for r in &results {
            let line = match r.status.as_ref().filter(|s| s.connected) {
                Some(s) => {
                    let quorum_state = if s.eligible {
                        "eligible".to_owned()
                    } else {
                        match &s.not_counted_because {
                            Some(why) => format!("NOT COUNTED: {why}"),
                            None => format!(
                                "quarantined for {} more (restarted {} ago)",
                                secs(s.quarantine_remaining),
                                secs(s.uptime)
                            ),
                        }
                    };
                    let mut topology = match (&s.master, s.shards) {
                        (Some(m), _) => format!("{} master {m}  ", s.kind),
                        (None, 0) => String::new(),
                        (None, n) => format!("{} of {n} shards  ", s.kind),
                    };
                    if !s.replicas.is_empty() {
                        topology.push_str(&format!("replicas {}  ", s.replicas.join(",")));
                    }
                    format!(
                        "up  {topology}redis {}  uptime {}  {quorum_state}  latency {}",
                        s.version,
                        human_uptime(s.uptime),
                        r.latency
                            .map(|l| format!("{:.2} ms", millis(l)))
                            .unwrap_or_else(|| "-".to_owned()),
                    )
                }
                None => {
                    format!("DOWN  {}", r.error.as_deref().unwrap_or("not connected"))
                }
            };
            println!("{:width$}  {line}", r.url);
        }
        let n = results.len();
        let verdict = match code {
            0 => "OK".to_owned(),
            exit::DEGRADED => format!(
                "DEGRADED ({} of {n} nodes do not count; {} more may fail before no quorum is left)",
                n - eligible,
                eligible - quorum
            ),
            _ => "NO QUORUM".to_owned(),
        };
        println!("{eligible} of {n} nodes eligible, quorum {quorum}: {verdict}");
    }
    code
}

async fn check_one(config: Config) -> NodeCheck {
    let url = config
        .nodes()
        .first()
        .map(|u| ironlock::redact_url(u))
        .unwrap_or_default();
    let manager = match LockManager::new(config).await {
        Ok(m) => m,
        Err(e) => {
            return NodeCheck {
                url,
                status: None,
                latency: None,
                error: Some(e.message().to_owned()),
            };
        }
    };
    let status = manager.node_status().into_iter().next();
    let mut error = status.as_ref().and_then(|s| s.last_error.clone());
    let mut samples = Vec::with_capacity(SAMPLES);
    if status.as_ref().is_some_and(|s| s.connected) {
        for _ in 0..SAMPLES {
            let t = Instant::now();
            match manager.inspect(PROBE).await {
                Ok(h) => match h.into_iter().next().and_then(|h| h.error) {
                    None => samples.push(t.elapsed()),
                    Some(e) => error = Some(e),
                },
                Err(e) => error = Some(e.message().to_owned()),
            }
        }
    }
    manager.close();
    samples.sort();
    NodeCheck {
        url,
        status,
        latency: samples.get(samples.len() / 2).copied(),
        error,
    }
}

/// Runs the checks at once (every node's connect timeout overlaps).
async fn join<F: std::future::Future<Output = NodeCheck> + Send + 'static>(
    checks: impl Iterator<Item = F>,
) -> Vec<NodeCheck> {
    let handles: Vec<_> = checks.map(tokio::spawn).collect();
    let mut results = Vec::with_capacity(handles.len());
    for h in handles {
        results.push(h.await.unwrap_or_else(|e| NodeCheck {
            url: String::new(),
            status: None,
            latency: None,
            error: Some(format!("internal error: {e}")),
        }));
    }
    results
}

/// "3d 4h", "2h 5m", "42s".
fn human_uptime(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86400, (s % 86400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::human_uptime;
    use std::time::Duration;

    #[test]
    fn uptime_is_short_and_readable() {
        assert_eq!(human_uptime(Duration::from_secs(42)), "42s");
        assert_eq!(human_uptime(Duration::from_secs(125)), "2m 5s");
        assert_eq!(human_uptime(Duration::from_secs(2 * 3600 + 300)), "2h 5m");
        assert_eq!(
            human_uptime(Duration::from_secs(3 * 86400 + 4 * 3600)),
            "3d 4h"
        );
    }
}
