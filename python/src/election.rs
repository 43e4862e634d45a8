//! Leader elections as Python objects: `Election` (blocking) and `AsyncElection` (asyncio), the
//! leaderships they grant (`Leadership`, `AsyncLeadership`), who leads (`Leader`) and the streams
//! of changes (`Observer`, `AsyncObserver`, in `observe`). Each call is one core call on the
//! process's runtime, waited on as the lock calls are (`runtime::block_on`, `runtime::awaitable`).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;
use pyo3::types::PyString;

use crate::convert;
use crate::error;
use crate::lock::{AsyncLostFlag, Flavor, LostFlag, LostState};
use crate::manager::Core;
use crate::runtime::{self, ProcessLocal, lock_ignoring_poison};

mod observe;

use self::observe::Watching;
pub use self::observe::{AsyncObserver, Observer};

/// A campaign's ttl when none is given (as `ironlock elect`'s).
const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The election's name: a str, not empty, not ending in a suffix ironlock keeps for its own keys.
fn checked_name(v: &Bound<'_, PyAny>) -> PyResult<String> {
    let name = convert::text("name", v)?;
    if let Err(e) = ironlock::validate_election_name(&name) {
        return Err(error::invalid(v.py(), e.message().to_owned()));
    }
    Ok(name)
}

fn value_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    match v {
        Some(v) if !v.is_none() => convert::text("value", v),
        _ => Ok(String::new()),
    }
}

fn py_str(py: Python<'_>, s: &str) -> PyResult<String> {
    Ok(PyString::new(py, s).repr()?.to_string())
}

/// An asyncio future of the running loop, already resolved to `value`.
fn ready<'py>(py: Python<'py>, value: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let fut = py
        .import("asyncio")?
        .call_method0("get_running_loop")?
        .call_method0("create_future")?;
    fut.call_method1("set_result", (value,))?;
    Ok(fut)
}

/// One campaign's arguments, converted before anything waits.
struct CampaignCall {
    core: Arc<Core>,
    name: String,
    value: String,
    ttl: Duration,
    wait: Option<Duration>,
}

impl CampaignCall {
    fn parse(
        base: &ElectionBase,
        value: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        Ok(CampaignCall {
            core: base.core.clone(),
            name: base.name.clone(),
            value: value_arg(value)?,
            ttl: convert::opt_duration("ttl", ttl)?.unwrap_or(DEFAULT_TTL),
            wait: convert::opt_duration("wait", wait)?,
        })
    }

    async fn run(self, flavor: Flavor) -> ironlock::Result<Granted> {
        let m = self.core.manager().await?;
        let election = m.election(self.name);
        let me = election
            .campaign_with(&self.value, self.ttl, self.wait)
            .await?;
        Ok(Granted {
            me: Some(me),
            flavor,
        })
    }
}

/// A leadership granted by the core but not yet handed to Python. Dropped undelivered (the
/// caller was interrupted, or its asyncio task cancelled, just as it was granted) it resigns in
/// the background, so the next candidate in line is not held up for a ttl.
struct Granted {
    me: Option<ironlock::Leadership>,
    flavor: Flavor,
}

impl Granted {
    fn into_py_leadership(mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let me = self.me.take().expect("a leadership is delivered once");
        let base = PyClassInitializer::from(LeadershipBase {
            held: Arc::new(Held {
                me: ProcessLocal::new(Arc::new(me)),
                lost: OnceLock::new(),
            }),
        });
        Ok(match self.flavor {
            Flavor::Blocking => Py::new(py, base.add_subclass(Leadership))?.into_any(),
            Flavor::Async => Py::new(py, base.add_subclass(AsyncLeadership))?.into_any(),
        })
    }
}

impl Drop for Granted {
    fn drop(&mut self) {
        if let Some(me) = self.me.take() {
            runtime::handle().spawn(async move {
                me.resign().await;
            });
        }
    }
}

impl<'py> IntoPyObject<'py> for Granted {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.into_py_leadership(py).map(|o| o.into_bound(py))
    }
}

/// Who leads, as the core read it.
fn leader_object(py: Python<'_>, l: Option<ironlock::Leader>) -> PyResult<Py<PyAny>> {
    match l {
        None => Ok(py.None()),
        Some(l) => Ok(Py::new(py, Leader::from(l))?.into_any()),
    }
}

