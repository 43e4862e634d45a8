//! Who holds a resource on each node (`ironlock status`, Python `inspect`): the lock's token, and
//! the permits of the semaphore of the same name with the limit it is in use with, and the readers
//! and waiting writer of the read-write lock of that name.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::config::validate_resources;
use crate::error::Result;
use crate::scripts;

/// What one node holds for one resource name: the lock key, and the semaphore of that name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// URL with the password redacted.
    pub url: String,
    /// The token stored under the lock key, if any: a plain lock's or a writer's (`None` while
    /// readers hold the key: see `readers`).
    pub token: Option<String>,
    /// The lock key's remaining time to live, if the key exists.
    pub ttl: Option<Duration>,
    /// The unexpired permits of the semaphore of the same name on this node (its own clock),
    /// longest-lived first; empty when there is none.
    pub permits: Vec<Permit>,
    /// The limit the semaphore is in use with on this node, while it has holders (see
    /// [`scripts::limit_key`]).
    pub limit: Option<u32>,
    /// The unexpired readers of the read-write lock of this name on this node, longest-lived
    /// first (the lock key then holds the readers' marker, and expires with the last of them).
    pub readers: Vec<Permit>,
    /// The token of a writer waiting for the read-write lock of this name (it holds back new
    /// readers), if any.
    pub writer_waiting: Option<String>,
    /// The error, if the node could not be asked.
    pub error: Option<String>,
}

/// One permit of a semaphore (or one reader of a read-write lock) on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permit {
    /// The permit's token.
    pub token: String,
    /// Time left until the node drops it.
    pub ttl: Duration,
}

/// Asks every node at once what it holds for `resource`.
pub(crate) async fn inspect(cluster: &Arc<Cluster>, resource: &str) -> Result<Vec<Holder>> {
    validate_resources(&[resource])?;
    let key = cluster.key(resource);
    let sem = scripts::semaphore_key(&key);
    let mut pipe = redis::pipe();
    pipe.get(&key)
        .pttl(&key)
        .cmd("TIME")
        .zrange_withscores(&sem, 0, -1)
        .get(scripts::limit_key(&sem))
        .zrange_withscores(scripts::readers_key(&key), 0, -1)
        .get(scripts::writer_mark_key(&key));
    let pipe = &pipe;
    let asks = cluster.nodes.iter().map(|node| async move {
        let mut holder = Holder {
            url: node.display.to_string(),
            token: None,
            ttl: None,
            permits: Vec::new(),
            limit: None,
            readers: Vec::new(),
            writer_waiting: None,
            error: None,
        };
        type Reply = (
            Option<String>,
            i64,
            (u64, u64),
            Vec<(String, f64)>,
            Option<String>,
            Vec<(String, f64)>,
            Option<String>,
        );
        match node.query_pipe::<Reply>(pipe).await {
            Ok((token, pttl, (secs, micros), permits, limit, readers, writer)) => {
                holder.token = token.filter(|t| t != scripts::READERS_VALUE);
                holder.ttl = (pttl >= 0).then(|| Duration::from_millis(pttl as u64));
                let now_ms = (secs * 1000 + micros / 1000) as f64;
                holder.permits = live(permits, now_ms);
                holder.readers = live(readers, now_ms);
                holder.writer_waiting = writer;
                holder.limit = limit
                    .and_then(|l| l.parse().ok())
                    .filter(|_| !holder.permits.is_empty());
            }
            Err(f) => holder.error = Some(f.text()),
        }
        holder
    });
    Ok(futures_util::future::join_all(asks).await)
}

/// The unexpired members of a sorted set of tokens scored with their expiry (node time, ms),
/// longest-lived first.
fn live(members: Vec<(String, f64)>, now_ms: f64) -> Vec<Permit> {
    let mut live: Vec<Permit> = members
        .into_iter()
        .filter(|(_, expiry)| *expiry > now_ms)
        .map(|(token, expiry)| Permit {
            token,
            ttl: Duration::from_millis((expiry - now_ms) as u64),
        })
        .collect();
    live.sort_by_key(|p| std::cmp::Reverse(p.ttl));
    live
}
