//! Extensions that fall due together go to a node as one script call.
//!
//! A process that holds many locks with auto-extension would otherwise send every node one
//! `EVALSHA` per lock per extension: one request to build, queue, write, parse and answer each,
//! on the client and on the server. Here a lock's extension request is added to the node's open
//! batch instead; the batch is sent once everything runnable has run (the first request of a
//! batch schedules its sending behind the tasks already woken: the locks whose auto-extension
//! timers fell due at the same tick), as one [`EXTEND_BATCH`] call per [`CHUNK`] locks, a full
//! chunk at once.
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
use crate::scripts::{self, EXTEND_BATCH, EXTEND_SAME};

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

/// One lock's extension in a batch: its keys and token (shared with the lock, not copied), ttl
/// and re-seat flag, and where its reply goes.
struct Entry {
    keys: Arc<[String]>,
    token: Arc<str>,
    ttl_ms: u64,
    reseat: bool,
    reply: oneshot::Sender<Reply>,
}

#[derive(Default)]
struct Batch {
    entries: Vec<Entry>,
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
        keys: &Arc<[String]>,
        token: &Arc<str>,
        ttl_ms: u64,
        reseat: bool,
    ) -> Reply {
        if self.cluster.is_some() {
            let (ttl, flag) = (ttl_ms.to_string(), if reseat { "1" } else { "0" });
            let cmd = scripts::evalsha(&scripts::EXTEND, keys, &[token, &ttl, flag]);
            return self.query::<i64>(&cmd).await;
        }
        let (tx, rx) = oneshot::channel();
        let (first, full) = {
            let mut b = self
                .extensions
                .batch
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            b.entries.push(Entry {
                keys: Arc::clone(keys),
                token: Arc::clone(token),
                ttl_ms,
                reseat,
                reply: tx,
            });
            let first = b.entries.len() == 1;
            if first {
                self.extensions.open.store(true, Ordering::Release);
            }
            (first, b.entries.len() >= CHUNK)
        };
        if full {
            // A full chunk goes out now: the server starts on it while the rest of the locks
            // falling due together are still being added.
            self.send_extensions();
        } else if first {
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
        let mut entries = {
            let mut b = self
                .extensions
                .batch
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            self.extensions.open.store(false, Ordering::Release);
            std::mem::take(&mut b.entries)
        };
        while !entries.is_empty() {
            let rest = entries.split_off(entries.len().min(CHUNK));
            let chunk = std::mem::replace(&mut entries, rest);
            let cmd = batch_cmd(
                chunk
                    .iter()
                    .map(|e| (&e.keys, &e.token, e.ttl_ms, e.reseat)),
            );
            let txs: Vec<_> = chunk.into_iter().map(|e| e.reply).collect();
            match self.queue_chunk(cmd) {
                Ok(r) => answer(txs, r),
                Err(reply) => {
                    self.rt.spawn(async move { answer(txs, reply.await) });
                }
            }
        }
    }

    /// Extends each lock of `locks` (keys, token, ttl in ms; no re-seat) on this node, in
    /// script calls of [`CHUNK`] locks handed to the connection before this returns (behind the
    /// node's open batch, which goes first): one reply per lock, in order, once awaited.
    pub(crate) fn extend_all(
        self: &Arc<Self>,
        locks: &[Extension<'_>],
    ) -> impl Future<Output = Vec<Reply>> + Send + 'static {
        self.send_extensions();
        let calls: Vec<_> = locks
            .chunks(CHUNK)
            .map(|chunk| {
                let cmd = same_cmd(chunk).unwrap_or_else(|| {
                    batch_cmd(chunk.iter().map(|&(k, t, ttl)| (k, t, ttl, false)))
                });
                (chunk.len(), self.queue_chunk(cmd))
            })
            .collect();
        async move {
            let mut out = Vec::new();
            for (n, call) in calls {
                let reply = match call {
                    Ok(r) => r,
                    Err(pending) => pending.await,
                };
                match reply {
                    Ok(v) if v.len() == n => out.extend(v.into_iter().map(Ok)),
                    Ok(v) => {
                        let why = unexpected(v.len(), n);
                        out.extend((0..n).map(|_| Err(Failure::Error(why.clone()))));
                    }
                    Err(f) => out.extend((0..n).map(|_| Err(f.clone()))),
                }
            }
            out
        }
    }

    /// Hands one chunk's request to the connection now (its first poll queues it): its reply
    /// if that came at once, else the future that awaits it.
    fn queue_chunk(self: &Arc<Self>, cmd: redis::Cmd) -> Result<Chunk, PendingChunk> {
        let node = Arc::clone(self);
        let mut reply: PendingChunk =
            Box::pin(async move { node.query_now::<Vec<i64>>(&cmd).await });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match reply.as_mut().poll(&mut cx) {
            Poll::Ready(r) => Ok(r),
            Poll::Pending => Err(reply),
        }
    }
}

