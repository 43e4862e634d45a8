//! Requests that rounds stopped waiting for (the last deletes of a release that returned at a
//! quorum, the late replies of a decided acquire), counted per manager and per process. A wait
//! for them sleeps until the count reaches zero: no polling.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// A count of in-flight requests with waits that wake when it reaches zero.
pub(crate) struct InFlight {
    count: Mutex<Count>,
    idle: Condvar,
    idle_async: Notify,
}

/// The requests in flight, and the threads blocked in [`InFlight::wait_blocking`] (the condvar
/// is notified only when there is one: a notification is a system call, and the count drops to
/// zero after nearly every release at N ≥ 3).
struct Count {
    requests: usize,
    blocked: usize,
}

/// Every manager's requests in this process (what a binding waits for at exit).
static PROCESS: InFlight = InFlight::new();

impl InFlight {
    pub(crate) const fn new() -> Self {
        InFlight {
            count: Mutex::new(Count {
                requests: 0,
                blocked: 0,
            }),
            idle: Condvar::new(),
            idle_async: Notify::const_new(),
        }
    }

    fn count(&self) -> std::sync::MutexGuard<'_, Count> {
        self.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self) {
        self.count().requests += 1;
    }

    fn done(&self) {
        let mut c = self.count();
        c.requests = c.requests.saturating_sub(1);
        if c.requests == 0 {
            if c.blocked > 0 {
                self.idle.notify_all();
            }
            self.idle_async.notify_waiters();
        }
    }

    /// Blocks the calling thread until the count is zero or `limit` passed; true when zero.
    fn wait_blocking(&self, limit: Duration) -> bool {
        let until = Instant::now().checked_add(limit);
        let mut c = self.count();
        while c.requests > 0 {
            let left = match until {
                Some(u) => match u.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return false,
                },
                None => Duration::from_secs(3600),
            };
            c.blocked += 1;
            c = self
                .idle
                .wait_timeout(c, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            c.blocked -= 1;
        }
        true
    }

    /// Waits until the count is zero or `limit` passed; true when zero.
    pub(crate) async fn wait(&self, limit: Duration) -> bool {
        let timer = tokio::time::sleep(limit);
        tokio::pin!(timer);
        loop {
            let idle = self.idle_async.notified();
            tokio::pin!(idle);
            // Registered before the check, so a decrement to zero in between is not missed.
            idle.as_mut().enable();
            if self.count().requests == 0 {
                return true;
            }
            tokio::select! {
                _ = idle => {}
                _ = &mut timer => return self.count().requests == 0,
            }
        }
    }
}

/// One in-flight request, counted on its manager and on the process until dropped.
pub(crate) struct Draining(Arc<InFlight>);

impl Draining {
    pub(crate) fn new(manager: &Arc<InFlight>) -> Self {
        manager.add();
        PROCESS.add();
        Draining(manager.clone())
    }
}

impl Drop for Draining {
    fn drop(&mut self) {
        self.0.done();
        PROCESS.done();
    }
}

/// Blocks the calling thread until every request that a round of any manager in this process
/// stopped waiting for has been answered or has timed out, or until `limit` passes; true when
/// none is left. Acquire and release return as soon as their outcome is decided (a release once
/// a quorum deleted the keys), and the other requests finish on the runtime in the background:
/// a binding calls this before its runtime stops or its process exits, so that the last deletes
/// reach every node. Call it from a thread that is not a runtime worker (the runtime's threads
/// do the work); it sleeps until woken, it does not poll. In async code use [`drain`].
pub fn drain_blocking(limit: Duration) -> bool {
    PROCESS.wait_blocking(limit)
}

/// The async form of [`drain_blocking`]: resolves once no request of any manager in this process
/// is in flight (true), or after `limit` (false). For one manager use
/// [`LockManager::flush`](crate::LockManager::flush).
pub async fn drain(limit: Duration) -> bool {
    PROCESS.wait(limit).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_wake_when_the_last_request_ends() {
        let manager = Arc::new(InFlight::new());
        let a = Draining::new(&manager);
        let b = Draining::new(&manager);
        assert!(!manager.wait(Duration::from_millis(5)).await);
        let blocking = {
            let manager = manager.clone();
            std::thread::spawn(move || manager.wait_blocking(Duration::from_secs(10)))
        };
        let waiter = {
            let manager = manager.clone();
            tokio::spawn(async move { manager.wait(Duration::from_secs(10)).await })
        };
        drop(a);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!waiter.is_finished());
        let t = Instant::now();
        drop(b);
        assert!(waiter.await.unwrap());
        assert!(blocking.join().unwrap());
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(manager.wait_blocking(Duration::ZERO));
    }
}
