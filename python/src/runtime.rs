//! The one tokio runtime of this process and the two ways Python waits on it.
//!
//! The runtime is created lazily and recreated in a forked child (a child inherits the parent's
//! memory but none of its threads). Everything tied to a runtime (core managers, locks, tasks)
//! is wrapped in [`ProcessLocal`], so a child never drops or drives the parent's objects.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;
use ironlock::Error;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
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
        Err(panic) => Err(Error::from_panic(&*panic)),
    }
}

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

/// Set by the `atexit` hook: from then on no runtime thread takes the GIL (a thread that does so
/// while the interpreter finalizes crashes the process); results still undelivered are dropped.
static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Runtime-side calls into Python in progress (the only ones: scheduling a [`Delivery`] drain).
static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct InFlight;

impl InFlight {
    /// Counts the caller in, unless the interpreter is exiting.
    fn enter() -> Option<InFlight> {
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

/// A result converted to Python only on the event loop's thread, with the GIL held; an error
/// becomes the mapped exception then. Dropped undelivered (the awaiting task was cancelled), its
/// value is dropped too — see `lock::Grant` for what that releases.
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

/// A finished call: the asyncio future to complete and the result to convert.
type Finished = (
    Py<PyAny>,
    Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>,
);

struct Queue {
    finished: Vec<Finished>,
    /// A drain is scheduled on the loop and has not started yet.
    scheduled: bool,
}

/// Hands finished calls to one event loop in batches: the first call that finishes after a
/// drain schedules the next one (`call_soon_threadsafe`, one self-pipe write); calls that finish
/// before it runs are delivered by the same drain. Called by the loop, it is the drain.
#[pyclass(frozen, module = "ironlock._native")]
pub(crate) struct Delivery {
    queue: Mutex<Queue>,
    /// A weak reference to the loop (the per-thread cache must not keep a loop alive).
    event_loop: Py<PyAny>,
    pid: u32,
}

thread_local! {
    /// The delivery of the loop this thread ran last.
    static DELIVERY: std::cell::RefCell<Option<Py<Delivery>>> =
        const { std::cell::RefCell::new(None) };
}

static GET_RUNNING_LOOP: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
static WEAKREF: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

fn cached_attr<'py>(
    py: Python<'py>,
    cell: &'static pyo3::sync::PyOnceLock<Py<PyAny>>,
    module: &str,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || Ok(py.import(module)?.getattr(name)?.unbind()))
        .map(|f| f.bind(py))
}

impl Delivery {
    /// The running loop (RuntimeError without one) and its delivery.
    fn current<'py>(py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Py<Delivery>)> {
        let event_loop =
            cached_attr(py, &GET_RUNNING_LOOP, "asyncio", "get_running_loop")?.call0()?;
        let me = pid();
        let cached = DELIVERY.with_borrow(|d| {
            d.as_ref()
                .filter(|d| {
                    let d = d.get();
                    d.pid == me
                        && d.event_loop
                            .bind(py)
                            .call0()
                            .is_ok_and(|l| l.is(&event_loop))
                })
                .map(|d| d.clone_ref(py))
        });
        if let Some(d) = cached {
            return Ok((event_loop, d));
        }
        let weak = cached_attr(py, &WEAKREF, "weakref", "ref")?.call1((&event_loop,))?;
        let d = Py::new(
            py,
            Delivery {
                queue: Mutex::new(Queue {
                    finished: Vec::new(),
                    scheduled: false,
                }),
                event_loop: weak.unbind(),
                pid: me,
            },
        )?;
        let old = DELIVERY.with_borrow_mut(|slot| slot.replace(d.clone_ref(py)));
        if let Some(old) = old
            && old.get().pid != me
        {
            // Inherited through fork: its queue may hold the parent's locks; never touch it.
            std::mem::forget(old);
        }
        Ok((event_loop, d))
    }

    /// Queues a finished call (on a runtime thread); schedules a drain if none is pending.
    fn push(this: Py<Delivery>, done: Finished) {
        let first = {
            let mut q = lock_ignoring_poison(&this.get().queue);
            q.finished.push(done);
            !std::mem::replace(&mut q.scheduled, true)
        };
        if first {
            // Taking the GIL can wait for the loop thread; not on a worker.
            handle().spawn_blocking(move || Delivery::schedule(this));
        }
    }

    fn take(&self) -> Vec<Finished> {
        let mut q = lock_ignoring_poison(&self.queue);
        q.scheduled = false;
        std::mem::take(&mut q.finished)
    }

    fn schedule(this: Py<Delivery>) {
        let Some(_busy) = InFlight::enter() else {
            return;
        };
        Python::attach(|py| {
            let scheduled = (|| {
                let event_loop = this.get().event_loop.bind(py).call0()?;
                if event_loop.is_none() {
                    return Ok(false);
                }
                event_loop.call_method1(
                    pyo3::intern!(py, "call_soon_threadsafe"),
                    (this.clone_ref(py),),
                )?;
                Ok::<_, PyErr>(true)
            })();
            if !matches!(scheduled, Ok(true)) {
                // The loop is gone or closed: nothing can await these any more.
                drop(this.get().take());
            }
        });
    }
}

#[pymethods]
impl Delivery {
    /// The drain: completes the futures of every queued call (skipping cancelled ones, whose
    /// results are dropped).
    fn __call__(&self, py: Python<'_>) {
        for (fut, make) in self.take() {
            let fut = fut.bind(py);
            let delivered = (|| {
                if fut.call_method0(pyo3::intern!(py, "done"))?.is_truthy()? {
                    return Ok(());
                }
                match make(py) {
                    Ok(v) => fut.call_method1(pyo3::intern!(py, "set_result"), (v,))?,
                    Err(e) => fut.call_method1(pyo3::intern!(py, "set_exception"), (e,))?,
                };
                Ok::<_, PyErr>(())
            })();
            if let Err(e) = delivered {
                e.write_unraisable(py, Some(fut));
            }
        }
    }
}

/// The done callback of a call's future: stops the call if the future was cancelled (dropping
/// the core's future, which is cancel-safe). Called on completion too, where it does nothing.
#[pyclass(frozen, module = "ironlock._native")]
pub(crate) struct Canceller(tokio::task::AbortHandle);

#[pymethods]
impl Canceller {
    fn __call__(&self, _fut: &Bound<'_, PyAny>) {
        self.0.abort();
    }
}

/// Turns `fut` into an asyncio future of the running loop. Cancelling it drops `fut` on the
/// runtime (the core's futures are cancel-safe).
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = ironlock::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let (event_loop, delivery) = Delivery::current(py)?;
    let py_fut = event_loop.call_method0(pyo3::intern!(py, "create_future"))?;
    let target = py_fut.clone().unbind();
    let task = handle().spawn(async move {
        let out = Deferred(guarded(fut).await);
        Delivery::push(
            delivery,
            (
                target,
                Box::new(move |py| out.into_pyobject(py).map(Bound::unbind)),
            ),
        );
    });
    py_fut.call_method1(
        pyo3::intern!(py, "add_done_callback"),
        (Canceller(task.abort_handle()),),
    )?;
    Ok(py_fut)
}
