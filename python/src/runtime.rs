//! The one tokio runtime of this process and the two ways Python waits on it.
//!
//! The runtime is created lazily and recreated in a forked child (a child inherits the parent's
//! memory but none of its threads). Everything tied to a runtime (core managers, locks, tasks)
//! is wrapped in [`ProcessLocal`], so a child never drops or drives the parent's objects.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;
use ironlock::{Error, ErrorKind};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{ContextExt, Runtime as GenericRuntime};
use tokio::runtime::{Handle, Runtime};

use crate::error;

/// How long a blocking call waits before it looks for a pending signal (Ctrl-C).
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// The runtime and the process that built it. Built once per process and leaked: a runtime
/// inherited through fork has no threads in the child, so it must never be dropped or used there.
struct Owned {
    pid: u32,
    runtime: Runtime,
}

/// The current process's runtime (a leaked `Owned`, never freed), read without a lock so that a
/// fork taken while another thread reads it cannot leave the child deadlocked.
static CURRENT: AtomicPtr<Owned> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises building; held only while a runtime is built.
static BUILDING: Mutex<()> = Mutex::new(());

/// This process's id (`getpid`, not cached: it changes in a forked child).
pub(crate) fn pid() -> u32 {
    std::process::id()
}

pub(crate) fn lock_ignoring_poison<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn current(me: u32) -> Option<&'static Owned> {
    // SAFETY: every non-null pointer stored in CURRENT comes from `Box::leak` and is never freed.
    let owned = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }?;
    (owned.pid == me).then_some(owned)
}

/// The runtime of this process, created on first use and again after a fork.
pub(crate) fn handle() -> Handle {
    let me = pid();
    if let Some(owned) = current(me) {
        return owned.runtime.handle().clone();
    }
    let _building = lock_ignoring_poison(&BUILDING);
    if let Some(owned) = current(me) {
        return owned.runtime.handle().clone();
    }
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("ironlock-rt")
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("ironlock: cannot start the tokio runtime: {e}"));
    let owned: &'static Owned = Box::leak(Box::new(Owned { pid: me, runtime }));
    CURRENT.store(std::ptr::from_ref(owned).cast_mut(), Ordering::Release);
    owned.runtime.handle().clone()
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
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            Err(Error::new(
                ErrorKind::Internal,
                format!("ironlock panicked: {what}"),
            ))
        }
    }
}

struct Slot<T> {
    value: Option<ironlock::Result<T>>,
    abandoned: bool,
}

/// Runs `fut` on the runtime and waits for it with the GIL released, looking for signals every
/// [`SLICE`]. On `KeyboardInterrupt` (or any exception a signal handler raises) the task is
/// aborted and the exception returned; a result that arrives anyway is dropped, and the types
/// this crate returns release what they hold when dropped undelivered (see `lock::Grant`).
pub(crate) fn block_on<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
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

/// The process's runtime as seen by pyo3-async-runtimes (which would otherwise keep its own,
/// fork-unaware runtime).
pub(crate) struct ForkSafe;

tokio::task_local! {
    static TASK_LOCALS: std::cell::OnceCell<TaskLocals>;
}

impl GenericRuntime for ForkSafe {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let busy = InFlight::enter();
        handle().spawn(async move {
            let _busy = busy;
            fut.await
        })
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        let busy = InFlight::enter();
        handle().spawn_blocking(move || {
            let _busy = busy;
            f()
        })
    }
}

impl ContextExt for ForkSafe {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = std::cell::OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|c| c.get().cloned())
            .unwrap_or_default()
    }
}

/// Counts the asyncio bridge tasks (pyo3-async-runtimes' result delivery) that may still touch
/// Python. A runtime thread that takes the GIL while the interpreter finalizes crashes the
/// process, so an `atexit` hook waits (GIL released, at most a second) for them to finish.
static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct InFlight;

impl InFlight {
    fn enter() -> InFlight {
        IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Registered with `atexit`: lets the bridge tasks finish before the interpreter finalizes.
#[pyfunction]
pub(crate) fn drain_at_exit(py: Python<'_>) {
    py.detach(|| {
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while IN_FLIGHT.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    });
}

/// A result converted to Python only when pyo3-async-runtimes hands it over with the GIL held;
/// an error becomes the mapped exception then. Dropped undelivered (the awaiting task was
/// cancelled), its value is dropped too — see `lock::Grant` for what that releases.
struct Deferred<T>(ironlock::Result<T>);

impl<'py, T: IntoPyObject<'py>> IntoPyObject<'py> for Deferred<T> {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            Ok(v) => v.into_bound_py_any(py),
            Err(e) => Err(error::to_pyerr(py, e)),
        }
    }
}

/// Turns `fut` into an asyncio awaitable. Cancelling the awaitable drops `fut` on the runtime
/// (the core's futures are cancel-safe).
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = ironlock::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    pyo3_async_runtimes::generic::future_into_py::<ForkSafe, _, _>(py, async move {
        Ok(Deferred(guarded(fut).await))
    })
}
