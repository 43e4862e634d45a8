//! The asyncio bridge: a core future becomes an asyncio future of the running loop, cancel-safe
//! both ways.
//!
//! The calls of `AsyncLockManager` run on a runtime that the event loop drives from its own
//! thread: the loop watches the runtime's reactor (`add_reader` on its epoll descriptor) and,
//! when it turns readable, runs the runtime until nothing is ready, then completes the futures
//! of the calls that finished meanwhile. Calls start on the loop's thread too, so a call costs
//! no hand-off to another thread and back. When the loop is busy elsewhere (or not running), the
//! runtime's own thread drives it; calls that finish there reach the loop in batches through
//! `call_soon_threadsafe`.
//!
//! A call's future is an `ironlock._async._CallFuture`: cancelling it stops the call, and
//! awaiting it while the loop has nothing else to do starts it, if it has not started, and
//! waits for it on the runtime right there ([`Delivery::settle`]), so that a task awaiting one
//! call at a time (a request handler) gets its result in one drive of the runtime, as a
//! blocking call does, without going around the loop. A call not awaited at once starts in the
//! loop's next turn.

use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::future::{AbortHandle, Abortable};
use ironlock::driven::{CallQueue, Woken, settled};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use tokio::runtime::Handle;

use super::exit::InFlight;
use super::{asyncio_calls, evloop_runtime, guarded, lock_ignoring_poison, pid};
use crate::error;

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
    /// A drain is scheduled on the loop (`call_soon_threadsafe`) and has not started yet.
    scheduled: bool,
}

/// One event loop's side of the bridge: the calls that finished and wait for the loop, and
/// whether the loop watches the runtime's reactor.
///
/// Calls that finish while this loop drives the runtime (on its thread) are completed right
/// after that drive. Calls that finish on another thread are handed over in batches: the first
/// one after a drain schedules the next drain (`call_soon_threadsafe`, one self-pipe write);
/// calls that finish before it runs are delivered by the same drain. Called by the loop, it is
/// the drain.
#[pyclass(frozen, module = "ironlock._native")]
pub(crate) struct Delivery {
    queue: Mutex<Queue>,
    /// A weak reference to the loop (the per-thread cache must not keep a loop alive).
    event_loop: Py<PyAny>,
    pid: u32,
    /// The reactor descriptor this loop watches, or `None` when it does not (no descriptor, or a
    /// loop without `add_reader`): then the runtime's own thread drives it.
    watched: Option<i32>,
    /// The descriptor the loop waits on (its selector's) when the loop is asyncio's own
    /// selector loop, whose ready queue and timers can be read: then an awaited call may finish
    /// before its task yields (see [`Delivery::settle`]), and calls start when awaited or in
    /// the loop's next turn ([`Delivery::start_soon`]).
    selector: Option<i32>,
    /// The loop's handle of a pending [`Delivery::start`], if one is scheduled.
    starter: Mutex<Option<Py<PyAny>>>,
}

thread_local! {
    /// The delivery of the loop this thread ran last.
    static DELIVERY: std::cell::RefCell<Option<Py<Delivery>>> =
        const { std::cell::RefCell::new(None) };
    /// The delivery whose loop drives the runtime on this thread right now (null otherwise): a
    /// call of that loop finishing now is completed after the drive, without a hand-over.
    static DRIVING: Cell<*const Delivery> = const { Cell::new(std::ptr::null()) };
}

static GET_RUNNING_LOOP: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
static WEAKREF: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
static CALL_FUTURE: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// How long an awaited call may keep its loop waiting on the runtime alone (see
/// [`Delivery::settle`]): less than the idle time after which the runtime's own thread takes
/// over driving it, so the two never take turns within one wait.
const SETTLE: Duration = Duration::from_micros(1_500);