/// `leader()`'s answer, converted when the awaiting task receives it.
struct Current(Option<ironlock::Leader>);

impl<'py> IntoPyObject<'py> for Current {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        leader_object(py, self.0).map(|o| o.into_bound(py))
    }
}

async fn read_leader(core: Arc<Core>, name: String) -> ironlock::Result<Option<ironlock::Leader>> {
    core.manager().await?.election(name).leader().await
}

/// What `Election` and `AsyncElection` share: the manager and the election's name.
#[pyclass(subclass, frozen, module = "ironlock._native")]
pub struct ElectionBase {
    core: Arc<Core>,
    name: String,
}

impl ElectionBase {
    fn observer(&self) -> ProcessLocal<Arc<Watching>> {
        ProcessLocal::new(Watching::new(self.core.clone(), self.name.clone()))
    }
}

/// `manager.election(name)` for the blocking manager.
pub(crate) fn new_election(
    py: Python<'_>,
    core: Arc<Core>,
    name: &Bound<'_, PyAny>,
) -> PyResult<Py<Election>> {
    let base = ElectionBase {
        core,
        name: checked_name(name)?,
    };
    Py::new(py, PyClassInitializer::from(base).add_subclass(Election))
}

/// `manager.election(name)` for the asyncio manager.
pub(crate) fn new_async_election(
    py: Python<'_>,
    core: Arc<Core>,
    name: &Bound<'_, PyAny>,
) -> PyResult<Py<AsyncElection>> {
    let base = ElectionBase {
        core,
        name: checked_name(name)?,
    };
    Py::new(
        py,
        PyClassInitializer::from(base).add_subclass(AsyncElection),
    )
}

#[pymethods]
impl ElectionBase {
    /// The election's name, as given. Its key is the lock key of that name: a plain lock of the
    /// same name excludes every candidate.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        Ok(format!(
            "<ironlock.{} {}>",
            slf.get_type().name()?,
            py_str(slf.py(), &slf.get().name)?
        ))
    }
}

/// A leader election with blocking methods (the GIL is released while they wait).
#[pyclass(extends = ElectionBase, frozen, module = "ironlock._native")]
pub struct Election;

#[pymethods]
impl Election {
    /// Waits in line until this candidate leads, then returns its `Leadership`, kept extended
    /// in the background until it is resigned or lost. Candidates lead in the order they
    /// queued; a candidate is told it leads only once a majority of nodes granted it, with
    /// `value` (what it advertises: its address, say; at most 64 KiB) and its term written on
    /// them. `ttl` (seconds, default 30) bounds how long the election stays with a leader that
    /// died without resigning. `wait` (seconds) gives up with `LockContendedError` after that
    /// long; without it, waits as long as it takes (Ctrl-C interrupts it). A campaign that gives
    /// up or is interrupted leaves the line on every node. `with election.campaign(...) as me:`
    /// resigns when the block ends.
    #[pyo3(
        signature = (value = None, ttl = None, *, wait = None),
        text_signature = "($self, value='', ttl=30.0, *, wait=None)"
    )]
    fn campaign(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        value: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let call = CampaignCall::parse(slf.as_super(), value, ttl, wait)?;
        runtime::block_on(py, call.run(Flavor::Blocking))?.into_py_leadership(py)
    }

    /// Who leads now (a `Leader`: value, term, token, validity), or None when nobody does, read
    /// from every node: the leader a majority of them hold. Raises `QuorumUnavailableError`
    /// when fewer than a majority answer.
    fn leader(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let base = slf.as_super();
        let (core, name) = (base.core.clone(), base.name.clone());
        leader_object(py, runtime::block_on(py, read_leader(core, name))?)
    }

    /// An iterator over the changes of leader, in order: each `next()` blocks (GIL released,
    /// Ctrl-C honoured) until the leader differs from the last one yielded, and yields the new
    /// `Leader`, or None when nobody leads; the first yields who leads now. Terms only grow
    /// from one leader to the next. A change undone before it could be read (a candidate that
    /// led and resigned at once) may be skipped. The iteration ends (StopIteration) once the
    /// manager is closed or the observer is (`close()`, or leaving `with election.observe() as
    /// changes:`).
    fn observe(slf: PyRef<'_, Self>) -> Observer {
        Observer::new(slf.as_super().observer())
    }
}

