//! The asyncio bridge: a core future becomes an asyncio future of the running loop, cancel-safe
//! both ways.
//!
//! The calls of `AsyncLockManager` run on a runtime that the event loop drives from its own
//! thread: the loop watches the runtime's reactor (`add_reader` on its epoll descriptor) and,
//! when it turns readable, runs the runtime until nothing is ready, then completes the futures
//! of the calls that finished meanwhile. A call starts the same way: its requests are written
//! on the loop's thread before `acquire(…)` returns its awaitable. So a call costs no hand-off
//! to another thread and back. When the loop is busy elsewhere (or not running), the runtime's
//! own thread drives it; calls that finish there reach the loop in batches through
//! `call_soon_threadsafe`.

use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use futures_util::future::{AbortHandle, Abortable};
use ironlock::driven::CallQueue;
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
    fn new(event_loop: Py<PyAny>, watched: Option<i32>) -> Delivery {
        Delivery {
            queue: Mutex::new(Queue {
                finished: Vec::new(),
                scheduled: false,
            }),
            event_loop,
            pid: pid(),
            watched,
        }
    }

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
        let weak = cached_attr(py, &WEAKREF, "weakref", "ref")?
            .call1((&event_loop,))?
            .unbind();
        let fd = evloop_runtime().reactor_fd();
        let d = Py::new(py, Delivery::new(weak.clone_ref(py), fd))?;
        let d = match fd {
            // Watch the reactor from this loop. A loop that cannot (no `add_reader`) leaves it to
            // the runtime's thread.
            Some(fd) => match event_loop.call_method1(
                pyo3::intern!(py, "add_reader"),
                (fd, d.getattr(py, pyo3::intern!(py, "drive"))?),
            ) {
                Ok(_) => d,
                Err(_) => Py::new(py, Delivery::new(weak, None))?,
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
    /// The drain scheduled by a call that finished on another thread.
    fn __call__(&self, py: Python<'_>) {
        self.deliver(py);
    }

    /// The loop's reader callback: the runtime's reactor has events. Runs the runtime here until
    /// nothing is ready and completes the calls that finished.
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
        let drove = std::panic::catch_unwind(AssertUnwindSafe(|| self.drive_here(py, || ())));
        if drove.is_err() {
            self.deliver(py);
        }
        Ok(())
    }
}

/// The done callback of a call's future: stops the call if the future was cancelled (dropping
/// the core's future, which is cancel-safe). Called on completion too, where it does nothing.
#[pyclass(frozen, module = "ironlock._native")]
pub(crate) struct Canceller(AbortHandle);

#[pymethods]
impl Canceller {
    fn __call__(&self, _fut: &Bound<'_, PyAny>) {
        self.0.abort();
    }
}

/// The asyncio calls of this process (one per process, as its runtime: a forked child starts
/// with none, never with its parent's): counted while in flight, queued while others are.
pub(super) type Calls = CallQueue;

/// Turns `fut` into an asyncio future of the running loop. Cancelling the asyncio future drops
/// `fut` on the runtime (the core's futures are cancel-safe).
///
/// When the loop watches the runtime (see the module) and no other call is in flight, `fut`
/// starts on this thread before this returns: its requests are written at once. With others in
/// flight it is queued, and every call queued meanwhile starts in the runtime's next drive (by
/// the loop, in its next turn): their commands to a node go out in one write instead of one
/// each, which is what many tasks calling at once need.
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = ironlock::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let (event_loop, delivery) = Delivery::current(py)?;
    let py_fut = event_loop.call_method0(pyo3::intern!(py, "create_future"))?;
    let target = py_fut.clone().unbind();
    let watched = delivery.get().watched.is_some() && Handle::try_current().is_err();
    let d = delivery.clone_ref(py);
    let calls = asyncio_calls();
    let counted = calls.enter();
    let (abort, registration) = AbortHandle::new_pair();
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
    py_fut.call_method1(pyo3::intern!(py, "add_done_callback"), (Canceller(abort),))?;
    let rt = evloop_runtime();
    if !watched {
        rt.handle().spawn(call);
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
