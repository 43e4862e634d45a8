//! One small tokio runtime per manager, driven by the thread that calls (see [`Runtime`]). Redis
//! connections and background tasks belong to the runtime that created them, so locks keep a
//! handle to their manager's runtime.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use ironlock::{Error, ErrorKind, Result};
use tokio::runtime::{Builder, Handle};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// A runtime whose I/O the calling thread drives while it waits.
///
/// A blocking call (`ironlock_acquire`, `ironlock_release`, …) runs `block_on` on a
/// current-thread runtime: the caller's own thread writes the requests, reads the replies and
/// runs whatever background work is due meanwhile (late replies, rollbacks, release wake-ups,
/// auto-extension), so a call costs no hand-off to a runtime thread and back. Between calls a
/// driver thread takes over, once no call has been running for [`IDLE`]: a program that calls
/// again within that time (a loop of locks) never wakes it, and one that goes quiet keeps its
/// background work running. A call asks the driver to step aside; if it is slow to, the call
/// still progresses (the driver's I/O wakes it), only less cheaply.
pub(crate) struct Runtime {
    rt: Option<Arc<tokio::runtime::Runtime>>,
    shared: Arc<Shared>,
    driver: Option<std::thread::JoinHandle<()>>,
}

/// How long the runtime may go undriven after the last call returned before the driver thread
/// drives it: background work waits at most about this long.
const IDLE: Duration = Duration::from_millis(2);

struct Shared {
    state: Mutex<Drive>,
    changed: Condvar,
    /// Makes the driver's `block_on` return: a caller wants to drive, or the runtime stops.
    step_aside: Notify,
}

#[derive(Default)]
struct Drive {
    /// Calls inside `block_on` now.
    callers: usize,
    stop: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, Drive> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The driver thread: drives the runtime while no call has been running for [`IDLE`].
    fn drive(&self, rt: &tokio::runtime::Runtime) {
        loop {
            let mut st = self.state();
            loop {
                if st.stop {
                    return;
                }
                if st.callers > 0 {
                    st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                let (guard, waited) = self
                    .changed
                    .wait_timeout(st, IDLE)
                    .unwrap_or_else(|p| p.into_inner());
                st = guard;
                if waited.timed_out() && st.callers == 0 && !st.stop {
                    break;
                }
            }
            drop(st);
            rt.block_on(self.step_aside.notified());
        }
    }
}

/// One call inside `block_on`; lets the driver resume when the last one leaves (also when the
/// call panics).
struct Caller<'a>(&'a Shared);

impl<'a> Caller<'a> {
    fn enter(shared: &'a Shared) -> Self {
        shared.state().callers += 1;
        shared.step_aside.notify_one();
        Caller(shared)
    }
}

impl Drop for Caller<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state();
        st.callers -= 1;
        if st.callers == 0 {
            self.0.changed.notify_all();
        }
    }
}

unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

/// At process exit: requests that returned calls stopped waiting for (a release returns once a
/// quorum deleted the keys) get up to a second to reach their nodes, for programs that exit
/// without freeing their handles.
extern "C" fn drain_at_exit() {
    let _ = std::panic::catch_unwind(|| ironlock::drain_blocking(Duration::from_secs(1)));
}

impl Runtime {
    pub(crate) fn new() -> Result<Arc<Runtime>> {
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: `drain_at_exit` is a plain function of this library that never unwinds.
        AT_EXIT.call_once(|| unsafe {
            atexit(drain_at_exit);
        });
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            changed: Condvar::new(),
            step_aside: Notify::new(),
        });
        // Built on the driver thread, which exits with the runtime: the thread-local state the
        // runtime sets up on the thread that builds it goes with that thread, not with the
        // caller's (a C program's main thread never exits before its leak check). Handed over
        // with a mutex and a condition variable: a channel would set up such state here too.
        type Built = Option<std::io::Result<Arc<tokio::runtime::Runtime>>>;
        let handover: Arc<(Mutex<Built>, Condvar)> = Arc::default();
        let driver = {
            let shared = shared.clone();
            let handover = handover.clone();
            std::thread::Builder::new()
                .name("ironlock".into())
                .spawn(move || {
                    let built = Builder::new_current_thread()
                        .max_blocking_threads(2)
                        .thread_name("ironlock")
                        .enable_all()
                        .build()
                        .map(Arc::new);
                    let rt = built.as_ref().ok().cloned();
                    *handover.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(built);
                    handover.1.notify_all();
                    if let Some(rt) = rt {
                        shared.drive(&rt);
                    }
                })
                .map_err(|e| {
                    Error::new(
                        ErrorKind::Internal,
                        format!("cannot start the runtime's thread: {e}"),
                    )
                })?
        };
        let built = {
            let mut slot = handover.0.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(built) = slot.take() {
                    break built;
                }
                slot = handover.1.wait(slot).unwrap_or_else(|p| p.into_inner());
            }
        };
        let rt = match built.map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot start the runtime: {e}"),
            )
        }) {
            Ok(rt) => rt,
            Err(e) => {
                let _ = driver.join();
                return Err(e);
            }
        };
        Ok(Arc::new(Runtime {
            rt: Some(rt),
            shared,
            driver: Some(driver),
        }))
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("the runtime lives until drop")
    }

    /// Fails when called on a runtime thread (from an ironlock callback): blocking there would
    /// deadlock or panic.
    pub(crate) fn check_blocking(&self) -> Result<()> {
        if Handle::try_current().is_ok() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "blocking ironlock calls are not allowed on an ironlock runtime thread \
                 (inside an on_lost callback)",
            ));
        }
        Ok(())
    }

    /// Runs `future` to completion on this runtime, blocking the calling (C) thread, which
    /// drives the runtime meanwhile (see [`Runtime`]).
    pub(crate) fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        self.check_blocking()?;
        let _caller = Caller::enter(&self.shared);
        Ok(self.rt().block_on(future))
    }

    pub(crate) fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt().spawn(future)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let on_runtime_thread = Handle::try_current().is_ok();
        if !on_runtime_thread {
            // Requests that returned calls stopped waiting for (a release returns once a
            // quorum deleted the keys) are already sent; let them finish while the driver
            // still drives.
            ironlock::drain_blocking(Duration::from_secs(1));
        }
        self.shared.state().stop = true;
        self.shared.changed.notify_all();
        self.shared.step_aside.notify_one();
        if let Some(driver) = self.driver.take()
            && driver.thread().id() != std::thread::current().id()
        {
            let _ = driver.join();
        }
        let Some(rt) = self.rt.take() else { return };
        // The driver thread has returned and dropped its clone, unless this runs on it (then
        // the runtime goes when the driver does).
        let Ok(rt) = Arc::try_unwrap(rt) else { return };
        if on_runtime_thread {
            // Last handle dropped on a runtime thread (a callback freed it): cannot join.
            rt.shutdown_background();
        } else {
            // Join the blocking threads so nothing of ours outlives the free call.
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}
