//! `LockManager` (blocking) and `AsyncLockManager` (asyncio) over one shared core.

use std::sync::{Arc, Mutex};

use ironlock::Config;
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;
use pyo3::types::{PyDict, PyList};

use crate::convert;
use crate::lock::{Flavor, Grant};
use crate::runtime::{self, ProcessLocal, lock_ignoring_poison};

/// The settings and, per process, the core manager built from them. After a `fork` the child
/// builds its own core manager (own connections on its own runtime) on first use.
pub(crate) struct Core {
    config: Config,
    current: Mutex<Option<ProcessLocal<ironlock::LockManager>>>,
    closed: std::sync::atomic::AtomicBool,
}

impl Core {
    fn cached(&self) -> Option<ironlock::LockManager> {
        lock_ignoring_poison(&self.current)
            .as_ref()
            .and_then(|m| m.get().cloned())
    }

    /// The core manager of this process.
    pub(crate) async fn manager(self: Arc<Self>) -> ironlock::Result<ironlock::LockManager> {
        if let Some(m) = self.cached() {
            return Ok(m);
        }
        let built = ironlock::LockManager::new(self.config.clone()).await?;
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            built.close();
        }
        let mut slot = lock_ignoring_poison(&self.current);
        if let Some(m) = slot.as_ref().and_then(|m| m.get()) {
            return Ok(m.clone());
        }
        *slot = Some(ProcessLocal::new(built.clone()));
        Ok(built)
    }

    /// True once `close()` ran.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(m) = self.cached() {
            m.close();
        }
    }

    fn redacted_nodes(&self) -> Vec<String> {
        self.config
            .nodes()
            .iter()
            .map(|u| ironlock::redact_url(u))
            .collect()
    }

    fn repr(&self, py: Python<'_>, class: &str) -> PyResult<String> {
        Ok(format!(
            "{class}(nodes={}, quorum={})",
            PyList::new(py, self.redacted_nodes())?.repr()?,
            ironlock::quorum(self.config.nodes().len())
        ))
    }
}

/// Builds the core from the arguments. With `connect`, connects before returning (blocking the
/// caller, GIL released); otherwise the settings are checked at once and the first operation
/// connects (an asyncio constructor must not block its running event loop).
fn build(
    py: Python<'_>,
    nodes: Option<&Bound<'_, PyAny>>,
    settings: Option<&Bound<'_, PyDict>>,
    connect: bool,
) -> PyResult<Arc<Core>> {
    let config = convert::config(py, nodes, settings)?;
    let manager = if connect {
        let config = config.clone();
        let m = runtime::block_on(py, async move { ironlock::LockManager::new(config).await })?;
        Some(ProcessLocal::new(m))
    } else {
        config.check().map_err(|e| crate::error::to_pyerr(py, e))?;
        None
    };
    Ok(Arc::new(Core {
        config,
        current: Mutex::new(manager),
        closed: std::sync::atomic::AtomicBool::new(false),
    }))
}

/// True when an asyncio event loop runs on this thread.
fn loop_running(py: Python<'_>) -> bool {
    py.import("asyncio")
        .and_then(|a| a.call_method0("get_running_loop"))
        .is_ok()
}

