//! The one tokio runtime of this process (recreated after a fork) and what is tied to it; the two
//! ways Python waits on it are `blocking` and `asyncio`, and `exit` handles interpreter exit.

//!
//! The runtime is created lazily and recreated in a forked child (a child inherits the parent's
//! memory but none of its threads). Everything tied to a runtime (core managers, locks, tasks)
//! is wrapped in [`ProcessLocal`], so a child never drops or drives the parent's objects.

mod asyncio;
mod blocking;
mod exit;

pub(crate) use asyncio::awaitable;
pub(crate) use blocking::{block_on, wait_interruptible};
pub(crate) use exit::{drain_at_exit, drain_requests};

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;
use ironlock::Error;
use ironlock::driven::DrivenRuntime;
use tokio::runtime::{Handle, Runtime};

/// How long a blocking call waits before it looks for a pending signal (Ctrl-C).
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// The runtimes and the process that built them. Built once per process and leaked: a runtime
/// inherited through fork has no threads in the child, so it must never be dropped or used there.
/// Three of them: the blocking API's, which the calling thread drives while it waits
/// ([`ironlock::driven`]; the managers of `LockManager` live there); asyncio's, which each event
/// loop that awaits a call drives from its own thread when the runtime's reactor turns readable
/// (the managers of `AsyncLockManager` live there: a call's requests are written and its replies
/// read on the loop's thread, with no hand-off to another thread and back); and a multi-thread
/// one for background work that belongs to no manager (releasing a grant nobody received,
/// watching for a lost lock).
struct Owned {
    pid: u32,
    driven: DrivenRuntime,
    evloop: DrivenRuntime,
    /// The asyncio calls queued and in flight on `evloop`.
    calls: asyncio::Calls,
    tasks: Runtime,
}

/// The current process's runtime (a leaked `Owned`, never freed), read without a lock so that a
/// fork taken while another thread reads it cannot leave the child deadlocked.
static CURRENT: AtomicPtr<Owned> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises building; held only while a runtime is built.
static BUILDING: Mutex<()> = Mutex::new(());

/// This process's id, cached (0 = not read yet). A forked child forgets the cached value in a
/// `pthread_atfork` child handler (see [`watch_forks`]), so it reads its own id on next use.
static PID: AtomicU32 = AtomicU32::new(0);

/// This process's id, without a system call after the first read in each process.
pub(crate) fn pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            let me = std::process::id();
            PID.store(me, Ordering::Relaxed);
            me
        }
        me => me,
    }
}

#[cfg(unix)]
unsafe extern "C" {
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> std::ffi::c_int;
}

/// Runs in a forked child before `fork()` returns there (async-signal-safe: one atomic store).
#[cfg(unix)]
unsafe extern "C" fn forget_pid() {
    PID.store(0, Ordering::Relaxed);
}

/// Makes every forked child forget the cached pid. A `pthread_atfork` handler rather than
/// `os.register_at_fork`: it also runs for forks that do not go through `os.fork`.
/// Called once, when the module is imported.
pub(crate) fn watch_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(unix)]
        {
            // SAFETY: `forget_pid` is a valid handler for the life of the process (the module's
            // library is never unloaded by CPython) and only stores to an atomic.
            let rc = unsafe { pthread_atfork(None, None, Some(forget_pid)) };
            if rc != 0 {
                panic!("ironlock: pthread_atfork failed ({rc})");
            }
        }
    });
}

pub(crate) fn lock_ignoring_poison<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn current(me: u32) -> Option<&'static Owned> {
    // SAFETY: every non-null pointer stored in CURRENT comes from `Box::leak` and is never freed.
    let owned = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }?;
    (owned.pid == me).then_some(owned)
}

/// The runtimes of this process, created on first use and again after a fork.
fn owned() -> &'static Owned {
    let me = pid();
    if let Some(owned) = current(me) {
        return owned;
    }
    let _building = lock_ignoring_poison(&BUILDING);
    if let Some(owned) = current(me) {
        return owned;
    }
    let driven = DrivenRuntime::new("ironlock-rt", 2)
        .unwrap_or_else(|e| panic!("ironlock: cannot start the tokio runtime: {e}"));
    let evloop = DrivenRuntime::for_event_loop("ironlock-aio", 2)
        .unwrap_or_else(|e| panic!("ironlock: cannot start the tokio runtime: {e}"));
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let tasks = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("ironlock-rt")
        // Python ignores SIGPIPE, but a program that embeds it may not.
        .on_thread_start(ironlock::driven::block_sigpipe)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("ironlock: cannot start the tokio runtime: {e}"));
    let owned: &'static Owned = Box::leak(Box::new(Owned {
        pid: me,
        driven,
        evloop,
        calls: asyncio::Calls::default(),
        tasks,
    }));
    CURRENT.store(std::ptr::from_ref(owned).cast_mut(), Ordering::Release);
    owned
}

/// The blocking API's runtime: the caller drives it while it waits.
fn runtime() -> &'static DrivenRuntime {
    &owned().driven
}

/// asyncio's runtime: event loops drive it (see `asyncio`).
fn evloop_runtime() -> &'static DrivenRuntime {
    &owned().evloop
}

/// The asyncio calls of this process.
fn asyncio_calls() -> &'static asyncio::Calls {
    &owned().calls
}

/// The multi-thread runtime, for background tasks.
pub(crate) fn handle() -> Handle {
    owned().tasks.handle().clone()
}

/// A value that belongs to the process that created it. In a forked child it is never dropped
/// (dropping would touch the parent's runtime, whose threads do not exist here): it is leaked.
pub(crate) struct ProcessLocal<T> {
    pid: u32,
    value: Option<T>,
}

impl<T> ProcessLocal<T> {
    pub(crate) fn new(value: T) -> Self {
        ProcessLocal {
            pid: pid(),
            value: Some(value),
        }
    }

    /// The value, unless this is another process than the one that created it.
    pub(crate) fn get(&self) -> Option<&T> {
        if self.pid == pid() {
            self.value.as_ref()
        } else {
            None
        }
    }

    /// The process that created the value.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The value regardless of the process (for reading plain data only).
    pub(crate) fn any_process(&self) -> &T {
        self.value
            .as_ref()
            .expect("ProcessLocal holds a value until dropped")
    }

    /// Takes the value out if this is the creating process.
    pub(crate) fn take(&mut self) -> Option<T> {
        if self.pid == pid() {
            self.value.take()
        } else {
            None
        }
    }
}

impl<T> Drop for ProcessLocal<T> {
    fn drop(&mut self) {
        if self.pid != pid() {
            std::mem::forget(self.value.take());
        }
    }
}

/// Runs `fut`, turning a panic into an `Internal` error instead of unwinding into Python.
async fn guarded<T>(fut: impl Future<Output = ironlock::Result<T>>) -> ironlock::Result<T> {
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => Err(Error::from_panic(&*panic)),
    }
}
