//! The asyncio bridge: a core future becomes an asyncio future of the running loop, completed
//! in batches on the loop's thread, cancel-safe both ways.

use std::future::Future;
use std::sync::Mutex;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;

use super::exit::InFlight;
use super::{guarded, handle, lock_ignoring_poison, pid};
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
