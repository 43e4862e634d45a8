//! Held locks as Python objects: `Lock` (blocking methods) and `AsyncLock` (coroutines) over one
//! base with the read-only state, the lost flags, and the auto-extension handle.

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;
use pyo3::types::PyList;

use crate::convert;
use crate::error;
use crate::runtime::{self, ProcessLocal, lock_ignoring_poison};

/// A lock granted by the core but not yet handed to Python. If it is dropped undelivered (the
/// caller was interrupted or its asyncio task cancelled just as the grant arrived) its keys are
/// released in the background, like the core's cancelled acquire: no key is left behind.
pub(crate) struct Grant {
    lock: Option<ironlock::Lock>,
    flavor: Flavor,
}

/// Which Python class a grant becomes.
#[derive(Clone, Copy)]
pub(crate) enum Flavor {
    Blocking,
    Async,
}

impl Grant {
    pub(crate) fn new(lock: ironlock::Lock, flavor: Flavor) -> Self {
        Grant {
            lock: Some(lock),
            flavor,
        }
    }

    /// The Python object for the granted lock (consumes the grant).
    pub(crate) fn into_py_lock(mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let lock = self.lock.take().expect("a grant is delivered once");
        let base = PyClassInitializer::from(LockBase::new(lock));
        Ok(match self.flavor {
            Flavor::Blocking => Py::new(py, base.add_subclass(Lock))?.into_any(),
            Flavor::Async => Py::new(py, base.add_subclass(AsyncLock))?.into_any(),
        })
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            runtime::handle().spawn(async move {
                lock.release().await;
            });
        }
    }
}

impl<'py> IntoPyObject<'py> for Grant {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.into_py_lock(py).map(|o| o.into_bound(py))
    }
}

/// Set once the lock is lost; waited on by `LostFlag` (threads) and `AsyncLostFlag` (asyncio).
///
/// Reading it looks at the lock itself (lost, or its validity deadline passed unextended); only
/// a wait starts a runtime task that sets it the moment the core reports the lock lost. Many
/// locks kept alive at once thus cost no task and no timer each until somebody waits.
pub(crate) struct LostState {
    set: Mutex<bool>,
    cv: Condvar,
    notify: tokio::sync::Notify,
    pid: u32,
    /// The lock (none in a forked child: there it reads as the flag alone).
    lock: ProcessLocal<ironlock::Lock>,
    /// The task that sets the flag, started by the first wait.
    watching: std::sync::Once,
}

impl LostState {
    pub(crate) fn new(lock: ironlock::Lock) -> Arc<LostState> {
        Arc::new(LostState {
            set: Mutex::new(false),
            cv: Condvar::new(),
            notify: tokio::sync::Notify::new(),
            pid: runtime::pid(),
            lock: ProcessLocal::new(lock),
            watching: std::sync::Once::new(),
        })
    }

    /// Starts (once) the task that sets the flag the moment the lock is reported lost (a failed
    /// extension, or the validity deadline passing); it ends when the lock is lost or released.
    fn watch(self: &Arc<Self>) {
        self.watching.call_once(|| {
            let Some(lock) = self.lock.get().cloned() else {
                return;
            };
            let flag = Arc::clone(self);
            runtime::handle().spawn(async move {
                lock.lost().await;
                if lock.is_lost() {
                    flag.set();
                }
            });
        });
    }

    fn is_set(&self) -> bool {
        if *lock_ignoring_poison(&self.set) {
            return true;
        }
        let lost = self.lock.get().is_some_and(|lock| {
            lock.is_lost() || (!lock.is_released() && Instant::now() >= lock.deadline())
        });
        if lost {
            self.set();
        }
        lost
    }

    fn set(&self) {
        *lock_ignoring_poison(&self.set) = true;
        self.cv.notify_all();
        self.notify.notify_waiters();
    }
}

