//! Who leads, followed: `Observer` (blocking iteration) and `AsyncObserver` (`async for`), one
//! step per change of leader.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration};
use pyo3::prelude::*;

use super::{leader_object, py_str, ready};
use crate::error;
use crate::manager::Core;
use crate::runtime::{self, ProcessLocal};

/// Where an observer is: not started (the core observer is made by the first step, once the
/// manager is connected), following, or ended.
enum Feed {
    Idle,
    Open(Box<ironlock::Observer>),
    Ended,
}

/// One observer's state, shared by the steps waiting on it and `close()`.
pub(super) struct Watching {
    core: Arc<Core>,
    name: String,
    feed: tokio::sync::Mutex<Feed>,
    closed: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Watching {
    pub(super) fn new(core: Arc<Core>, name: String) -> Arc<Watching> {
        Arc::new(Watching {
            core,
            name,
            feed: tokio::sync::Mutex::new(Feed::Idle),
            closed: AtomicBool::new(false),
            notify: tokio::sync::Notify::new(),
        })
    }
}

/// One step of an observer: the next leader (None: nobody leads), or the end.
enum Step {
    Next(Option<ironlock::Leader>),
    End,
}

impl<'py> IntoPyObject<'py> for Step {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Step::Next(l) => leader_object(py, l).map(|o| o.into_bound(py)),
            Step::End => Err(PyStopAsyncIteration::new_err(())),
        }
    }
}

impl Watching {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
        // Unsubscribe now, unless a step holds the feed (it ends it then).
        if let Ok(mut feed) = self.feed.try_lock() {
            *feed = Feed::Ended;
        }
    }

    async fn until_closed(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    async fn follow(&self) -> ironlock::Result<Step> {
        let mut feed = self.feed.lock().await;
        if matches!(*feed, Feed::Idle) {
            if self.core.is_closed() {
                *feed = Feed::Ended;
            } else {
                let m = self.core.clone().manager().await?;
                match m.election(self.name.clone()).observe() {
                    Ok(o) => *feed = Feed::Open(Box::new(o)),
                    Err(_) if self.core.is_closed() => *feed = Feed::Ended,
                    Err(e) => return Err(e),
                }
            }
        }
        let Feed::Open(observer) = &mut *feed else {
            return Ok(Step::End);
        };
        match observer.next().await {
            Ok(l) => Ok(Step::Next(l)),
            // The core observer ends when its manager is closed.
            Err(_) if self.core.is_closed() => {
                *feed = Feed::Ended;
                Ok(Step::End)
            }
            Err(e) => Err(e),
        }
    }

    /// The next change, or the end once the observer or its manager is closed. Cancel-safe.
    async fn step(self: Arc<Self>) -> ironlock::Result<Step> {
        let out = tokio::select! {
            biased;
            () = self.until_closed() => Ok(Step::End),
            r = self.follow() => r,
        };
        if self.is_closed()
            && let Ok(mut feed) = self.feed.try_lock()
        {
            *feed = Feed::Ended;
        }
        out
    }

    fn repr(&self, py: Python<'_>, class: &str) -> PyResult<String> {
        Ok(format!(
            "<ironlock.{class} {} closed={}>",
            py_str(py, &self.name)?,
            if self.is_closed() { "True" } else { "False" }
        ))
    }
}

/// The observer's state, unless this process is not the one that made it.
fn watching(py: Python<'_>, w: &ProcessLocal<Arc<Watching>>) -> PyResult<Arc<Watching>> {
    w.get().cloned().ok_or_else(|| {
        error::forked_with(
            py,
            format!(
                "cannot observe with this observer in process {}: it was made by process {} \
                 (inherited through fork); a child must make its own",
                runtime::pid(),
                w.pid()
            ),
        )
    })
}

/// Closes an observer; in a forked child only marks it closed (the feed is the parent's).
fn close(w: &ProcessLocal<Arc<Watching>>) {
    match w.get() {
        Some(w) => w.close(),
        None => w.any_process().closed.store(true, Ordering::Release),
    }
}

/// The changes of leader of an election, as a blocking iterator (`Election.observe()`).
#[pyclass(frozen, module = "ironlock._native")]
pub struct Observer {
    w: ProcessLocal<Arc<Watching>>,
}

impl Observer {
    pub(super) fn new(w: ProcessLocal<Arc<Watching>>) -> Observer {
        Observer { w }
    }
}

#[pymethods]
impl Observer {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let w = watching(py, &self.w)?;
        match runtime::block_on(py, w.step())? {
            Step::Next(l) => leader_object(py, l),
            Step::End => Err(PyStopIteration::new_err(())),
        }
    }

    /// Stops observing: a `next()` waiting in another thread, and every later one, raises
    /// StopIteration.
    fn close(&self) {
        close(&self.w);
    }

    /// True after `close()`.
    #[getter]
    fn closed(&self) -> bool {
        self.w.any_process().is_closed()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close();
        false
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.w.any_process().repr(py, "Observer")
    }
}

/// The changes of leader of an election, as an async iterator (`AsyncElection.observe()`).
#[pyclass(frozen, module = "ironlock._native")]
pub struct AsyncObserver {
    w: ProcessLocal<Arc<Watching>>,
}

impl AsyncObserver {
    pub(super) fn new(w: ProcessLocal<Arc<Watching>>) -> AsyncObserver {
        AsyncObserver { w }
    }
}

#[pymethods]
impl AsyncObserver {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let w = watching(py, &self.w)?;
        runtime::awaitable(py, w.step())
    }

    /// Stops observing: a step waiting in another task, and every later one, ends the
    /// iteration (StopAsyncIteration).
    fn close(&self) {
        close(&self.w);
    }

    /// True after `close()`.
    #[getter]
    fn closed(&self) -> bool {
        self.w.any_process().is_closed()
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        ready(slf.py(), slf.into_any())
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _t: Option<&Bound<'py, PyAny>>,
        _v: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.close();
        ready(py, false.into_bound_py_any(py)?)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.w.any_process().repr(py, "AsyncObserver")
    }
}