/// A leader election whose methods are coroutines (for asyncio).
#[pyclass(extends = ElectionBase, frozen, module = "ironlock._native")]
pub struct AsyncElection;

#[pymethods]
impl AsyncElection {
    /// `await election.campaign(...)` waits in line until this candidate leads and gives its
    /// `AsyncLeadership`; `async with election.campaign(...) as me:` does the same and resigns
    /// when the block ends. Candidates lead in the order they queued; a candidate is told it
    /// leads only once a majority of nodes granted it. `value` is what it advertises (at most
    /// 64 KiB), `ttl` (seconds, default 30) how long the election stays with a leader that died
    /// without resigning, `wait` (seconds) how long to wait before giving up with
    /// `LockContendedError` (default: as long as it takes). Cancelling the awaiting task takes
    /// the candidate out of line on every node.
    #[pyo3(
        signature = (value = None, ttl = None, *, wait = None),
        text_signature = "($self, value='', ttl=30.0, *, wait=None)"
    )]
    fn campaign(
        slf: PyRef<'_, Self>,
        value: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AsyncCampaign> {
        let call = CampaignCall::parse(slf.as_super(), value, ttl, wait)?;
        Ok(AsyncCampaign {
            call: Mutex::new(Some(call)),
            started: Mutex::new(None),
        })
    }

    /// Who leads now (a `Leader`), or None when nobody does, read from every node (see
    /// `Election.leader`).
    fn leader<'py>(slf: PyRef<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let base = slf.as_super();
        let (core, name) = (base.core.clone(), base.name.clone());
        runtime::awaitable(
            py,
            async move { Ok(Current(read_leader(core, name).await?)) },
        )
    }

    /// An async iterator over the changes of leader, in order (`async for leader in
    /// election.observe():`): each step waits until the leader differs from the last one
    /// yielded and yields the new `Leader`, or None when nobody leads; the first yields who
    /// leads now. Terms only grow from one leader to the next. It ends once the manager is
    /// closed or the observer is (`close()`, or leaving `async with election.observe() as
    /// changes:`).
    fn observe(slf: PyRef<'_, Self>) -> AsyncObserver {
        AsyncObserver::new(slf.as_super().observer())
    }
}

/// `AsyncElection.campaign(...)`: awaitable (the `AsyncLeadership`), or an async context
/// manager that resigns on exit. The campaign starts when first awaited.
#[pyclass(frozen, module = "ironlock._native")]
pub struct AsyncCampaign {
    call: Mutex<Option<CampaignCall>>,
    started: Mutex<Option<Py<PyAny>>>,
}

impl AsyncCampaign {
    /// The asyncio future of the campaign, started on first use.
    fn start<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(fut) = lock_ignoring_poison(&self.started).as_ref() {
            return Ok(fut.bind(py).clone());
        }
        let call = lock_ignoring_poison(&self.call)
            .take()
            .expect("a campaign not started has its call");
        let fut = runtime::awaitable(py, call.run(Flavor::Async))?;
        *lock_ignoring_poison(&self.started) = Some(fut.clone().unbind());
        Ok(fut)
    }
}

#[pymethods]
impl AsyncCampaign {
    fn __await__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.start(py)?.call_method0("__await__")
    }

    fn __aenter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.start(py)
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _t: Option<&Bound<'py, PyAny>>,
        _v: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let fut = lock_ignoring_poison(&self.started)
            .as_ref()
            .map(|f| f.bind(py).clone());
        if let Some(fut) = fut
            && fut.call_method0("done")?.is_truthy()?
            && !fut.call_method0("cancelled")?.is_truthy()?
            && fut.call_method0("exception")?.is_none()
        {
            let me = fut.call_method0("result")?;
            let me = me.cast::<AsyncLeadership>()?;
            return resign_on_exit(py, &me.as_super().get().held);
        }
        ready(py, false.into_bound_py_any(py)?)
    }
}