struct Held {
    lock: ProcessLocal<ironlock::Lock>,
    lost: OnceLock<Arc<LostState>>,
}

impl Held {
    /// The core lock, unless this process is not the one that acquired it.
    fn here(&self, py: Python<'_>, what: &str) -> PyResult<ironlock::Lock> {
        self.lock
            .get()
            .cloned()
            .ok_or_else(|| error::forked(py, what, self.lock.pid()))
    }

    /// Plain reads (validity, token, …) work in any process.
    fn read(&self) -> &ironlock::Lock {
        self.lock.any_process()
    }

    /// The lost flag (see [`LostState`]).
    fn lost_state(&self, py: Python<'_>) -> PyResult<Arc<LostState>> {
        if let Some(st) = self.lost.get() {
            return Ok(st.clone());
        }
        let lock = self.here(py, "watch")?;
        Ok(self.lost.get_or_init(|| LostState::new(lock)).clone())
    }
}

/// What `Lock` and `AsyncLock` share: the lock's state, readable in any process.
#[pyclass(subclass, frozen, module = "ironlock._native")]
pub struct LockBase {
    held: Arc<Held>,
}

impl LockBase {
    fn new(lock: ironlock::Lock) -> Self {
        LockBase {
            held: Arc::new(Held {
                lock: ProcessLocal::new(lock),
                lost: OnceLock::new(),
            }),
        }
    }

    fn extend_args(&self, ttl: Option<&Bound<'_, PyAny>>) -> PyResult<Duration> {
        Ok(convert::opt_duration("ttl", ttl)?.unwrap_or_else(|| self.held.read().ttl()))
    }
}

#[pymethods]
impl LockBase {
    /// True while the lock is neither lost nor released and its validity has not run out.
    #[getter]
    fn valid(&self) -> bool {
        self.held.read().is_valid()
    }

    /// Remaining validity in seconds, from the monotonic clock; 0.0 once lost or released.
    #[getter]
    fn remaining(&self) -> f64 {
        self.held.read().validity().as_secs_f64()
    }

    /// The ttl of the last acquire or extend, in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.held.read().ttl().as_secs_f64()
    }

    /// The fencing token (acquired with `fencing=True`), else None.
    #[getter]
    fn fence(&self) -> Option<u64> {
        self.held.read().fence()
    }

    /// The random token stored under every key (40 hex chars).
    #[getter]
    fn token(&self) -> String {
        self.held.read().token().to_owned()
    }

    /// The resource names, as given.
    #[getter]
    fn resources(&self) -> Vec<String> {
        self.held.read().resources().to_vec()
    }

    /// Per-node report of the last operation on this lock (a list of `NodeReport`).
    #[getter]
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        error::report_list(py, &self.held.read().report())
    }

    /// Seconds the last operation's deciding round took (the round of `report`).
    #[getter]
    fn elapsed(&self) -> f64 {
        self.held.read().report().elapsed.as_secs_f64()
    }

    /// Rounds the last operation ran (an acquire's retries count; 1 for extend and release).
    #[getter]
    fn rounds(&self) -> u32 {
        self.held.read().report().rounds
    }

    /// How many times the lock was extended.
    #[getter]
    fn extensions(&self) -> u32 {
        self.held.read().extensions()
    }

    /// True once `release()` ran.
    #[getter]
    fn released(&self) -> bool {
        self.held.read().is_released()
    }

    /// For a read-write lock (`acquire_read` / `acquire_write`): "read" or "write"; None for a
    /// lock or a semaphore permit.
    #[getter]
    fn access(&self) -> Option<&'static str> {
        self.held.read().access().map(ironlock::Access::as_str)
    }

    /// The id of the process that acquired the lock (only it may extend or release it).
    #[getter]
    fn pid(&self) -> u32 {
        self.held.lock.pid()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let me = slf.get();
        let lock = me.held.read();
        let resources = PyList::new(slf.py(), lock.resources())?.repr()?;
        let access = lock
            .access()
            .map_or_else(String::new, |a| format!(" access='{}'", a.as_str()));
        Ok(format!(
            "<ironlock.{} resources={}{} valid={} remaining={:.3}s fence={}>",
            slf.get_type().name()?,
            resources,
            access,
            if lock.is_valid() { "True" } else { "False" },
            lock.validity().as_secs_f64(),
            lock.fence()
                .map_or_else(|| "None".to_owned(), |f| f.to_string()),
        ))
    }
}

