//! Interpreter exit: no runtime thread may take the GIL once it finalizes, and the last
//! requests of a release reach their nodes before the process ends.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pyo3::prelude::*;

/// Set by the `atexit` hook: from then on no runtime thread takes the GIL (a thread that does so
/// while the interpreter finalizes crashes the process); results still undelivered are dropped.
static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Runtime-side calls into Python in progress (the only ones: scheduling a [`Delivery`] drain).
static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub(super) struct InFlight;

impl InFlight {
    /// Counts the caller in, unless the interpreter is exiting.
    pub(super) fn enter() -> Option<InFlight> {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight;
        (!EXITING.load(Ordering::SeqCst)).then_some(guard)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Registered with `atexit`: stops runtime threads from taking the GIL, and waits (GIL released,
/// at most a second) for those that already do, before the interpreter finalizes.
#[pyfunction]
pub(crate) fn drain_at_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while IN_FLIGHT.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        // Requests that returned calls stopped waiting for (a release returns once a quorum
        // deleted the keys) are already sent: let them reach their nodes before the process ends.
        ironlock::drain_blocking(deadline.saturating_duration_since(std::time::Instant::now()));
    });
}

/// Waits (GIL released, at most a second) until the requests that returned calls stopped
/// waiting for (a release returns once a quorum deleted the keys) have reached their nodes. The
/// package runs it when a `multiprocessing` child exits: those children end with `os._exit`,
/// which skips `atexit`.
#[pyfunction]
pub(crate) fn drain_requests(py: Python<'_>) {
    py.detach(|| ironlock::drain_blocking(Duration::from_secs(1)));
}
