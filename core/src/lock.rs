//! A held lock: its resources, token, validity deadline and fence. No I/O happens when it is
//! dropped: release is explicit (bindings' context managers are sugar over it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{Error, ErrorKind, Report, Result};
use crate::manager::Shared;

pub(crate) struct LockState {
    pub(crate) ttl: Duration,
    pub(crate) deadline: Instant,
    pub(crate) extensions: u32,
    pub(crate) released: bool,
    pub(crate) report: Report,
}

pub(crate) struct LockInner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) resources: Vec<String>,
    pub(crate) keys: Vec<String>,
    pub(crate) token: String,
    pub(crate) fence: Option<u64>,
    pub(crate) state: Mutex<LockState>,
    pub(crate) lost: AtomicBool,
    pub(crate) lost_tx: watch::Sender<bool>,
}

/// A lock granted by a quorum. Cheap to clone; clones share state (an extension through one is
/// seen by all). Dropping it does not release it: call [`Lock::release`].
#[derive(Clone)]
pub struct Lock {
    pub(crate) inner: Arc<LockInner>,
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// True when a quorum of nodes still held the keys with our token and deleted them: the
    /// lock had not been lost before the release.
    pub held: bool,
    /// Nodes that had answered "deleted" when the release returned. A release returns as soon
    /// as a quorum deleted the keys (the lock is gone then: no quorum can see it), so this is at
    /// least the quorum when `held`; the deletes still in flight finish in the background
    /// (bounded by `node_timeout`), and their nodes show as `pending` in the report.
    pub deleted_on: usize,
    /// The per-node report.
    pub report: Report,
}

impl Lock {
    /// The resource names, as given.
    pub fn resources(&self) -> &[String] {
        &self.inner.resources
    }

    /// The Redis keys (resource names with the key prefix).
    pub fn keys(&self) -> &[String] {
        &self.inner.keys
    }

    /// The random token (40 lowercase hex chars) stored as the value of every key.
    pub fn token(&self) -> &str {
        &self.inner.token
    }

    /// The fencing token, when the lock was acquired with fencing.
    pub fn fence(&self) -> Option<u64> {
        self.inner.fence
    }

    /// The ttl of the last acquire or extend.
    pub fn ttl(&self) -> Duration {
        self.state().ttl
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, LockState> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The monotonic instant until which the lock is valid (ttl − elapsed − drift after the grant
    /// or the last extension).
    pub fn deadline(&self) -> Instant {
        self.state().deadline
    }

    /// Remaining validity from the monotonic clock; zero once lost, released or expired.
    pub fn validity(&self) -> Duration {
        if self.is_lost() || self.state().released {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// The validity deadline as wall-clock milliseconds since the Unix epoch (for display and for
    /// APIs that speak in epoch time; the lock itself never trusts the wall clock).
    pub fn expiration_unix_ms(&self) -> u64 {
        let at = SystemTime::now() + self.validity();
        at.duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    /// True while the lock is neither lost nor released and its validity has not run out.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// True once the lock is known lost (an extension failed for lack of our token, or its
    /// validity ran out while auto-extension was watching).
    pub fn is_lost(&self) -> bool {
        self.inner.lost.load(Ordering::Acquire)
    }

    /// True once [`release`](Self::release) ran.
    pub fn is_released(&self) -> bool {
        self.state().released
    }

    /// How many times the lock was extended.
    pub fn extensions(&self) -> u32 {
        self.state().extensions
    }

    /// The per-node report of the last operation on this lock.
    pub fn report(&self) -> Report {
        self.state().report.clone()
    }

    pub(crate) fn mark_lost(&self) {
        if !self.inner.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(resources = ?self.inner.resources, "lock lost");
            self.inner.lost_tx.send_replace(true);
        }
    }

    /// Resolves when the lock is lost or its validity deadline passes without an extension.
    /// Resolves at once for a released lock. Cancel-safe.
    pub async fn lost(&self) {
        let mut rx = self.inner.lost_tx.subscribe();
        loop {
            if self.is_lost() || self.is_released() {
                return;
            }
            let deadline = self.deadline();
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep_until(deadline.into()) => {
                    if Instant::now() >= self.deadline() && !self.is_released() {
                        self.mark_lost();
                        return;
                    }
                }
            }
        }
    }

    /// Extends every key to `ttl` from now, on a quorum (SPEC §2, Extend).
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        crate::manager::extend(self, ttl).await
    }

    /// Deletes the keys that still hold this lock's token, on every node (the request goes to
    /// all of them at once; it returns once a quorum deleted them, or every node answered, or
    /// `node_timeout` passed). Never fails because the lock had expired or been taken over:
    /// that is reported as `held == false`.
    pub async fn release(&self) -> Released {
        crate::manager::release(self).await
    }

    /// Keeps the lock extended in the background until the returned handle is stopped or
    /// dropped, the lock is released, or it is lost (then [`lost`](Self::lost) resolves at once).
    /// Must be called inside a tokio runtime.
    pub fn keep_alive(&self) -> KeepAlive {
        let lock = self.clone();
        KeepAlive {
            task: Some(tokio::spawn(async move {
                crate::manager::keep_alive(lock).await
            })),
        }
    }

    pub(crate) fn lost_error(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::Lost,
            format!("lock on {:?} lost: {why}", self.inner.resources),
        )
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("resources", &self.inner.resources)
            .field("token", &self.inner.token)
            .field("fence", &self.inner.fence)
            .field("validity", &self.validity())
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// The background auto-extension of one lock; stops when dropped.
pub struct KeepAlive {
    task: Option<JoinHandle<()>>,
}

impl KeepAlive {
    /// Stops extending (the lock stays held until it expires or is released).
    pub fn stop(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
