//! Extensions that fall due together go to a node as one script call.
//!
//! A process that holds many locks with auto-extension would otherwise send every node one
//! `EVALSHA` per lock per extension: one request to build, queue, write, parse and answer each,
//! on the client and on the server. Here a lock's extension request is added to the node's open
//! batch instead; the batch is sent once everything runnable has run (the first request of a
//! batch schedules its sending behind the tasks already woken: a tick's worth of extensions,
//! which the auto-extension timers line up), as one [`EXTEND_BATCH`] call per [`CHUNK`] locks.
//! Each lock still gets its own reply, and its round counts it as it counts any other vote.
//!
//! Order on the connection is kept: any other request to the node sends the open batch first
//! ([`Node::query`]), so a release or a rollback never overtakes an extension (a re-seat) that
//! was asked for before it.
//!
//! Cluster voters are not batched: locks' keys lie in different hash slots, and one script call
//! reaches one slot.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::{Failure, Node};
use crate::scripts::{self, EXTEND_BATCH};

/// Locks per script call. A script runs on the server without interruption: a few hundred
/// single-key extensions keep it busy for well under a millisecond.
const CHUNK: usize = 256;

/// A node's open batch of extensions.
#[derive(Default)]
pub(crate) struct Extensions {
    /// Set while `batch` holds requests: every other request checks it, without a lock.
    open: AtomicBool,
    batch: Mutex<Batch>,
}

#[derive(Default)]
struct Batch {
    /// Every lock's keys, one lock after the other.
    keys: Vec<String>,
    /// Per lock: its number of keys, token, ttl_ms, reseat flag.
    args: Vec<String>,
    /// Per lock: its number of keys and where its reply goes.
    waiters: Vec<(usize, oneshot::Sender<Result<i64, Failure>>)>,
}

type Reply = Result<i64, Failure>;

impl Node {
    /// Extends `keys` to `ttl_ms` where every one of them holds `token` (re-seating them where
    /// every one is absent, with `reseat`): 1 extended, 2 re-seated, 0 neither ([`EXTEND`]'s
    /// replies), sent in the node's next batch.
    ///
    /// [`EXTEND`]: crate::scripts::EXTEND
    pub(crate) async fn extend(
        self: &Arc<Self>,
        keys: &[String],
        token: &str,
        ttl_ms: u64,
        reseat: bool,
    ) -> Reply {
        let flag = if reseat { "1" } else { "0" };
        if self.cluster.is_some() {
            let ttl = ttl_ms.to_string();
            let cmd = scripts::evalsha(&scripts::EXTEND, keys, &[token, &ttl, flag]);
            return self.query::<i64>(&cmd).await;
        }
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut b = self
                .extensions
                .batch
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            b.keys.extend(keys.iter().cloned());
            b.args.extend([
                keys.len().to_string(),
                token.to_owned(),
                ttl_ms.to_string(),
                flag.to_owned(),
            ]);
            b.waiters.push((keys.len(), tx));
            let first = b.waiters.len() == 1;
            if first {
                self.extensions.open.store(true, Ordering::Release);
            }
            first
        };
        if first {
            // Sent once the tasks woken with this one (the locks falling due at the same
            // tick) have added theirs: `yield_now` resumes after them.
            let node = Arc::clone(self);
            self.rt.spawn(async move {
                tokio::task::yield_now().await;
                node.send_extensions();
            });
        }
        rx.await.unwrap_or_else(|_| {
            Err(Failure::Error(
                "the extension was not sent: the manager is shutting down".to_owned(),
            ))
        })
    }

    /// Sends the open batch, if any, before whatever the caller sends next: each chunk's request
    /// is handed to the connection here (queued in order), its reply awaited in the background.
    pub(super) fn send_extensions(self: &Arc<Self>) {
        if !self.extensions.open.load(Ordering::Acquire) {
            return;
        }
        let batch = {
            let mut b = self
                .extensions
                .batch
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            self.extensions.open.store(false, Ordering::Release);
            std::mem::take(&mut *b)
        };
        let Batch {
            keys,
            args,
            waiters,
        } = batch;
        let (mut key_at, mut arg_at) = (0, 0);
        let mut waiters = waiters.into_iter().peekable();
        while waiters.peek().is_some() {
            let chunk: Vec<_> = waiters.by_ref().take(CHUNK).collect();
            let nkeys: usize = chunk.iter().map(|(n, _)| n).sum();
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(EXTEND_BATCH.get_hash()).arg(nkeys);
            for k in &keys[key_at..key_at + nkeys] {
                cmd.arg(k.as_str());
            }
            for a in &args[arg_at..arg_at + 4 * chunk.len()] {
                cmd.arg(a.as_str());
            }
            key_at += nkeys;
            arg_at += 4 * chunk.len();
            let txs = chunk.into_iter().map(|(_, tx)| tx).collect();
            self.send_chunk(cmd, txs);
        }
    }

    /// Hands one chunk's request to the connection now (its first poll queues it), then awaits
    /// its reply in the background and answers each lock of the chunk.
    fn send_chunk(self: &Arc<Self>, cmd: redis::Cmd, txs: Vec<oneshot::Sender<Reply>>) {
        let node = Arc::clone(self);
        let mut reply = Box::pin(async move { node.query_now::<Vec<i64>>(&cmd).await });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match reply.as_mut().poll(&mut cx) {
            Poll::Ready(r) => answer(txs, r),
            Poll::Pending => {
                self.rt.spawn(async move { answer(txs, reply.await) });
            }
        }
    }
}

/// Gives each lock of a chunk its reply.
fn answer(txs: Vec<oneshot::Sender<Reply>>, reply: Result<Vec<i64>, Failure>) {
    match reply {
        Ok(v) if v.len() == txs.len() => {
            for (tx, r) in txs.into_iter().zip(v) {
                let _ = tx.send(Ok(r));
            }
        }
        Ok(v) => {
            let why = format!(
                "unexpected reply to a batch of extensions: {} answers for {} locks",
                v.len(),
                txs.len()
            );
            for tx in txs {
                let _ = tx.send(Err(Failure::Error(why.clone())));
            }
        }
        Err(f) => {
            for tx in txs {
                let _ = tx.send(Err(f.clone()));
            }
        }
    }
}