/// A held lock with blocking methods (the GIL is released while they wait).
#[pyclass(extends = LockBase, frozen, module = "ironlock._native")]
pub struct Lock;

#[pymethods]
impl Lock {
    /// Extends every key to `ttl` seconds from now (default: the current ttl) on a quorum.
    #[pyo3(signature = (ttl = None))]
    fn extend(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let base = slf.as_super();
        let ttl = base.extend_args(ttl)?;
        let lock = base.held.here(py, "extend")?;
        runtime::block_on(py, async move { lock.extend(ttl).await })
    }

    /// Deletes the keys still holding this lock's token; True when a quorum still held them.
    fn release(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<bool> {
        let lock = slf.as_super().held.here(py, "release")?;
        runtime::block_on(py, async move { Ok(lock.release().await.held) })
    }

    /// Ends a critical section: releases, and raises `LockLostError` (with the release's report)
    /// when the work did not hold the lock to its end: it was lost, its validity ran out, or
    /// fewer than a quorum of nodes still held its token at release.
    fn finish(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<()> {
        let lock = slf.as_super().held.here(py, "release")?;
        runtime::block_on(py, async move { lock.finish().await.map(drop) })
    }

    /// Keeps the lock extended in the background until the handle is stopped or dropped.
    fn keep_alive(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<KeepAlive> {
        KeepAlive::start(py, &slf.as_super().held)
    }

    /// A `threading.Event`-like flag, set the moment the lock is known lost.
    #[getter]
    fn lost(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<LostFlag> {
        Ok(LostFlag {
            st: slf.as_super().held.lost_state(py)?,
        })
    }
}

/// A held lock whose methods are coroutines (for asyncio).
#[pyclass(extends = LockBase, frozen, module = "ironlock._native")]
pub struct AsyncLock;

#[pymethods]
impl AsyncLock {
    /// Extends every key to `ttl` seconds from now (default: the current ttl) on a quorum.
    #[pyo3(signature = (ttl = None))]
    fn extend<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        ttl: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let base = slf.as_super();
        let ttl = base.extend_args(ttl)?;
        let lock = base.held.here(py, "extend")?;
        runtime::awaitable(py, async move { lock.extend(ttl).await })
    }

    /// Deletes the keys still holding this lock's token; True when a quorum still held them.
    fn release<'py>(slf: PyRef<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lock = slf.as_super().held.here(py, "release")?;
        runtime::awaitable(py, async move { Ok(lock.release().await.held) })
    }

    /// Ends a critical section: releases, and raises `LockLostError` (with the release's report)
    /// when the work did not hold the lock to its end: it was lost, its validity ran out, or
    /// fewer than a quorum of nodes still held its token at release.
    fn finish<'py>(slf: PyRef<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lock = slf.as_super().held.here(py, "release")?;
        runtime::awaitable(py, async move { lock.finish().await.map(drop) })
    }

    /// Keeps the lock extended in the background until the handle is stopped or dropped.
    fn keep_alive(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<KeepAlive> {
        KeepAlive::start(py, &slf.as_super().held)
    }

    /// An `asyncio.Event`-like flag, set the moment the lock is known lost.
    #[getter]
    fn lost(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<AsyncLostFlag> {
        Ok(AsyncLostFlag {
            st: slf.as_super().held.lost_state(py)?,
        })
    }
}

/// Set the moment the lock is lost (`threading.Event`-like: `is_set()`, `wait(timeout)`).
#[pyclass(frozen, module = "ironlock._native")]
pub struct LostFlag {
    st: Arc<LostState>,
}

impl LostFlag {
    pub(crate) fn new(st: Arc<LostState>) -> Self {
        LostFlag { st }
    }
}

#[pymethods]
impl LostFlag {
    /// True once the lock is known lost.
    fn is_set(&self) -> bool {
        self.st.is_set()
    }

    /// Blocks (GIL released, Ctrl-C honoured) until the lock is lost or `timeout` seconds pass;
    /// returns whether it is lost.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        if self.st.pid != runtime::pid() && !self.st.is_set() {
            return Err(error::forked(py, "wait on", self.st.pid));
        }
        let timeout = convert::opt_duration("timeout", timeout)?;
        if self.st.is_set() {
            return Ok(true);
        }
        self.st.watch();
        let st = self.st.clone();
        runtime::wait_interruptible(py, timeout, move |slice| {
            let set = lock_ignoring_poison(&st.set);
            if *set || slice.is_zero() {
                return *set;
            }
            let (set, _) = st
                .cv
                .wait_timeout(set, slice)
                .unwrap_or_else(|p| p.into_inner());
            *set
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<ironlock.LostFlag set={}>",
            if self.st.is_set() { "True" } else { "False" }
        )
    }
}

/// Set the moment the lock is lost (`asyncio.Event`-like: `is_set()`, `await wait()`).
#[pyclass(frozen, module = "ironlock._native")]
pub struct AsyncLostFlag {
    st: Arc<LostState>,
}

impl AsyncLostFlag {
    pub(crate) fn new(st: Arc<LostState>) -> Self {
        AsyncLostFlag { st }
    }
}

#[pymethods]
impl AsyncLostFlag {
    /// True once the lock is known lost.
    fn is_set(&self) -> bool {
        self.st.is_set()
    }

    /// Resolves to True once the lock is lost.
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.st.pid != runtime::pid() && !self.st.is_set() {
            return Err(error::forked(py, "wait on", self.st.pid));
        }
        self.st.watch();
        let st = self.st.clone();
        runtime::awaitable(py, async move {
            loop {
                let notified = st.notify.notified();
                if st.is_set() {
                    return Ok(true);
                }
                notified.await;
            }
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<ironlock.AsyncLostFlag set={}>",
            if self.st.is_set() { "True" } else { "False" }
        )
    }
}

/// Background auto-extension of one lock (extends it before its validity runs low); stops on
/// `stop()`, at the end of a `with` block, or when garbage-collected.
#[pyclass(frozen, module = "ironlock._native")]
pub struct KeepAlive {
    task: Mutex<Option<ProcessLocal<ironlock::KeepAlive>>>,
}

impl KeepAlive {
    fn start(py: Python<'_>, held: &Held) -> PyResult<KeepAlive> {
        let lock = held.here(py, "keep alive")?;
        if lock.is_released() || lock.is_lost() {
            let why = if lock.is_released() {
                "released"
            } else {
                "lost"
            };
            return Err(crate::error::to_pyerr(
                py,
                ironlock::Error::new(
                    ironlock::ErrorKind::Lost,
                    format!("keep_alive: the lock is {why}, nothing to keep alive"),
                ),
            ));
        }
        Ok(KeepAlive {
            task: Mutex::new(Some(ProcessLocal::new(lock.keep_alive()))),
        })
    }
}

#[pymethods]
impl KeepAlive {
    /// Stops extending; the lock stays held until it expires or is released.
    fn stop(&self) {
        if let Some(mut t) = lock_ignoring_poison(&self.task).take()
            && let Some(k) = t.take()
        {
            k.stop();
        }
    }

    /// True until `stop()`.
    #[getter]
    fn running(&self) -> bool {
        lock_ignoring_poison(&self.task).is_some()
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
        self.stop();
        false
    }
}