/// One node's holder of a resource, as a dict.
fn holders(py: Python<'_>, list: Vec<ironlock::Holder>) -> PyResult<Bound<'_, PyList>> {
    let items = list
        .into_iter()
        .map(|h| {
            let d = PyDict::new(py);
            d.set_item("url", h.url)?;
            d.set_item("token", h.token)?;
            d.set_item("ttl", h.ttl.map(|t| t.as_secs_f64()))?;
            let permits = h
                .permits
                .into_iter()
                .map(|p| {
                    let d = PyDict::new(py);
                    d.set_item("token", p.token)?;
                    d.set_item("ttl", p.ttl.as_secs_f64())?;
                    Ok(d)
                })
                .collect::<PyResult<Vec<_>>>()?;
            d.set_item("permits", permits)?;
            d.set_item("limit", h.limit)?;
            d.set_item("error", h.error)?;
            Ok(d)
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

struct AcquireCall {
    resources: Vec<String>,
    ttl: std::time::Duration,
    options: ironlock::AcquireOptions,
    what: Target,
}

/// What an acquire takes.
enum Target {
    /// The lock of every resource.
    Lock,
    /// A permit of the semaphore `resources[0]` with this limit.
    Permit(u32),
    /// One side of the read-write lock `resources[0]`.
    Rw(ironlock::Access),
}

impl AcquireCall {
    fn parse(
        resources: &Bound<'_, PyAny>,
        ttl: &Bound<'_, PyAny>,
        how: convert::How<'_, '_>,
    ) -> PyResult<Self> {
        Ok(AcquireCall {
            resources: convert::resources(resources)?,
            ttl: convert::duration("ttl", ttl)?,
            options: convert::acquire_options(how)?,
            what: Target::Lock,
        })
    }

    /// A permit of the semaphore `resource` with `limit` permits.
    fn parse_permit(
        resource: &Bound<'_, PyAny>,
        limit: &Bound<'_, PyAny>,
        ttl: &Bound<'_, PyAny>,
        how: convert::How<'_, '_>,
    ) -> PyResult<Self> {
        Ok(AcquireCall {
            resources: vec![convert::resource(resource)?],
            what: Target::Permit(convert::limit(limit)?),
            ttl: convert::duration("ttl", ttl)?,
            options: convert::acquire_options(how)?,
        })
    }

    /// The `access` side of the read-write lock `resource`.
    fn parse_rw(
        resource: &Bound<'_, PyAny>,
        access: ironlock::Access,
        ttl: &Bound<'_, PyAny>,
        how: convert::How<'_, '_>,
    ) -> PyResult<Self> {
        Ok(AcquireCall {
            resources: vec![convert::resource(resource)?],
            what: Target::Rw(access),
            ttl: convert::duration("ttl", ttl)?,
            options: convert::acquire_options(how)?,
        })
    }

    async fn run(self, core: Arc<Core>, flavor: Flavor) -> ironlock::Result<Grant> {
        let m = core.manager().await?;
        let lock = match self.what {
            Target::Permit(limit) => {
                m.semaphore(self.resources[0].as_str(), limit)
                    .acquire_with(self.ttl, self.options)
                    .await?
            }
            Target::Rw(ironlock::Access::Read) => {
                m.rw_lock(self.resources[0].as_str())
                    .read_with(self.ttl, self.options)
                    .await?
            }
            Target::Rw(ironlock::Access::Write) => {
                m.rw_lock(self.resources[0].as_str())
                    .write_with(self.ttl, self.options)
                    .await?
            }
            Target::Lock => {
                m.acquire_with(&self.resources, self.ttl, self.options)
                    .await?
            }
        };
        Ok(Grant::new(lock, flavor))
    }
}

async fn release_token(
    core: Arc<Core>,
    resources: Vec<String>,
    token: String,
) -> ironlock::Result<bool> {
    let m = core.manager().await?;
    Ok(m.release_token(&resources, &token).await?.held)
}

async fn inspect(core: Arc<Core>, resource: String) -> ironlock::Result<Vec<ironlock::Holder>> {
    core.manager().await?.inspect(&resource).await
}

/// `inspect`'s answer, converted when the awaiting task receives it.
struct Holders(Vec<ironlock::Holder>);

impl<'py> IntoPyObject<'py> for Holders {
    type Target = PyList;
    type Output = Bound<'py, PyList>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        holders(py, self.0)
    }
}

/// What both managers share: settings, connection state and the read-only properties.
#[pyclass(subclass, frozen, module = "ironlock._native")]
pub struct ManagerBase {
    core: Arc<Core>,
}

impl ManagerBase {
    fn new(
        py: Python<'_>,
        nodes: Option<&Bound<'_, PyAny>>,
        settings: Option<&Bound<'_, PyDict>>,
        connect: bool,
    ) -> PyResult<Self> {
        Ok(ManagerBase {
            core: build(py, nodes, settings, connect)?,
        })
    }
}

#[pymethods]
impl ManagerBase {
    /// Stops background tasks; later operations raise `QuorumUnavailableError`. Locks already
    /// granted are not released (release them first).
    fn close(&self) {
        self.core.close();
    }

    /// True after `close()`.
    #[getter]
    fn closed(&self) -> bool {
        self.core.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Q = floor(N / 2) + 1.
    #[getter]
    fn quorum(&self) -> usize {
        ironlock::quorum(self.core.config.nodes().len())
    }

    /// The node URLs with passwords replaced by `***`.
    #[getter]
    fn nodes(&self) -> Vec<String> {
        self.core.redacted_nodes()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        slf.get()
            .core
            .repr(slf.py(), &slf.get_type().name()?.to_string())
    }

    /// The manager's counters and latency histograms since it was created, as a dict with the
    /// same field names in every language: `granted`, `contended`, `unavailable`, `rounds`,
    /// `retries`, `wakeups`, `extensions`, `extension_failures`, `releases`, `lost`, `reseats`,
    /// `quarantines`, `reconnects`, `votes_for`, `votes_against`, `votes_error`,
    /// `votes_timeout`, `votes_not_eligible` (ints), and
    /// `acquire_latency` / `round_latency` (`{"buckets": [upper bounds in s], "counts": [...],
    /// "count": n, "sum_seconds": x}`; the last count is above the last bound). All zero before
    /// the first connection of this process. Never blocks.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stats = self
            .core
            .cached()
            .map(|m| m.stats())
            .unwrap_or_else(ironlock::Stats::zero);
        py.import("json")?.call_method1("loads", (stats.to_json(),))
    }

    /// Connects now if not yet connected (an awaitable): what `await AsyncLockManager.connect(…)`
    /// waits for. Locks are granted as soon as a quorum of nodes is connected.
    fn _connected<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let core = self.core.clone();
        runtime::awaitable(py, async move { core.manager().await.map(drop) })
    }
}

/// Takes Redlock locks over N independent Redis masters; blocking methods release the GIL.
#[pyclass(extends = ManagerBase, subclass, frozen, module = "ironlock._native")]
pub struct LockManager;

#[pymethods]
impl LockManager {
    #[new]
    #[pyo3(signature = (nodes = None, **settings))]
    fn new(
        py: Python<'_>,
        nodes: Option<&Bound<'_, PyAny>>,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        Ok(
            PyClassInitializer::from(ManagerBase::new(py, nodes, settings, true)?)
                .add_subclass(LockManager),
        )
    }

    /// Acquires `resources` (a name or a list of names) for `ttl` seconds; raises on failure.
    #[pyo3(signature = (resources, ttl, *, wait = None, fencing = None, retry_count = None, fair = None, min_hold = None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        resources: &Bound<'_, PyAny>,
        ttl: &Bound<'_, PyAny>,
        wait: Option<&Bound<'_, PyAny>>,
        fencing: Option<&Bound<'_, PyAny>>,
        retry_count: Option<&Bound<'_, PyAny>>,
        fair: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let call =
            AcquireCall::parse(resources, ttl, (wait, fencing, retry_count, fair, min_hold))?;
        let core = slf.as_super().core.clone();
        runtime::block_on(py, call.run(core, Flavor::Blocking))?.into_py_lock(py)
    }

    /// Acquires one of `limit` permits of the counting semaphore `resource` for `ttl` seconds:
    /// a Lock like any other (extend, release, keep_alive, fencing). Needs
    /// floor(limit * N / (limit + 1)) + 1 admitting nodes; raises on failure.
    #[pyo3(signature = (resource, limit, ttl, *, wait = None, fencing = None, retry_count = None, fair = None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_permit(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        limit: &Bound<'_, PyAny>,
        ttl: &Bound<'_, PyAny>,
        wait: Option<&Bound<'_, PyAny>>,
        fencing: Option<&Bound<'_, PyAny>>,
        retry_count: Option<&Bound<'_, PyAny>>,
        fair: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let call = AcquireCall::parse_permit(
            resource,
            limit,
            ttl,
            (wait, fencing, retry_count, fair, None),
        )?;
        let core = slf.as_super().core.clone();
        runtime::block_on(py, call.run(core, Flavor::Blocking))?.into_py_lock(py)
    }

    /// Acquires the read (shared) side of the read-write lock `resource` for `ttl` seconds: a
    /// Lock like any other (extend, release, keep_alive, fencing) whose `access` is "read".
    /// Readers share; a writer, a waiting writer or a plain lock of the name refuses it.
    /// `fair` waits in the lock's line (FIFO with fair writers and fair locks of the name);
    /// `min_hold` is refused (InvalidArgumentError). Raises on failure.
    #[pyo3(signature = (resource, ttl, *, wait = None, fencing = None, retry_count = None, fair = None, min_hold = None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_read(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        ttl: &Bound<'_, PyAny>,
        wait: Option<&Bound<'_, PyAny>>,
        fencing: Option<&Bound<'_, PyAny>>,
        retry_count: Option<&Bound<'_, PyAny>>,
        fair: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let how = (wait, fencing, retry_count, fair, min_hold);
        let call = AcquireCall::parse_rw(resource, ironlock::Access::Read, ttl, how)?;
        let core = slf.as_super().core.clone();
        runtime::block_on(py, call.run(core, Flavor::Blocking))?.into_py_lock(py)
    }

    /// Acquires the write (exclusive) side of the read-write lock `resource` for `ttl`
    /// seconds: a Lock whose `access` is "write". Readers, another writer or a plain lock of the
    /// name refuse it; while it waits, new readers are refused. `fair` waits in the lock's
    /// line; `min_hold` is refused (InvalidArgumentError). Raises on failure.
    #[pyo3(signature = (resource, ttl, *, wait = None, fencing = None, retry_count = None, fair = None, min_hold = None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_write(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        ttl: &Bound<'_, PyAny>,
        wait: Option<&Bound<'_, PyAny>>,
        fencing: Option<&Bound<'_, PyAny>>,
        retry_count: Option<&Bound<'_, PyAny>>,
        fair: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let how = (wait, fencing, retry_count, fair, min_hold);
        let call = AcquireCall::parse_rw(resource, ironlock::Access::Write, ttl, how)?;
        let core = slf.as_super().core.clone();
        runtime::block_on(py, call.run(core, Flavor::Blocking))?.into_py_lock(py)
    }

    /// The leader election `name`: `campaign()` waits in line until this candidate leads,
    /// `leader()` says who leads, `observe()` follows the changes. Its key is the lock key of
    /// `name` (a plain lock of the same name excludes every candidate). Raises
    /// `InvalidArgumentError` for an empty name.
    fn election(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
    ) -> PyResult<Py<crate::election::Election>> {
        crate::election::new_election(py, slf.as_super().core.clone(), name)
    }

    /// Deletes `resources` wherever they still hold `token` (a lock taken elsewhere).
    fn release_token(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        resources: &Bound<'_, PyAny>,
        token: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (resources, token) = (convert::resources(resources)?, convert::token(token)?);
        let core = slf.as_super().core.clone();
        runtime::block_on(py, release_token(core, resources, token))
    }

    /// Who holds `resource` on each node: a list of dicts (url, token, ttl, error).
    fn inspect<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        resource: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let resource = convert::resource(resource)?;
        let core = slf.as_super().core.clone();
        holders(py, runtime::block_on(py, inspect(core, resource))?)
    }
}

