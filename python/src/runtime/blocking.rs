//! Blocking waits: a Python thread waits on the runtime with the GIL released, in slices, so
//! Ctrl-C stays responsive.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Handle;

use super::{SLICE, guarded, handle, lock_ignoring_poison};
use crate::error;

struct Slot<T> {
    value: Option<ironlock::Result<T>>,
    abandoned: bool,
}

/// Runs `fut` and waits for it with the GIL released, looking for signals every [`SLICE`]. On
/// `KeyboardInterrupt` (or any exception a signal handler raises) `fut` is dropped and the
/// exception returned; the core's futures are cancel-safe, and the types this crate returns
/// release what they hold when dropped undelivered (see `lock::Grant`).
///
/// The future is polled on the calling thread (the runtime's workers only drive the sockets and
/// timers), which saves the hand-offs to and from a worker that a spawned task costs.
pub(crate) fn block_on<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = ironlock::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    if Handle::try_current().is_ok() {
        // Python code running on a runtime thread (a finalizer run by a collection there):
        // `Handle::block_on` would panic, so hand the future to a worker instead.
        return block_on_spawned(py, fut);
    }
    let rt = handle();
    let waited = py.detach(move || {
        let _entered = rt.enter();
        let mut fut = std::pin::pin!(guarded(fut));
        let waker = std::task::Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut slice_end = std::time::Instant::now() + SLICE;
        loop {
            if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return Ok(out);
            }
            let now = std::time::Instant::now();
            if now >= slice_end {
                // On error `fut` is dropped inside the runtime (still entered): a cancelled
                // acquire releases in a runtime task.
                Python::attach(|py| py.check_signals())?;
                slice_end = now + SLICE;
            }
            // Woken by the future's waker (or spuriously: polling again is harmless).
            std::thread::park_timeout(slice_end.saturating_duration_since(now));
        }
    });
    match waited {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(error::to_pyerr(py, e)),
        Err(e) => Err(e),
    }
}

/// Wakes the thread blocked in [`block_on`].
struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// [`block_on`] for a thread inside the runtime: runs `fut` as a task and waits on a condition
/// variable. A result that arrives after an interrupt is dropped (released, see `lock::Grant`).
fn block_on_spawned<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = ironlock::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let shared = Arc::new((
        Mutex::new(Slot {
            value: None,
            abandoned: false,
        }),
        Condvar::new(),
    ));
    let tx = shared.clone();
    let task = handle().spawn(async move {
        let out = guarded(fut).await;
        let (m, cv) = &*tx;
        let mut slot = lock_ignoring_poison(m);
        if slot.abandoned {
            drop(slot);
            drop(out);
            return;
        }
        slot.value = Some(out);
        cv.notify_all();
    });
    let waited = py.detach(move || {
        let (m, cv) = &*shared;
        loop {
            let mut slot = lock_ignoring_poison(m);
            if let Some(v) = slot.value.take() {
                return Ok(v);
            }
            let (mut slot, _) = cv
                .wait_timeout(slot, SLICE)
                .unwrap_or_else(|p| p.into_inner());
            if let Some(v) = slot.value.take() {
                return Ok(v);
            }
            drop(slot);
            if let Err(e) = Python::attach(|py| py.check_signals()) {
                let mut slot = lock_ignoring_poison(m);
                slot.abandoned = true;
                let late = slot.value.take();
                drop(slot);
                task.abort();
                drop(late);
                return Err(e);
            }
        }
    });
    match waited {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(error::to_pyerr(py, e)),
        Err(e) => Err(e),
    }
}

/// Waits on a condition with the GIL released, in slices, so Ctrl-C stays responsive.
/// `ready` is called with the GIL released; returns whether it became true before `timeout`.
pub(crate) fn wait_interruptible(
    py: Python<'_>,
    timeout: Option<Duration>,
    mut ready: impl FnMut(Duration) -> bool + Send,
) -> PyResult<bool> {
    let start = std::time::Instant::now();
    py.detach(move || {
        loop {
            let slice = match timeout {
                Some(t) => {
                    let left = t.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return Ok(ready(Duration::ZERO));
                    }
                    left.min(SLICE)
                }
                None => SLICE,
            };
            if ready(slice) {
                return Ok(true);
            }
            Python::attach(|py| py.check_signals())?;
        }
    })
}
