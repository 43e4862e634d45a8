//! Release notification (SPEC §3.2): the release script publishes on a per-key channel; a waiter
//! subscribes on every node and retries as soon as any node announces a release, instead of
//! sleeping a full retry delay. The random delay stays as the fallback (expiry sends nothing).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::node::Node;

/// One waiter: woken once releases were announced by a quorum of distinct nodes (a release
/// runs on every node at once; waking at the first announcement would retry while the other
/// nodes still hold the key).
pub(crate) struct Waiter {
    id: u64,
    quorum: u32,
    /// Bit i set: node i announced a release since the last reset.
    seen: AtomicU64,
    pub(crate) notify: Notify,
}

impl Waiter {
    fn announce(&self, node: usize) {
        let bit = 1u64 << node;
        let before = self.seen.fetch_or(bit, Ordering::AcqRel);
        if before & bit == 0 && (before | bit).count_ones() == self.quorum {
            self.notify.notify_one();
        }
    }

    /// Forgets announcements seen so far (called before each round).
    pub(crate) fn reset(&self) {
        self.seen.store(0, Ordering::Release);
    }
}

#[derive(Default)]
struct Channels {
    /// channel -> its waiters
    waiters: HashMap<String, Vec<Arc<Waiter>>>,
    next_id: u64,
}

/// One pub/sub connection per node, shared by every waiter of the manager.
pub(crate) struct Notifier {
    nodes: Vec<Arc<Node>>,
    channels: Arc<Mutex<Channels>>,
    sinks: Vec<tokio::sync::Mutex<Option<PubSubSink>>>,
    tasks: Mutex<Vec<AbortHandle>>,
    pub(crate) wakeups: AtomicU64,
}

/// A waiter's registration; unsubscribes when dropped.
pub(crate) struct Watch {
    notifier: Arc<Notifier>,
    channels: Vec<String>,
    pub(crate) waiter: Arc<Waiter>,
}

impl Notifier {
    pub(crate) fn new(nodes: Vec<Arc<Node>>) -> Arc<Self> {
        let sinks = nodes
            .iter()
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        Arc::new(Notifier {
            nodes,
            channels: Arc::default(),
            sinks,
            tasks: Mutex::default(),
            wakeups: AtomicU64::new(0),
        })
    }

    /// Registers interest in releases of `channels` and subscribes on every node in the
    /// background (the caller does not wait for the subscriptions).
    pub(crate) fn watch(self: &Arc<Self>, channels: Vec<String>) -> Watch {
        let mut fresh = Vec::new();
        let waiter = {
            let mut ch = self.channels.lock().unwrap_or_else(|p| p.into_inner());
            ch.next_id += 1;
            let waiter = Arc::new(Waiter {
                id: ch.next_id,
                quorum: crate::quorum::quorum(self.nodes.len()) as u32,
                seen: AtomicU64::new(0),
                notify: Notify::new(),
            });
            for c in &channels {
                let list = ch.waiters.entry(c.clone()).or_default();
                if list.is_empty() {
                    fresh.push(c.clone());
                }
                list.push(waiter.clone());
            }
            waiter
        };
        if !fresh.is_empty() {
            let this = self.clone();
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                let task = h.spawn(async move { this.subscribe_all(fresh).await });
                self.track(task.abort_handle());
            }
        }
        Watch {
            notifier: self.clone(),
            channels,
            waiter,
        }
    }

    fn track(&self, handle: AbortHandle) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    async fn subscribe_all(self: Arc<Self>, channels: Vec<String>) {
        let subs = (0..self.nodes.len()).map(|i| {
            let this = self.clone();
            let channels = channels.clone();
            async move {
                if let Some(mut sink) = this.sink(i).await {
                    if sink.subscribe(&channels).await.is_err() {
                        *this.sinks[i].lock().await = None;
                    }
                }
            }
        });
        futures_util::future::join_all(subs).await;
    }

    /// The node's pub/sub sink, connecting (and re-subscribing what is watched) when needed.
    async fn sink(self: &Arc<Self>, i: usize) -> Option<PubSubSink> {
        let mut slot = self.sinks[i].lock().await;
        if let Some(s) = slot.as_ref() {
            return Some(s.clone());
        }
        let node = &self.nodes[i];
        let pubsub = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            node.client().get_async_pubsub(),
        )
        .await
        .ok()?
        .ok()?;
        let (mut sink, mut stream) = pubsub.split();
        let watched: Vec<String> = {
            let ch = self.channels.lock().unwrap_or_else(|p| p.into_inner());
            ch.waiters.keys().cloned().collect()
        };
        if !watched.is_empty() {
            sink.subscribe(&watched).await.ok()?;
        }
        let channels = self.channels.clone();
        let task = tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let name = msg.get_channel_name();
                let ch = channels.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(list) = ch.waiters.get(name) {
                    for w in list {
                        w.announce(i);
                    }
                }
            }
        });
        self.track(task.abort_handle());
        *slot = Some(sink.clone());
        Some(sink)
    }

    /// Stops the pub/sub readers (no I/O; the connections close when dropped).
    pub(crate) fn shutdown(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

impl Watch {
    /// Counts a wake-up that ended a wait early.
    pub(crate) fn record_wakeup(&self) {
        self.notifier.wakeups.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut gone = Vec::new();
        {
            let mut ch = self
                .notifier
                .channels
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for c in &self.channels {
                if let Some(list) = ch.waiters.get_mut(c) {
                    list.retain(|w| w.id != self.waiter.id);
                    if list.is_empty() {
                        ch.waiters.remove(c);
                        gone.push(c.clone());
                    }
                }
            }
        }
        if gone.is_empty() {
            return;
        }
        // Unsubscribing is a message to Redis: hand it to the runtime rather than doing I/O here.
        let notifier = self.notifier.clone();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                for slot in &notifier.sinks {
                    let sink = slot.lock().await.clone();
                    if let Some(mut s) = sink {
                        let _ = s.unsubscribe(&gone).await;
                    }
                }
            });
        }
    }
}
