//! Who holds a resource on each node (`ironlock status`, Python `inspect`): the lock's token, and
//! the permits of the semaphore of the same name with the limit it is in use with.

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
    /// The token stored under the lock key, if any.
    pub token: Option<String>,
    /// The lock key's remaining time to live, if the key exists.
    pub ttl: Option<Duration>,
    /// The unexpired permits of the semaphore of the same name on this node (its own clock),
    /// longest-lived first; empty when there is none.
    pub permits: Vec<Permit>,
    /// The limit the semaphore is in use with on this node, while it has holders (see
    /// [`scripts::limit_key`]).
    pub limit: Option<u32>,
    /// The error, if the node could not be asked.
    pub error: Option<String>,
}

/// One permit of a semaphore on one node.
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
        .get(scripts::limit_key(&sem));
    let pipe = &pipe;
    let asks = cluster.nodes.iter().map(|node| async move {
        let mut holder = Holder {
            url: node.display.to_string(),
            token: None,
            ttl: None,
            permits: Vec::new(),
            limit: None,
            error: None,
        };
        type Reply = (
            Option<String>,
            i64,
            (u64, u64),
            Vec<(String, f64)>,
            Option<String>,
        );
        match node.query_pipe::<Reply>(pipe).await {
            Ok((token, pttl, (secs, micros), permits, limit)) => {
                holder.token = token;
                holder.ttl = (pttl >= 0).then(|| Duration::from_millis(pttl as u64));
                let now_ms = (secs * 1000 + micros / 1000) as f64;
                holder.permits = permits
                    .into_iter()
                    .filter(|(_, expiry)| *expiry > now_ms)
                    .map(|(token, expiry)| Permit {
                        token,
                        ttl: Duration::from_millis((expiry - now_ms) as u64),
                    })
                    .collect();
                holder.permits.sort_by_key(|p| std::cmp::Reverse(p.ttl));
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