/// The descriptor `event_loop` waits on, if it is asyncio's own selector loop: one with a ready
/// queue (`_ready`), a timer heap (`_scheduled`) and a selector (`_selector.fileno()`).
fn selector_fd(event_loop: &Bound<'_, PyAny>) -> Option<i32> {
    let py = event_loop.py();
    if !event_loop
        .hasattr(pyo3::intern!(py, "_ready"))
        .unwrap_or(false)
        || !event_loop
            .hasattr(pyo3::intern!(py, "_scheduled"))
            .unwrap_or(false)
    {
        return None;
    }
    event_loop
        .getattr(pyo3::intern!(py, "_selector"))
        .and_then(|s| s.call_method0(pyo3::intern!(py, "fileno")))
        .and_then(|fd| fd.extract::<i32>())
        .ok()
}

fn cached_attr<'py>(
    py: Python<'py>,
    cell: &'static pyo3::sync::PyOnceLock<Py<PyAny>>,
    module: &str,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || Ok(py.import(module)?.getattr(name)?.unbind()))
        .map(|f| f.bind(py))
}

/// Marks the current thread as driving the runtime for a delivery until dropped.
struct Driving(*const Delivery);

impl Driving {
    fn enter(delivery: &Delivery) -> Driving {
        Driving(DRIVING.replace(std::ptr::from_ref(delivery)))
    }
}

impl Drop for Driving {
    fn drop(&mut self) {
        DRIVING.set(self.0);
    }
}

impl Delivery {
    fn new(event_loop: Py<PyAny>, watched: Option<i32>, selector: Option<i32>) -> Delivery {
        Delivery {
            queue: Mutex::new(Queue {
                finished: Vec::new(),
                scheduled: false,
            }),
            event_loop,
            pid: pid(),
            watched,
            selector,
            starter: Mutex::new(None),
        }
    }

