//! The watch of a Sentinel voter: while connected, its sentinels are asked again every
//! [`SENTINEL_RECHECK`](topology::SENTINEL_RECHECK). A majority still naming the master renews
//! its lease (its votes count for [`SENTINEL_LEASE`] from the question); a majority naming
//! another node drops the connection, and the reconnection that follows finds the new master
//! and serves its failover quarantine. Sentinel can fail over from a master that still runs (a
//! pause or a partition it took for a death, or a new master it saw as down just after a
//! failover and failed back from); that master answers as a master until the sentinels get
//! round to demoting it, seconds later, and nothing on the connection tells its clients.

use super::*;
use crate::topology::{SENTINEL_RECHECK, SentinelLinks};

impl Node {
    /// Starts the watch on the manager's runtime unless one runs (Sentinel voters only). It
    /// holds the node weakly and stops when the node is closed or dropped.
    pub(super) fn watch_sentinels(self: &Arc<Self>) {
        let Some((spec, _, tls)) = &self.sentinel else {
            return;
        };
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let (spec, tls) = (spec.clone(), tls.clone());
        let weak: Weak<Node> = Arc::downgrade(self);
        self.rt.spawn(async move {
            let mut links = SentinelLinks::new(&spec);
            loop {
                tokio::time::sleep(SENTINEL_RECHECK).await;
                let Some(node) = weak.upgrade() else { return };
                if node.is_closed() {
                    return;
                }
                // Not connected: the reconnection asks the sentinels itself.
                let Some((master, generation)) = node.watched() else {
                    continue;
                };
                let asked = Instant::now();
                let answer = links
                    .majority(&spec, &tls, node.connect_timeout, |e| {
                        node.hide_sentinel_secrets(e)
                    })
                    .await;
                node.confirm(&master, generation, asked, answer);
            }
        });
    }

    /// The master of the current connection and the connection's generation.
    fn watched(&self) -> Option<(String, u64)> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.conn.as_ref()?;
        Some((st.master.clone()?, st.generation))
    }

    /// Takes the sentinels' answer to the question asked at `asked` about the connection
    /// `generation` to `master`.
    fn confirm(
        self: &Arc<Self>,
        master: &str,
        generation: u64,
        asked: Instant,
        answer: Result<(String, u16), String>,
    ) {
        let named = match answer {
            Ok((host, port)) => format!("{host}:{port}"),
            Err(why) => {
                let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                if st.generation == generation {
                    st.unconfirmed = Some(why);
                }
                return;
            }
        };
        if named == master {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.generation == generation {
                st.confirmed_at = Some(st.confirmed_at.map_or(asked, |c| c.max(asked)));
                st.unconfirmed = None;
            }
            return;
        }
        self.drop_connection(
            generation,
            &format!(
                "a majority of its sentinels name {named} as the master now, not {master} (a failover): connecting to the new master"
            ),
        );
    }
}