/// The end of an `async with`: resigns (unless done already), shielded from the task's
/// cancellation; resolves to False (the block's exception, if any, propagates).
fn resign_on_exit<'py>(py: Python<'py>, held: &Held) -> PyResult<Bound<'py, PyAny>> {
    if held.read().lock().is_released() {
        return ready(py, false.into_bound_py_any(py)?);
    }
    let me = held.here(py, "resign")?;
    let resign = runtime::awaitable(py, async move {
        me.resign().await;
        Ok(false)
    })?;
    py.import("asyncio")?.call_method1("shield", (resign,))
}

/// One granted leadership; only the process that campaigned may proclaim or resign.
struct Held {
    me: ProcessLocal<Arc<ironlock::Leadership>>,
    lost: OnceLock<Arc<LostState>>,
}

impl Held {
    fn here(&self, py: Python<'_>, what: &str) -> PyResult<Arc<ironlock::Leadership>> {
        self.me.get().cloned().ok_or_else(|| {
            error::forked_with(
                py,
                format!(
                    "cannot {what} this leadership in process {}: it was granted to process {} \
                     (inherited through fork); a child must campaign itself",
                    runtime::pid(),
                    self.me.pid()
                ),
            )
        })
    }

    fn read(&self) -> &ironlock::Leadership {
        self.me.any_process()
    }

    fn lost_state(&self, py: Python<'_>) -> PyResult<Arc<LostState>> {
        if let Some(st) = self.lost.get() {
            return Ok(st.clone());
        }
        let me = self.here(py, "watch")?;
        Ok(self
            .lost
            .get_or_init(|| LostState::new(me.lock().clone()))
            .clone())
    }
}

/// What `Leadership` and `AsyncLeadership` share: the leadership's state, readable in any
/// process.
#[pyclass(subclass, frozen, module = "ironlock._native")]
pub struct LeadershipBase {
    held: Arc<Held>,
}

#[pymethods]
impl LeadershipBase {
    /// The election's name.
    #[getter]
    fn name(&self) -> String {
        self.held
            .read()
            .lock()
            .resources()
            .first()
            .cloned()
            .unwrap_or_default()
    }

    /// The term: the fencing token of this leadership's grant, larger than every earlier
    /// leader's. Pass it to what the leader writes to, so that a deposed leader's late writes
    /// (carrying a smaller term) can be refused.
    #[getter]
    fn term(&self) -> u64 {
        self.held.read().term()
    }

    /// The value this leader advertises, as last proclaimed.
    #[getter]
    fn value(&self) -> String {
        self.held.read().value()
    }

    /// The leadership's token (the token stored under the election's key).
    #[getter]
    fn token(&self) -> String {
        self.held.read().lock().token().to_owned()
    }

    /// Seconds this leadership is still valid, from the monotonic clock; 0.0 once lost or
    /// resigned. It ends a tenth of the ttl (at most a second) before the nodes' keys expire,
    /// so that a leader hears of its loss before another candidate can lead.
    #[getter]
    fn validity(&self) -> f64 {
        self.held.read().validity().as_secs_f64()
    }

    /// The ttl the leadership is extended by, in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.held.read().lock().ttl().as_secs_f64()
    }

    /// True while this candidate leads: not lost, not resigned, its validity not run out.
    #[getter]
    fn is_leader(&self) -> bool {
        self.held.read().is_leader()
    }

    /// True once the leadership is known lost (its extensions stopped reaching a majority, or
    /// its validity ran out): stop acting as the leader.
    #[getter]
    fn is_lost(&self) -> bool {
        self.held.read().is_lost()
    }

    /// True once `resign()` ran (or the leadership, lost, was released).
    #[getter]
    fn resigned(&self) -> bool {
        self.held.read().lock().is_released()
    }

    /// The id of the process that campaigned (only it may proclaim or resign).
    #[getter]
    fn pid(&self) -> u32 {
        self.held.me.pid()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let me = slf.get().held.read();
        let name = me.lock().resources().first().cloned().unwrap_or_default();
        Ok(format!(
            "<ironlock.{} election={} term={} value={} leader={} validity={:.3}s>",
            slf.get_type().name()?,
            py_str(slf.py(), &name)?,
            me.term(),
            py_str(slf.py(), &me.value())?,
            if me.is_leader() { "True" } else { "False" },
            me.validity().as_secs_f64(),
        ))
    }
}