    /// The running loop (RuntimeError without one) and its delivery.
    fn current<'py>(py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Py<Delivery>)> {
        // The usual case, without asking asyncio (whose check costs a system call on some
        // versions): the loop this thread ran last is a selector loop running here now.
        let here = DELIVERY.with_borrow(|d| {
            d.as_ref().and_then(|d| {
                let loop_ = d.get().running_here(py)?;
                Some((loop_, d.clone_ref(py)))
            })
        });
        if let Some(found) = here {
            return Ok(found);
        }
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
        let weak = cached_attr(py, &WEAKREF, "weakref", "ref")?
            .call1((&event_loop,))?
            .unbind();
        let fd = evloop_runtime().reactor_fd();
        let selector = fd.and_then(|_| selector_fd(&event_loop));
        let d = Py::new(py, Delivery::new(weak.clone_ref(py), fd, selector))?;
        let d = match fd {
            // Watch the reactor from this loop. A loop that cannot (no `add_reader`) leaves it to
            // the runtime's thread.
            Some(fd) => match event_loop.call_method1(
                pyo3::intern!(py, "add_reader"),
                (fd, d.getattr(py, pyo3::intern!(py, "drive"))?),
            ) {
                Ok(_) => d,
                Err(_) => Py::new(py, Delivery::new(weak, None, None))?,
            },
            None => d,
        };
        let old = DELIVERY.with_borrow_mut(|slot| slot.replace(d.clone_ref(py)));
        if let Some(old) = old
            && old.get().pid != me
        {
            // Inherited through fork: its queue may hold the parent's locks; never touch it.
            std::mem::forget(old);
        }
        Ok((event_loop, d))
    }

    /// Hands a finished call to its loop: directly when this thread is that loop's, driving
    /// the runtime now (it completes the call right after); otherwise in a batch, scheduling a
    /// drain if none is pending.
    fn finish(this: Py<Delivery>, done: Finished) {
        if std::ptr::eq(DRIVING.get(), this.get()) {
            lock_ignoring_poison(&this.get().queue).finished.push(done);
            // A settle waiting for this loop's calls on this thread takes it now.
            settled();
            return;
        }
        let first = {
            let mut q = lock_ignoring_poison(&this.get().queue);
            q.finished.push(done);
            !std::mem::replace(&mut q.scheduled, true)
        };
        if first {
            // Taking the GIL can wait for the loop thread; not on the runtime's thread.
            evloop_runtime()
                .handle()
                .spawn_blocking(move || Delivery::schedule(this));
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

    /// Runs `start` and then the runtime on this (the loop's) thread until nothing is ready,
    /// with the GIL released, and completes the calls of this loop that finished meanwhile.
    fn drive_here<R: Send>(&self, py: Python<'_>, start: impl FnOnce() -> R + Send) -> R {
        let r = py.detach(|| {
            let _driving = Driving::enter(self);
            evloop_runtime().drive_now(start)
        });
        self.deliver(py);
        r
    }

    /// Lets the call behind `fut` (a call of this loop, just awaited) start, if it has not, and
    /// finish on this thread before the awaiting task yields to the loop, as long as the loop
    /// has nothing else to do: no callback ready (but this delivery's own [`start`](Self::start)),
    /// no timer due, and nothing readable on the loop's own descriptor. It drives the runtime,
    /// waiting on its reactor and that descriptor together (what the loop itself would do next,
    /// less its turn around the selector, the ready queue and the future's callbacks), for at
    /// most [`SETTLE`]. Whatever else turns up first ends the wait; the task then yields as
    /// usual and the call completes through the loop. Only for asyncio's own selector loop
    /// (whose queue and timers it reads); any other loop, thread or process returns at once.
    ///
    /// A signal that arrives during the wait has its Python handler run here: if that raises
    /// (Ctrl-C where no asyncio runner turns it into a cancellation), the call is cancelled
    /// before the exception goes up, as it would be had the task been waiting in the loop —
    /// never left running for nobody to release what it takes.
    fn settle(&self, py: Python<'_>, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some(selector) = self.selector else {
            return Ok(());
        };
        if self.pid != pid() || Handle::try_current().is_ok() {
            return Ok(());
        }
        let Some(event_loop) = self.running_here(py) else {
            return Ok(());
        };
        let deadline = Instant::now() + SETTLE;
        loop {
            // Unreadable loop internals count as "busy": the call then completes the usual way.
            let starter = lock_ignoring_poison(&self.starter)
                .as_ref()
                .map(|h| h.clone_ref(py));
            let idle = idle_for(fut, &event_loop, starter.as_ref(), deadline);
            let Some(wait) = idle.ok().flatten() else {
                return Ok(());
            };
            let woken = std::panic::catch_unwind(AssertUnwindSafe(|| {
                py.detach(|| {
                    let _driving = Driving::enter(self);
                    evloop_runtime().settle(|| asyncio_calls().start_queued(), selector, wait)
                })
            }));
            self.deliver(py);
            // A signal that arrived meanwhile, whichever wait or thread it interrupted: its
            // handler runs now (it would run as soon as this returns anyway).
            if let Err(e) = py.check_signals() {
                fut.call_method0(pyo3::intern!(py, "cancel"))?;
                return Err(e);
            }
            if !matches!(woken, Ok(Woken::Settled)) {
                return Ok(());
            }
        }
    }

    /// Has the loop run [`start`](Self::start) in its next turn, unless it is scheduled already:
    /// the calls queued by then start there if no settle has started them before.
    fn start_soon(this: &Bound<'_, Delivery>, event_loop: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = this.py();
        if lock_ignoring_poison(&this.get().starter).is_some() {
            return Ok(());
        }
        let handle = event_loop.call_method1(
            pyo3::intern!(py, "call_soon"),
            (this.getattr(pyo3::intern!(py, "start"))?,),
        )?;
        *lock_ignoring_poison(&this.get().starter) = Some(handle.unbind());
        Ok(())
    }

    /// This delivery's loop, if it is asyncio's selector loop (see `selector`) of this process
    /// and runs on this thread now: its `_thread_id` is this thread's while it runs (and at most
    /// one loop runs on a thread), which needs no call into asyncio.
    fn running_here<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        if self.selector.is_none() || self.pid != pid() {
            return None;
        }
        let event_loop = self.event_loop.bind(py).call0().ok()?;
        let thread: std::ffi::c_ulong = event_loop
            .getattr(pyo3::intern!(py, "_thread_id"))
            .ok()?
            .extract()
            .ok()?;
        // SAFETY: called with the GIL held; no preconditions.
        let me = unsafe { pyo3::ffi::PyThread_get_thread_ident() };
        (thread == me).then_some(event_loop)
    }

    /// Stops the loop watching the reactor.
    fn unwatch(&self, py: Python<'_>) -> PyResult<()> {
        if let (Some(fd), Ok(event_loop)) = (self.watched, self.event_loop.bind(py).call0())
            && !event_loop.is_none()
        {
            event_loop.call_method1(pyo3::intern!(py, "remove_reader"), (fd,))?;
        }
        Ok(())
    }

    /// Completes the futures of every queued call (skipping cancelled ones, whose results are
    /// dropped).
    fn deliver(&self, py: Python<'_>) {
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

#[pymethods]
impl Delivery {
    /// The pending start's handle refers back to this delivery (its callback): let the garbage
    /// collector see the cycle, for a loop closed before it ran.
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        if let Ok(starter) = self.starter.try_lock()
            && let Some(handle) = starter.as_ref()
        {
            visit.call(handle)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        if let Ok(mut starter) = self.starter.try_lock() {
            starter.take();
        }
    }

    /// The drain scheduled by a call that finished on another thread.
    fn __call__(&self, py: Python<'_>) {
        self.deliver(py);
    }

    /// Scheduled by [`start_soon`](Self::start_soon): starts the calls queued on this thread
    /// that no settle has started.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        drop(lock_ignoring_poison(&self.starter).take());
        if asyncio_calls().is_empty() {
            return Ok(());
        }
        self.drive(py)
    }

    /// The loop's reader callback: the runtime's reactor has events. Runs the runtime here until
    /// nothing is ready (starting the calls queued meanwhile) and completes the calls that
    /// finished.
    fn drive(&self, py: Python<'_>) -> PyResult<()> {
        if self.pid != pid() {
            // A forked child's copy of a parent's loop: the descriptor is the parent's reactor,
            // which this process must not drive; stop watching it.
            return self.unwatch(py);
        }
        if Handle::try_current().is_ok() {
            // A loop running on a thread of some tokio runtime cannot drive another one here:
            // stop watching (calls started here are completed through `call_soon_threadsafe`),
            // the runtime's own thread drives it.
            return self.unwatch(py);
        }
        // A panic must not unwind into the event loop; the tasks catch their own.
        let drove = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.drive_here(py, || asyncio_calls().start_queued());
        }));
        if drove.is_err() {
            self.deliver(py);
        }
        Ok(())
    }
}