/// Takes Redlock locks over N independent Redis masters; methods are coroutines.
#[pyclass(extends = ManagerBase, subclass, frozen, module = "ironlock._native")]
pub struct AsyncLockManager;

#[pymethods]
impl AsyncLockManager {
    /// Inside a running event loop the constructor never blocks it: the settings are checked
    /// at once and the nodes are connected by the first operation (or `await connect(…)`).
    #[new]
    #[pyo3(signature = (nodes = None, **settings))]
    fn new(
        py: Python<'_>,
        nodes: Option<&Bound<'_, PyAny>>,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let connect = !loop_running(py);
        Ok(
            PyClassInitializer::from(ManagerBase::new(py, nodes, settings, connect)?)
                .add_subclass(AsyncLockManager),
        )
    }

    /// Acquires `resources` (a name or a list of names) for `ttl` seconds; raises on failure.
    /// Cancelling the awaiting task leaves no key behind.
    #[pyo3(signature = (resources, ttl, *, wait = None, fencing = None, retry_count = None, fair = None, min_hold = None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        resources: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
        wait: Option<&Bound<'py, PyAny>>,
        fencing: Option<&Bound<'py, PyAny>>,
        retry_count: Option<&Bound<'py, PyAny>>,
        fair: Option<&Bound<'py, PyAny>>,
        min_hold: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call =
            AcquireCall::parse(resources, ttl, (wait, fencing, retry_count, fair, min_hold))?;
        let core = slf.as_super().core.clone();
        runtime::awaitable(py, call.run(core, Flavor::Async))
    }

    /// Acquires one of `limit` permits of the counting semaphore `resource` for `ttl` seconds:
    /// an AsyncLock like any other. Cancelling the awaiting task leaves no holder behind.
    #[pyo3(signature = (resource, limit, ttl, *, wait = None, fencing = None, retry_count = None, fair = None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_permit<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        resource: &Bound<'py, PyAny>,
        limit: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
        wait: Option<&Bound<'py, PyAny>>,
        fencing: Option<&Bound<'py, PyAny>>,
        retry_count: Option<&Bound<'py, PyAny>>,
        fair: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = AcquireCall::parse_permit(
            resource,
            limit,
            ttl,
            (wait, fencing, retry_count, fair, None),
        )?;
        let core = slf.as_super().core.clone();
        runtime::awaitable(py, call.run(core, Flavor::Async))
    }

    /// Acquires the read (shared) side of the read-write lock `resource` for `ttl` seconds: an
    /// AsyncLock whose `access` is "read". Readers share; a writer, a waiting writer or a plain
    /// lock of the name refuses it. `fair` waits in the lock's line (FIFO with fair writers
    /// and fair locks of the name); `min_hold` is refused (InvalidArgumentError). Cancelling
    /// the awaiting task leaves no holder behind.
    #[pyo3(signature = (resource, ttl, *, wait = None, fencing = None, retry_count = None, fair = None, min_hold = None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_read<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        resource: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
        wait: Option<&Bound<'py, PyAny>>,
        fencing: Option<&Bound<'py, PyAny>>,
        retry_count: Option<&Bound<'py, PyAny>>,
        fair: Option<&Bound<'py, PyAny>>,
        min_hold: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let how = (wait, fencing, retry_count, fair, min_hold);
        let call = AcquireCall::parse_rw(resource, ironlock::Access::Read, ttl, how)?;
        let core = slf.as_super().core.clone();
        runtime::awaitable(py, call.run(core, Flavor::Async))
    }

    /// Acquires the write (exclusive) side of the read-write lock `resource` for `ttl`
    /// seconds: an AsyncLock whose `access` is "write". Readers, another writer or a plain lock
    /// of the name refuse it; while it waits, new readers are refused. `fair` waits in the
    /// lock's line; `min_hold` is refused (InvalidArgumentError). Cancelling the awaiting task
    /// leaves no key behind.
    #[pyo3(signature = (resource, ttl, *, wait = None, fencing = None, retry_count = None, fair = None, min_hold = None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_write<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        resource: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
        wait: Option<&Bound<'py, PyAny>>,
        fencing: Option<&Bound<'py, PyAny>>,
        retry_count: Option<&Bound<'py, PyAny>>,
        fair: Option<&Bound<'py, PyAny>>,
        min_hold: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let how = (wait, fencing, retry_count, fair, min_hold);
        let call = AcquireCall::parse_rw(resource, ironlock::Access::Write, ttl, how)?;
        let core = slf.as_super().core.clone();
        runtime::awaitable(py, call.run(core, Flavor::Async))
    }

    /// The leader election `name`, with coroutines: `await election.campaign(...)` (or
    /// `async with election.campaign(...) as me:`), `await election.leader()`, `async for
    /// leader in election.observe():`. Raises `InvalidArgumentError` for an empty name.
    fn election(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
    ) -> PyResult<Py<crate::election::AsyncElection>> {
        crate::election::new_async_election(py, slf.as_super().core.clone(), name)
    }

    /// Deletes `resources` wherever they still hold `token` (a lock taken elsewhere).
    fn release_token<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        resources: &Bound<'py, PyAny>,
        token: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (resources, token) = (convert::resources(resources)?, convert::token(token)?);
        let core = slf.as_super().core.clone();
        runtime::awaitable(py, release_token(core, resources, token))
    }

    /// Who holds `resource` on each node: a list of dicts (url, token, ttl, error).
    fn inspect<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        resource: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let resource = convert::resource(resource)?;
        let core = slf.as_super().core.clone();
        runtime::awaitable(
            py,
            async move { Ok(Holders(inspect(core, resource).await?)) },
        )
    }
}