/// A leadership with blocking methods (the GIL is released while they wait).
#[pyclass(extends = LeadershipBase, frozen, module = "ironlock._native")]
pub struct Leadership;

#[pymethods]
impl Leadership {
    /// Advertises `value` instead (`leader()` and observers see it), only while still leader:
    /// raises `LockLostError` once the leadership is lost or resigned, or when a majority no
    /// longer holds it; `QuorumUnavailableError` when too few nodes answered.
    fn proclaim(slf: PyRef<'_, Self>, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let value = convert::text("value", value)?;
        let me = slf.as_super().held.here(py, "proclaim")?;
        runtime::block_on(py, async move { me.proclaim(&value).await })
    }

    /// Steps down: stops the extensions and deletes the election's key and leader record on
    /// every node, waking the next candidate in line. True when a majority still held this
    /// leadership (it had not been lost).
    fn resign(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<bool> {
        let me = slf.as_super().held.here(py, "resign")?;
        runtime::block_on(py, async move { Ok(me.resign().await.held) })
    }

    /// A `threading.Event`-like flag (`is_set()`, `wait(timeout)`), set the moment the
    /// leadership is known lost: a tenth of its ttl (at most a second) before its validity
    /// would end, so before another candidate can be granted the election.
    #[getter]
    fn lost(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<LostFlag> {
        Ok(LostFlag::new(slf.as_super().held.lost_state(py)?))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let held = &slf.as_super().held;
        if !held.read().lock().is_released() {
            let me = held.here(py, "resign")?;
            runtime::block_on(py, async move { Ok(me.resign().await) })?;
        }
        Ok(false)
    }
}

/// A leadership whose methods are coroutines (for asyncio).
#[pyclass(extends = LeadershipBase, frozen, module = "ironlock._native")]
pub struct AsyncLeadership;

#[pymethods]
impl AsyncLeadership {
    /// Advertises `value` instead, only while still leader (see `Leadership.proclaim`).
    fn proclaim<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let value = convert::text("value", value)?;
        let me = slf.as_super().held.here(py, "proclaim")?;
        runtime::awaitable(py, async move { me.proclaim(&value).await })
    }

    /// Steps down and wakes the next candidate in line (see `Leadership.resign`); resolves to
    /// True when a majority still held this leadership.
    fn resign<'py>(slf: PyRef<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.as_super().held.here(py, "resign")?;
        runtime::awaitable(py, async move { Ok(me.resign().await.held) })
    }

    /// An `asyncio.Event`-like flag (`is_set()`, `await wait()`), set the moment the
    /// leadership is known lost: a tenth of its ttl (at most a second) before its validity
    /// would end, so before another candidate can be granted the election.
    #[getter]
    fn lost(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<AsyncLostFlag> {
        Ok(AsyncLostFlag::new(slf.as_super().held.lost_state(py)?))
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        ready(slf.py(), slf.into_any())
    }

    fn __aexit__<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        _t: Option<&Bound<'py, PyAny>>,
        _v: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        resign_on_exit(py, &slf.as_super().held)
    }
}

/// Who leads an election: an immutable snapshot from a majority read.
#[pyclass(frozen, module = "ironlock._native")]
pub struct Leader {
    value: String,
    term: u64,
    token: String,
    validity: f64,
}

impl From<ironlock::Leader> for Leader {
    fn from(l: ironlock::Leader) -> Self {
        Leader {
            value: l.value,
            term: l.term,
            token: l.token,
            validity: l.validity.as_secs_f64(),
        }
    }
}

#[pymethods]
impl Leader {
    /// The value the leader advertises, as last proclaimed.
    #[getter]
    fn value(&self) -> &str {
        &self.value
    }

    /// The leader's term (its grant's fencing token); every later leader's is larger.
    #[getter]
    fn term(&self) -> u64 {
        self.term
    }

    /// The leader's token (`Leadership.token` of the candidate that leads).
    #[getter]
    fn token(&self) -> &str {
        &self.token
    }

    /// Seconds the leadership stayed valid at most, as the nodes holding it saw it when read.
    #[getter]
    fn validity(&self) -> f64 {
        self.validity
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Leader(value={}, term={}, token={}, validity={:.3})",
            py_str(py, &self.value)?,
            self.term,
            py_str(py, &self.token)?,
            self.validity
        ))
    }
}