/// How long `event_loop` has nothing to do but wait for `fut` (until `deadline` or its next
/// timer, whichever is sooner); `None` once `fut` is done or the loop has a callback ready or a
/// timer due. `starter`, the delivery's pending start, does not count: a settle does its work.
fn idle_for(
    fut: &Bound<'_, PyAny>,
    event_loop: &Bound<'_, PyAny>,
    starter: Option<&Py<PyAny>>,
    deadline: Instant,
) -> PyResult<Option<Duration>> {
    let py = fut.py();
    if fut.call_method0(pyo3::intern!(py, "done"))?.is_truthy()? {
        return Ok(None);
    }
    let ready = event_loop.getattr(pyo3::intern!(py, "_ready"))?;
    let busy = match ready.len()? {
        0 => false,
        1 => !starter.is_some_and(|h| ready.get_item(0).is_ok_and(|r| r.is(h))),
        _ => true,
    };
    if busy {
        return Ok(None);
    }
    let mut wait = deadline.saturating_duration_since(Instant::now());
    let timers = event_loop.getattr(pyo3::intern!(py, "_scheduled"))?;
    if !timers.is_empty()? {
        let when: f64 = timers
            .get_item(0)?
            .call_method0(pyo3::intern!(py, "when"))?
            .extract()?;
        let now: f64 = event_loop
            .call_method0(pyo3::intern!(py, "time"))?
            .extract()?;
        wait = wait.min(Duration::try_from_secs_f64(when - now).unwrap_or_default());
    }
    Ok((!wait.is_zero()).then_some(wait))
}