/// One lock's extension for [`Node::extend_all`]: its keys, token and ttl in ms.
pub(crate) type Extension<'a> = (&'a Arc<[String]>, &'a Arc<str>, u64);

type Chunk = Result<Vec<i64>, Failure>;
type PendingChunk = std::pin::Pin<Box<dyn Future<Output = Chunk> + Send>>;

/// One [`EXTEND_BATCH`] call: every lock's keys, then per lock its key count, token, ttl and
/// re-seat flag.
fn batch_cmd<'a>(
    locks: impl Iterator<Item = (&'a Arc<[String]>, &'a Arc<str>, u64, bool)> + Clone,
) -> redis::Cmd {
    let (nkeys, bytes, count) = locks
        .clone()
        .fold((0, 0, 0), |(n, b, c), (keys, token, ..)| {
            let key_bytes: usize = keys.iter().map(|k| k.len()).sum();
            (n + keys.len(), b + key_bytes + token.len() + 24, c + 1)
        });
    let mut cmd = redis::Cmd::with_capacity(3 + nkeys + 4 * count, bytes + 64);
    cmd.arg("EVALSHA").arg(EXTEND_BATCH.get_hash()).arg(nkeys);
    for (keys, ..) in locks.clone() {
        for k in keys.iter() {
            cmd.arg(k.as_str());
        }
    }
    for (keys, token, ttl_ms, reseat) in locks {
        cmd.arg(keys.len())
            .arg(&**token)
            .arg(ttl_ms)
            .arg(if reseat { "1" } else { "0" });
    }
    cmd
}

/// One [`EXTEND_SAME`] call for `locks` when each has one key and all have the same ttl (the
/// usual case: the server then reads two arguments per lock instead of five).
fn same_cmd(locks: &[Extension<'_>]) -> Option<redis::Cmd> {
    let ttl = locks.first()?.2;
    if !locks
        .iter()
        .all(|(keys, _, t)| keys.len() == 1 && *t == ttl)
    {
        return None;
    }
    // Sized once: a call carries hundreds of arguments, which would otherwise grow (and copy)
    // the command's buffers a dozen times.
    let bytes: usize = locks
        .iter()
        .map(|(keys, token, _)| keys[0].len() + token.len())
        .sum();
    let mut cmd = redis::Cmd::with_capacity(4 + 2 * locks.len(), bytes + 96);
    cmd.arg("EVALSHA")
        .arg(EXTEND_SAME.get_hash())
        .arg(locks.len());
    for (keys, ..) in locks {
        cmd.arg(keys[0].as_str());
    }
    cmd.arg(ttl);
    for (_, token, _) in locks {
        cmd.arg(&***token);
    }
    Some(cmd)
}

fn unexpected(got: usize, locks: usize) -> String {
    format!("unexpected reply to a batch of extensions: {got} answers for {locks} locks")
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
            let why = unexpected(v.len(), txs.len());
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
