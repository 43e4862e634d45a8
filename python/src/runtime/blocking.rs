//! Blocking waits: a Python thread waits on the runtime with the GIL released, in slices, so
//! Ctrl-C stays responsive.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Handle;

use super::{SLICE, guarded, handle, lock_ignoring_poison, runtime};
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
/// The calling thread drives the runtime while it waits (`ironlock::driven`): it sends the
/// requests and reads the replies itself, with no hand-off to a runtime thread and back.
pub(crate) fn block_on<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = ironlock::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    if Handle::try_current().is_ok() {
        // Python code running on a runtime thread (a finalizer run by a collection there):
        // blocking it would stall the runtime, so hand the future to the runtime instead.
        return block_on_spawned(py, fut);
    }
    let rt = runtime();
    let waited = py.detach(move || {
        let mut fut = std::pin::pin!(guarded(fut));
        loop {
            // (The timer is made inside: it belongs to the runtime.)
            let out = rt.block_on(async { tokio::time::timeout(SLICE, fut.as_mut()).await });
            if let Ok(out) = out {
                return Ok(out);
            }
            // On error `fut` is dropped here, outside the runtime: the core spawns what a
            // cancelled acquire must undo through its manager's runtime handle.
            Python::attach(|py| py.check_signals())?;
        }
    });
    match waited {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(error::to_pyerr(py, e)),
        Err(e) => Err(e),
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
