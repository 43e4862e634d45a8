//! A runtime for bindings whose callers block: the calling thread drives it while it waits.
//!
//! A blocking call (`ironlock_acquire` in C, `LockManager.acquire` in Python) runs
//! [`DrivenRuntime::block_on`] on a current-thread tokio runtime: the caller's own thread writes
//! the requests, reads the replies and runs whatever background work is due meanwhile (late
//! replies, rollbacks, release wake-ups, auto-extension), so a call costs no hand-off to a
//! runtime thread and back. Between calls a driver thread takes over, once no call has been
//! running for [`IDLE`]: a program that calls again within that time (a loop of locks) never
//! wakes it, and one that goes quiet keeps its background work running. A call asks the
//! driver to step aside; if it is slow to, the call still progresses (the driver's I/O wakes
//! it), only less cheaply.
//!
//! SIGPIPE: a write to a connection that a node closed raises it, and its default action ends
//! the process. Rust programs, Python and Node ignore it; a C program usually does not, and the
//! sockets are written with `writev(2)`, which has no `MSG_NOSIGNAL`. So the runtime's own
//! threads block it for good ([`block_sigpipe`]), and a caller's thread blocks it while it
//! drives the runtime: a SIGPIPE raised meanwhile is taken off the thread before its signal
//! mask is restored. The write itself fails with `EPIPE`, which the connection reports as any
//! other lost connection.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::runtime::{Builder, Handle, Runtime};
use tokio::sync::Notify;

use crate::error::{Error, ErrorKind, Result};

/// How long the runtime may go undriven after the last call returned before the driver thread
/// drives it: background work waits at most about this long.
pub const IDLE: Duration = Duration::from_millis(2);

/// A current-thread runtime driven by its callers while they block, and by a thread of its own
/// in between (see the module).
pub struct DrivenRuntime {
    rt: Option<Arc<Runtime>>,
    shared: Arc<Shared>,
    driver: Option<std::thread::JoinHandle<()>>,
}

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
    fn drive(&self, rt: &Runtime) {
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

impl DrivenRuntime {
    /// Starts the runtime and its driver thread (named `thread_name`, as are the runtime's
    /// blocking threads, at most `blocking_threads` of them).
    pub fn new(thread_name: &str, blocking_threads: usize) -> Result<DrivenRuntime> {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            changed: Condvar::new(),
            step_aside: Notify::new(),
        });
        // Built on the driver thread, which exits with the runtime: the thread-local state the
        // runtime sets up on the thread that builds it goes with that thread, not with the
        // caller's (a C program's main thread never exits before its leak check). Handed over
        // with a mutex and a condition variable: a channel would set up such state here too.
        type Built = Option<std::io::Result<Arc<Runtime>>>;
        let handover: Arc<(Mutex<Built>, Condvar)> = Arc::default();
        let driver = {
            let shared = shared.clone();
            let handover = handover.clone();
            let name = thread_name.to_owned();
            std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    block_sigpipe();
                    let built = Builder::new_current_thread()
                        .max_blocking_threads(blocking_threads.max(1))
                        .on_thread_start(block_sigpipe)
                        .thread_name(name)
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
        match built {
            Ok(rt) => Ok(DrivenRuntime {
                rt: Some(rt),
                shared,
                driver: Some(driver),
            }),
            Err(e) => {
                let _ = driver.join();
                Err(Error::new(
                    ErrorKind::Internal,
                    format!("cannot start the runtime: {e}"),
                ))
            }
        }
    }

    fn rt(&self) -> &Runtime {
        self.rt.as_ref().expect("the runtime lives until drop")
    }

    /// A handle to spawn background work on.
    pub fn handle(&self) -> &Handle {
        self.rt().handle()
    }

    /// Runs `future` to completion, blocking the calling thread, which drives the runtime
    /// meanwhile. Panics when called on a thread of a tokio runtime (check first: bindings
    /// refuse blocking calls there).
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        let _caller = Caller::enter(&self.shared);
        let _sigpipe = sigpipe::Held::new();
        self.rt().block_on(future)
    }
}

impl Drop for DrivenRuntime {
    /// Waits up to a second for requests still in flight in this process (a release returns
    /// once a quorum deleted the keys), stops the driver, and joins the runtime's threads
    /// (unless dropped on one of them: then it shuts down in the background).
    fn drop(&mut self) {
        let on_runtime_thread = Handle::try_current().is_ok();
        if !on_runtime_thread {
            // Let the requests finish while the driver still drives.
            crate::drain_blocking(Duration::from_secs(1));
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
            rt.shutdown_background();
        } else {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

/// Blocks SIGPIPE on the calling thread for good: for the threads of a runtime whose sockets
/// must never end the process (see the module). A SIGPIPE raised on such a thread stays pending
/// there, harmless; a write that raised it fails with `EPIPE`.
pub fn block_sigpipe() {
    #[cfg(unix)]
    {
        let set = sigpipe::pipe_set();
        // SAFETY: an initialised set, and pthread_sigmask on the calling thread.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    }
}

/// SIGPIPE blocked on a caller's thread while it drives the runtime (see the module).
mod sigpipe {
    /// Blocks SIGPIPE until dropped; then takes off the thread a SIGPIPE raised meanwhile (not
    /// one that was pending before) and restores the mask. Nothing to do on a thread that
    /// blocked it already.
    pub(super) struct Held {
        /// The mask to restore, and whether a SIGPIPE was pending when it was blocked.
        #[cfg(unix)]
        restore: Option<(libc::sigset_t, bool)>,
    }

    /// The set holding SIGPIPE alone.
    #[cfg(unix)]
    pub(super) fn pipe_set() -> libc::sigset_t {
        // SAFETY: sigemptyset initialises the set; SIGPIPE is a valid signal.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            set
        }
    }

    #[cfg(unix)]
    fn pending() -> bool {
        // SAFETY: sigpending fills an initialised set.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigpending(&mut set) == 0 && libc::sigismember(&set, libc::SIGPIPE) == 1
        }
    }

    impl Held {
        pub(super) fn new() -> Held {
            #[cfg(unix)]
            {
                let set = pipe_set();
                // SAFETY: initialised sets; pthread_sigmask on the calling thread.
                let old = unsafe {
                    let mut old: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut old);
                    if libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) != 0 {
                        return Held { restore: None };
                    }
                    old
                };
                // SAFETY: `old` was filled by pthread_sigmask.
                if unsafe { libc::sigismember(&old, libc::SIGPIPE) } == 1 {
                    return Held { restore: None };
                }
                Held {
                    restore: Some((old, pending())),
                }
            }
            #[cfg(not(unix))]
            Held {}
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            #[cfg(unix)]
            if let Some((old, was_pending)) = self.restore.take() {
                if !was_pending && pending() {
                    let set = pipe_set();
                    let now = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    };
                    // SAFETY: takes the pending SIGPIPE off this thread without waiting.
                    unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &now) };
                }
                // SAFETY: restores the mask read when blocking.
                unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
            }
        }
    }
}