/// What a call's future (`ironlock._async._CallFuture`) holds of the call: the way to stop it
/// when the future is cancelled (dropping the core's future, which is cancel-safe), and the
/// loop it settles on when awaited.
#[pyclass(frozen, module = "ironlock._native")]
pub(crate) struct Call {
    abort: AbortHandle,
    delivery: Py<Delivery>,
}

#[pymethods]
impl Call {
    /// The future was cancelled: stop the call.
    fn abort(&self) {
        self.abort.abort();
    }

    /// The future is awaited: see [`Delivery::settle`]. Raises only what a signal's handler
    /// raised meanwhile (the call is cancelled then).
    fn settle(&self, py: Python<'_>, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        self.delivery.get().settle(py, fut)
    }
}

/// The asyncio calls of this process (one per process, as its runtime: a forked child starts
/// with none, never with its parent's): counted while in flight, queued while others are.
pub(super) type Calls = CallQueue;

/// Turns `fut` into an asyncio future of the running loop. Cancelling the asyncio future drops
/// `fut` on the runtime (the core's futures are cancel-safe).
///
/// On asyncio's own selector loop, `fut` is queued: it starts when its future is awaited on an
/// idle loop (see [`Delivery::settle`]), or else in the loop's next turn, with every call queued
/// meanwhile (their commands to a node go out in one write instead of one each, which is what
/// many tasks calling at once need). On other loops that watch the runtime it starts on this
/// thread before this returns when no other call is in flight, and is queued for the loop's
/// next turn otherwise.
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = ironlock::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let (event_loop, delivery) = Delivery::current(py)?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item(pyo3::intern!(py, "loop"), &event_loop)?;
    let py_fut =
        cached_attr(py, &CALL_FUTURE, "ironlock._async", "_CallFuture")?.call((), Some(&kwargs))?;
    let target = py_fut.clone().unbind();
    let watched = delivery.get().watched.is_some() && Handle::try_current().is_err();
    let d = delivery.clone_ref(py);
    let calls = asyncio_calls();
    let counted = calls.enter();
    let (abort, registration) = AbortHandle::new_pair();
    // Boxed once here: the wrappers below and the spawn then move a pointer, not the call's
    // state (kilobytes for an acquire).
    let fut = Box::pin(fut);
    let call = Abortable::new(
        async move {
            let out = Deferred(guarded(fut).await);
            Delivery::finish(
                d,
                (
                    target,
                    Box::new(move |py| out.into_pyobject(py).map(Bound::unbind)),
                ),
            );
        },
        registration,
    );
    let call = async move {
        let _counted = counted;
        let _ = call.await;
    };
    py_fut.setattr(
        pyo3::intern!(py, "_ironlock"),
        Call {
            abort,
            delivery: delivery.clone_ref(py),
        },
    )?;
    let rt = evloop_runtime();
    if !watched {
        rt.handle().spawn(call);
    } else if delivery.get().selector.is_some() {
        Delivery::start_soon(delivery.bind(py), &event_loop)?;
        calls.push(call);
    } else if calls.alone() {
        // Started here; a call that finished at once (bad input, a closed manager) is
        // completed right away.
        delivery.get().drive_here(py, || {
            calls.start_queued();
            rt.handle().spawn(call);
        });
    } else {
        // Woken by the runtime's reactor, this loop drives it in its next turn.
        calls.queue(rt.handle(), call);
    }
    Ok(py_fut)
}
