//! A runtime for bindings whose callers block: the calling thread drives it while it waits.
//!
//! A blocking call (`ironlock_acquire` in C, `LockManager.acquire` in Python) runs
//! [`DrivenRuntime::block_on`] on a current-thread tokio runtime: the caller's own thread writes
//! the requests, reads the replies and runs whatever background work is due meanwhile (late
//! replies, rollbacks, release wake-ups, auto-extension), so a call costs no hand-off to a
//! runtime thread and back. Between calls a driver thread takes over, once no call has been
//! running for [`IDLE`]: a program that calls again within that time (a loop of locks) never
//! wakes it, and one that goes quiet keeps its background work running. A call asks the
//! driver to step aside; if it is slow to, the call still progresses (the driver's I/O wakes
//! it), only less cheaply.
//!
//! SIGPIPE: a write to a connection that a node closed raises it, and its default action ends
//! the process. Rust programs, Python and Node ignore it; a C program usually does not, and the
//! sockets are written with `writev(2)`, which has no `MSG_NOSIGNAL`. So the runtime's own
//! threads block it for good ([`block_sigpipe`]), and a caller's thread blocks it while it
//! drives the runtime: a SIGPIPE raised meanwhile is taken off the thread before its signal
//! mask is restored. The write itself fails with `EPIPE`, which the connection reports as any
//! other lost connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::runtime::{Builder, Handle, Runtime};
use tokio::sync::Notify;

use crate::error::{Error, ErrorKind, Result};

/// The calls an event loop's thread starts on a [`DrivenRuntime`] it watches (asyncio, libuv):
/// a call made while no other is in flight starts at once on that thread (its requests are
/// written before the call returns), and a call made while others are in flight is queued, every
/// call queued meanwhile starting together in the runtime's next drive (the loop's next turn),
/// so that their commands to a node go out in one write instead of one each.
pub struct CallQueue {
    queued: Mutex<Vec<Pin<Box<dyn Future<Output = ()> + Send>>>>,
    in_flight: AtomicUsize,
}

impl Default for CallQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl CallQueue {
    /// An empty queue (usable in a `static`).
    pub const fn new() -> CallQueue {
        CallQueue {
            queued: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Counts a call in flight until the returned guard is dropped (keep it inside the call's
    /// future, so that it drops when the call is done or cancelled).
    pub fn enter(&'static self) -> InFlightCall {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlightCall(&self.in_flight)
    }

    /// True when the only call in flight is the one just entered: start it at once.
    pub fn alone(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 1
    }

    /// Queues `call` to start in the runtime's next drive; the first call queued since the last
    /// drive wakes the runtime (its reactor turns readable for the loop that watches it).
    pub fn queue(&'static self, runtime: &Handle, call: impl Future<Output = ()> + Send + 'static) {
        if self.push(call) {
            runtime.spawn(async move { self.start_queued() });
        }
    }

    /// Queues `call` without waking the runtime: whoever queues it sees that a drive starts it
    /// ([`start_queued`](Self::start_queued), e.g. in [`DrivenRuntime::settle`] or a callback
    /// the event loop runs in its next turn). True when it is the first call queued since the
    /// last start.
    pub fn push(&self, call: impl Future<Output = ()> + Send + 'static) -> bool {
        let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        queued.push(Box::pin(call));
        queued.len() == 1
    }

    /// Whether no call waits to start.
    pub fn is_empty(&self) -> bool {
        self.queued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Spawns the queued calls, in order. Call it inside the runtime (a drive): they run in it.
    pub fn start_queued(&self) {
        let queued = std::mem::take(&mut *self.queued.lock().unwrap_or_else(|p| p.into_inner()));
        for call in queued {
            tokio::spawn(call);
        }
    }
}

/// A call counted in flight by [`CallQueue::enter`]; uncounted when dropped.
pub struct InFlightCall(&'static AtomicUsize);

impl Drop for InFlightCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long the runtime may go undriven after the last call returned before the driver thread
/// drives it: background work waits at most about twice this long (the driver looks at the
/// clock every `IDLE` while calls run).
pub const IDLE: Duration = Duration::from_millis(2);

/// How long calls must have been running before the driver stops looking at the clock and waits
/// to be told that the last one left (see `Shared::drive`).
const LONG: Duration = Duration::from_millis(50);

/// What ended a [`DrivenRuntime::settle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// A task running in the drive called [`settled`].
    Settled,
    /// The other descriptor polls readable, a signal arrived, or the wait failed.
    Other,
    /// The timeout passed.
    Elapsed,
}

/// Ends the [`DrivenRuntime::settle`] that drives the runtime on this thread, if one does (a
/// task running in it calls this, e.g. when the call its caller awaits has finished); nothing
/// otherwise.
pub fn settled() {
    quiet::settled();
}

/// A current-thread runtime driven by its callers while they block, and by a thread of its own
/// in between (see the module).
pub struct DrivenRuntime {
    rt: Option<Arc<Runtime>>,
    shared: Arc<Shared>,
    driver: Option<std::thread::JoinHandle<()>>,
    /// Whether a call guards its thread against SIGPIPE (see the module and
    /// [`host_ignores_sigpipe`](Self::host_ignores_sigpipe)).
    guard_sigpipe: bool,
}

struct Shared {
    state: Mutex<Drive>,
    changed: Condvar,
    /// The runtime's epoll instance (Linux), or -1: see [`DrivenRuntime::reactor_fd`].
    reactor: AtomicI32,
    /// Makes the driver's `block_on` return: a caller wants to drive, or the runtime stops.
    step_aside: Notify,
}

struct Drive {
    /// Calls inside `block_on` now.
    callers: usize,
    /// When the last call left `block_on`; `None` before the first call.
    last_left: Option<Instant>,
    /// When `callers` last went from 0 to 1.
    busy_since: Instant,
    /// The driver sleeps until the last caller leaves (and tells it).
    told: bool,
    /// How long after the last call the driver takes over: [`IDLE`], or zero for a runtime
    /// driven by an event loop that cannot watch it (see [`DrivenRuntime::for_event_loop`]).
    idle: Duration,
    stop: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, Drive> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The driver thread: drives the runtime once no call has been running for [`IDLE`]. It
    /// checks the clock instead of being told: a call that ends wakes no thread (a loop of calls
    /// would otherwise pay a futex wake-up and a context switch per call), so the driver looks
    /// every [`IDLE`] while calls run and sleeps until [`IDLE`] after the last one otherwise.
    /// Only while calls have been running for [`LONG`] (an acquire that waits) does it sleep
    /// until told, by the last of them to leave.
    fn drive(&self, rt: &Runtime) {
        loop {
            let mut st = self.state();
            loop {
                if st.stop {
                    return;
                }
                st.told = false;
                let wait = match (st.callers, st.last_left) {
                    (0, None) => Duration::ZERO,
                    (0, Some(left)) => st.idle.saturating_sub(left.elapsed()),
                    _ if st.busy_since.elapsed() < LONG => IDLE,
                    _ => {
                        st.told = true;
                        st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
                        continue;
                    }
                };
                if wait.is_zero() {
                    break;
                }
                st = self
                    .changed
                    .wait_timeout(st, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            drop(st);
            rt.block_on(self.step_aside.notified());
        }
    }
}

/// One call inside `block_on`; lets the driver resume when the last one leaves (also when the
/// call panics).
struct Caller<'a>(&'a Shared);

impl<'a> Caller<'a> {
    fn enter(shared: &'a Shared) -> Self {
        let mut st = shared.state();
        if st.callers == 0 {
            st.busy_since = Instant::now();
        }
        st.callers += 1;
        drop(st);
        shared.step_aside.notify_one();
        Caller(shared)
    }
}

impl Drop for Caller<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state();
        st.callers -= 1;
        if st.callers == 0 {
            st.last_left = Some(Instant::now());
            if st.told || st.idle.is_zero() {
                self.0.changed.notify_all();
            }
        }
    }
}

impl DrivenRuntime {
    /// Starts the runtime and its driver thread (named `thread_name`, as are the runtime's
    /// blocking threads, at most `blocking_threads` of them).
    pub fn new(thread_name: &str, blocking_threads: usize) -> Result<DrivenRuntime> {
        Self::start(thread_name, blocking_threads, false)
    }

    /// As [`new`](Self::new), for an event loop that drives the runtime with
    /// [`drive_now`](Self::drive_now) whenever [`reactor_fd`](Self::reactor_fd) polls readable.
    /// Where that descriptor cannot be found, the driver thread drives whenever no call does
    /// (as a runtime thread of its own would), since nothing else would notice the replies.
    pub fn for_event_loop(thread_name: &str, blocking_threads: usize) -> Result<DrivenRuntime> {
        Self::start(thread_name, blocking_threads, true)
    }

    fn start(
        thread_name: &str,
        blocking_threads: usize,
        event_loop: bool,
    ) -> Result<DrivenRuntime> {
        let shared = Arc::new(Shared {
            state: Mutex::new(Drive {
                callers: 0,
                last_left: None,
                busy_since: Instant::now(),
                told: false,
                idle: IDLE,
                stop: false,
            }),
            changed: Condvar::new(),
            reactor: AtomicI32::new(-1),
            step_aside: Notify::new(),
        });
        // Built on the driver thread, which exits with the runtime: the thread-local state the
        // runtime sets up on the thread that builds it goes with that thread, not with the
        // caller's (a C program's main thread never exits before its leak check). Handed over
        // with a mutex and a condition variable: a channel would set up such state here too.
        type Built = Option<std::io::Result<Arc<Runtime>>>;
        let handover: Arc<(Mutex<Built>, Condvar)> = Arc::default();
        let driver = {
            let shared = shared.clone();
            let handover = handover.clone();
            let name = thread_name.to_owned();
            std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    block_sigpipe();
                    let hook = shared.clone();
                    let built = Builder::new_current_thread()
                        .max_blocking_threads(blocking_threads.max(1))
                        .on_thread_start(block_sigpipe)
                        .on_thread_park(move || quiet::on_park(&hook.reactor))
                        .thread_name(name)
                        .enable_all()
                        .build()
                        .map(Arc::new);
                    let rt = built.as_ref().ok().cloned();
                    #[cfg(target_os = "linux")]
                    if let Some(fd) = rt.as_deref().and_then(quiet::find_reactor_fd) {
                        shared.reactor.store(fd, Ordering::Release);
                    }
                    if event_loop && shared.reactor.load(Ordering::Acquire) < 0 {
                        shared.state().idle = Duration::ZERO;
                    }
                    *handover.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(built);
                    handover.1.notify_all();
                    if let Some(rt) = rt {
                        shared.drive(&rt);
                    }
                })
                .map_err(|e| {
                    Error::new(
                        ErrorKind::Internal,
                        format!("cannot start the runtime's thread: {e}"),
                    )
                })?
        };
        let built = {
            let mut slot = handover.0.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(built) = slot.take() {
                    break built;
                }
                slot = handover.1.wait(slot).unwrap_or_else(|p| p.into_inner());
            }
        };
        match built {
            Ok(rt) => Ok(DrivenRuntime {
                rt: Some(rt),
                shared,
                driver: Some(driver),
                guard_sigpipe: true,
            }),
            Err(e) => {
                let _ = driver.join();
                Err(Error::new(
                    ErrorKind::Internal,
                    format!("cannot start the runtime: {e}"),
                ))
            }
        }
    }

    /// For a host that ignores SIGPIPE for good (Node: it ignores it from the start, and
    /// JavaScript can install a handler but never restore the default action): if the process
    /// ignores SIGPIPE now, calls no longer read its disposition (a system call per call) and
    /// leave the thread's signal mask alone. Where it is not ignored now (a program embedding
    /// the host may not ignore it), calls keep guarding their thread.
    pub fn host_ignores_sigpipe(mut self) -> DrivenRuntime {
        #[cfg(unix)]
        {
            self.guard_sigpipe = !sigpipe::ignored();
        }
        self
    }

    fn rt(&self) -> &Runtime {
        self.rt.as_ref().expect("the runtime lives until drop")
    }

    /// A handle to spawn background work on.
    pub fn handle(&self) -> &Handle {
        self.rt().handle()
    }

    /// The file descriptor of the runtime's I/O reactor (its epoll instance), which polls
    /// readable whenever the runtime has I/O events to process; `None` where it could not be
    /// found (not Linux). An event loop that watches it and calls [`drive_now`](Self::drive_now)
    /// when it turns readable drives the runtime from its own thread (the Node addon does so
    /// from libuv's loop). It belongs to the runtime: never read, write or close it.
    pub fn reactor_fd(&self) -> Option<i32> {
        let fd = self.shared.reactor.load(Ordering::Acquire);
        (fd >= 0).then_some(fd)
    }

    /// Runs `start` in the runtime's context on the calling thread (tasks it spawns are queued
    /// there, not handed to another thread), then drives the runtime until nothing is ready:
    /// every task that can run has run and the reactor has no event left (see
    /// [`reactor_fd`](Self::reactor_fd); without it, until the queue is empty once). Does not
    /// wait for I/O or timers, only (briefly) for the driver thread to step aside if it was
    /// driving. Panics on a thread of a tokio runtime, as [`block_on`](Self::block_on) does.
    pub fn drive_now<R>(&self, start: impl FnOnce() -> R) -> R {
        self.block_on(async move {
            let r = start();
            quiet::Quiet::default().await;
            r
        })
    }

    /// Runs `start` in the runtime's context on the calling thread, then drives the runtime there,
    /// waiting for its I/O and for the descriptor `other` together, until a task running in this
    /// drive calls [`settled`] ([`Woken::Settled`]), `other` polls readable or a signal arrives
    /// ([`Woken::Other`]), or `timeout` passes ([`Woken::Elapsed`]); whichever comes first.
    ///
    /// For an event loop whose task awaits a call while the loop has nothing else to do: the
    /// call starts and finishes in one drive, as a blocking call's would, instead of in one drive
    /// to start it and another when the loop finds its reply. `other` is the loop's own wait
    /// descriptor, so that the loop's other work ends the wait. The wait happens where the
    /// runtime would park (its park hook), so each turn costs the runtime's own look at its
    /// reactor and nothing else; timers of the runtime that fall due meanwhile run at the end of
    /// the wait, up to `timeout` late. Where the reactor's descriptor is unknown, drives until
    /// nothing is ready and returns [`Woken::Other`]. Panics on a thread of a tokio runtime, as
    /// [`block_on`](Self::block_on) does.
    pub fn settle(&self, start: impl FnOnce(), other: i32, timeout: Duration) -> Woken {
        if self.reactor_fd().is_none() {
            self.drive_now(start);
            return Woken::Other;
        }
        let deadline = Instant::now() + timeout;
        self.block_on(async move {
            start();
            quiet::Settle::new(other, deadline).await
        })
    }

    /// Runs `future` to completion, blocking the calling thread, which drives the runtime
    /// meanwhile. Panics when called on a thread of a tokio runtime (check first: bindings
    /// refuse blocking calls there).
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        let _caller = Caller::enter(&self.shared);
        let _sigpipe = self.guard_sigpipe.then(sigpipe::Held::new);
        self.rt().block_on(future)
    }
}

impl Drop for DrivenRuntime {
    /// Waits up to a second for requests still in flight in this process (a release returns
    /// once a quorum deleted the keys), stops the driver, and joins the runtime's threads
    /// (unless dropped on one of them: then it shuts down in the background).
    fn drop(&mut self) {
        let on_runtime_thread = Handle::try_current().is_ok();
        if !on_runtime_thread {
            // Let the requests finish while the driver still drives.
            crate::drain_blocking(Duration::from_secs(1));
        }
        self.shared.state().stop = true;
        self.shared.changed.notify_all();
        self.shared.step_aside.notify_one();
        if let Some(driver) = self.driver.take()
            && driver.thread().id() != std::thread::current().id()
        {
            let _ = driver.join();
        }
        let Some(rt) = self.rt.take() else { return };
        // The driver thread has returned and dropped its clone, unless this runs on it (then
        // the runtime goes when the driver does).
        let Ok(rt) = Arc::try_unwrap(rt) else { return };
        if on_runtime_thread {
            rt.shutdown_background();
        } else {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

/// Blocks SIGPIPE on the calling thread for good: for the threads of a runtime whose sockets
/// must never end the process (see the module). A SIGPIPE raised on such a thread stays pending
/// there, harmless; a write that raised it fails with `EPIPE`.
pub fn block_sigpipe() {
    #[cfg(unix)]
    {
        let set = sigpipe::pipe_set();
        // SAFETY: an initialised set, and pthread_sigmask on the calling thread.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    }
}

/// SIGPIPE blocked on a caller's thread while it drives the runtime (see the module).
mod sigpipe {
    #[cfg(unix)]
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Set once a call found SIGPIPE not ignored (a C program): from then on every call guards
    /// its thread without reading the disposition first. Guarding where SIGPIPE is ignored is
    /// harmless, only one system call dearer; not guarding where it is not would end the
    /// process, so "ignored" is never remembered (a program may restore the default action at
    /// any time, as Python scripts piping their output do).
    #[cfg(unix)]
    static GUARD_ALWAYS: AtomicBool = AtomicBool::new(false);

    /// Blocks SIGPIPE until dropped; then takes off the thread a SIGPIPE raised meanwhile and
    /// restores the mask. Nothing to do on a thread that blocked it already (a SIGPIPE pending
    /// there is the program's own), nor in a process that ignores it. Where it was not blocked,
    /// none can have been pending before the call: it would have been delivered.
    pub(super) struct Held {
        /// The mask to restore.
        #[cfg(unix)]
        restore: Option<libc::sigset_t>,
    }

    /// The set holding SIGPIPE alone.
    #[cfg(unix)]
    pub(super) fn pipe_set() -> libc::sigset_t {
        // SAFETY: sigemptyset initialises the set; SIGPIPE is a valid signal.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            set
        }
    }

    /// Whether the process ignores SIGPIPE (then a write that would raise it just fails).
    #[cfg(unix)]
    pub(super) fn ignored() -> bool {
        // SAFETY: reads the disposition into an initialised struct.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
        }
    }

    impl Held {
        pub(super) fn new() -> Held {
            #[cfg(unix)]
            {
                if !GUARD_ALWAYS.load(Ordering::Relaxed) {
                    if ignored() {
                        // Nothing to guard against (Python ignores it): one system call
                        // instead of three per call.
                        return Held { restore: None };
                    }
                    GUARD_ALWAYS.store(true, Ordering::Relaxed);
                }
                let set = pipe_set();
                // SAFETY: initialised sets; pthread_sigmask on the calling thread.
                let old = unsafe {
                    let mut old: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut old);
                    if libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) != 0 {
                        return Held { restore: None };
                    }
                    old
                };
                // SAFETY: `old` was filled by pthread_sigmask.
                if unsafe { libc::sigismember(&old, libc::SIGPIPE) } == 1 {
                    return Held { restore: None };
                }
                Held { restore: Some(old) }
            }
            #[cfg(not(unix))]
            Held {}
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            #[cfg(unix)]
            if let Some(old) = self.restore.take() {
                let set = pipe_set();
                let now = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // Takes a SIGPIPE raised meanwhile off this thread without waiting (one system
                // call whether or not one is pending; again if a handler of another signal
                // interrupted it, so that none is left to end the process once unblocked), then
                // restores the mask read when blocking.
                for _ in 0..8 {
                    // SAFETY: an initialised set and timespec; no siginfo wanted.
                    let r = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &now) };
                    let interrupted = r == -1
                        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
                    if !interrupted {
                        break;
                    }
                }
                // SAFETY: restores the mask read when blocking, on this thread.
                unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
            }
        }
    }
}

/// [`DrivenRuntime::drive_now`]: driving until nothing is ready, without waiting.
///
/// A current-thread runtime polls its `block_on` future only after parking (a look at the
/// reactor), so the future cannot tell by itself whether the tasks woken by that look have run.
/// The park hook can: tokio calls it when the run queue is empty, right before it would block.
/// When the reactor has no event ready either (its epoll descriptor does not poll readable),
/// the hook wakes the waiting `Quiet` and the runtime returns to the caller after one more look
/// that does not block. An event that arrives between the check and that look is taken by it
/// and its task runs with the next drive (the next event, call or the driver thread).
///
/// [`DrivenRuntime::settle`] waits in the same hook: while a `Settle` is pending, the hook blocks
/// on the reactor and the caller's other descriptor together and returns as soon as the reactor
/// has events (the runtime then takes them without waiting); anything else ends the `Settle`.
mod quiet {
    use std::cell::RefCell;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};

    use super::Woken;

    thread_local! {
        /// The `Quiet` this thread waits on, and whether the park hook has found the runtime
        /// quiet for it.
        static WAITING: RefCell<Option<(Waker, bool)>> = const { RefCell::new(None) };
        /// The `Settle` this thread waits on.
        static SETTLING: RefCell<Option<Settling>> = const { RefCell::new(None) };
    }

    struct Settling {
        waker: Waker,
        other: i32,
        deadline: Instant,
        /// What ended it, once something did.
        outcome: Option<Woken>,
    }

    /// Pending until [`settled`] is called on this thread, or the park hook finds the other
    /// descriptor readable, a signal, or the deadline passed.
    pub(super) struct Settle {
        other: i32,
        deadline: Instant,
        armed: bool,
    }

    impl Settle {
        pub(super) fn new(other: i32, deadline: Instant) -> Settle {
            Settle {
                other,
                deadline,
                armed: false,
            }
        }
    }

    impl Future for Settle {
        type Output = Woken;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Woken> {
            let (other, deadline, armed) = (self.other, self.deadline, self.armed);
            let ended = SETTLING.with_borrow_mut(|s| match s {
                Some(st) if armed => {
                    if let Some(outcome) = st.outcome {
                        *s = None;
                        return Some(outcome);
                    }
                    if !st.waker.will_wake(cx.waker()) {
                        st.waker = cx.waker().clone();
                    }
                    None
                }
                _ => {
                    *s = Some(Settling {
                        waker: cx.waker().clone(),
                        other,
                        deadline,
                        outcome: None,
                    });
                    None
                }
            });
            match ended {
                Some(outcome) => {
                    self.armed = false;
                    Poll::Ready(outcome)
                }
                None => {
                    self.armed = true;
                    Poll::Pending
                }
            }
        }
    }

    impl Drop for Settle {
        fn drop(&mut self) {
            if self.armed {
                SETTLING.with_borrow_mut(|s| *s = None);
            }
        }
    }

    /// See [`super::settled`].
    pub(super) fn settled() {
        SETTLING.with_borrow_mut(|s| {
            if let Some(st) = s.as_mut()
                && st.outcome.is_none()
            {
                st.outcome = Some(Woken::Settled);
                st.waker.wake_by_ref();
            }
        });
    }

    /// The park hook's part for a pending `Settle`: true when one is (then the hook has waited
    /// for the reactor, or ended the `Settle`).
    fn settle_on_park(reactor: i32) -> bool {
        SETTLING.with_borrow_mut(|s| {
            let Some(st) = s.as_mut() else {
                return false;
            };
            if st.outcome.is_some() {
                return true;
            }
            let left = st.deadline.saturating_duration_since(Instant::now());
            let outcome = if left.is_zero() {
                Woken::Elapsed
            } else {
                match wait_either(reactor, st.other, left) {
                    // The runtime takes the events now, without blocking.
                    None => return true,
                    Some(outcome) => outcome,
                }
            };
            st.outcome = Some(outcome);
            st.waker.wake_by_ref();
            true
        })
    }

    /// Blocks until `reactor` or `other` polls readable, a signal arrives or `timeout` passes:
    /// `None` when the reactor has events, what ended the wait otherwise.
    // `c_long` is 32 bits on 32-bit targets, where the conversion can fail.
    #[allow(clippy::unnecessary_fallible_conversions)]
    fn wait_either(reactor: i32, other: i32, timeout: Duration) -> Option<Woken> {
        #[cfg(target_os = "linux")]
        {
            let mut fds = [
                libc::pollfd {
                    fd: reactor,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: other,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let wait = libc::timespec {
                tv_sec: timeout.as_secs().try_into().unwrap_or(libc::time_t::MAX),
                tv_nsec: libc::c_long::try_from(timeout.subsec_nanos()).unwrap_or(0),
            };
            // SAFETY: two initialised pollfds, a valid timespec, no signal mask change.
            let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &wait, std::ptr::null()) };
            match n {
                0 => Some(Woken::Elapsed),
                n if n > 0 && fds[0].revents & libc::POLLIN != 0 => None,
                _ => Some(Woken::Other),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (reactor, other, timeout);
            Some(Woken::Other)
        }
    }

    #[derive(Default)]
    pub(super) struct Quiet {
        armed: bool,
    }

    impl Future for Quiet {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let quiet = WAITING.with_borrow_mut(|w| {
                if self.armed && w.as_ref().is_some_and(|(_, quiet)| *quiet) {
                    *w = None;
                    return true;
                }
                *w = Some((cx.waker().clone(), false));
                false
            });
            if quiet {
                return Poll::Ready(());
            }
            self.armed = true;
            Poll::Pending
        }
    }

    impl Drop for Quiet {
        fn drop(&mut self) {
            if self.armed {
                WAITING.with_borrow_mut(|w| *w = None);
            }
        }
    }

    /// The runtime's park hook: waits for a pending `Settle` (see the module); otherwise wakes
    /// this thread's `Quiet` when the reactor has nothing ready.
    pub(super) fn on_park(reactor: &AtomicI32) {
        if settle_on_park(reactor.load(Ordering::Acquire)) {
            return;
        }
        WAITING.with_borrow_mut(|w| {
            let Some((waker, quiet)) = w.as_mut() else {
                return;
            };
            if *quiet || readable(reactor.load(Ordering::Acquire)) {
                return;
            }
            *quiet = true;
            waker.wake_by_ref();
        });
    }

    /// Whether the epoll instance `fd` has an event ready (false for -1).
    fn readable(fd: i32) -> bool {
        #[cfg(unix)]
        if fd >= 0 {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, zero timeout.
            return unsafe { libc::poll(&mut p, 1, 0) } > 0 && p.revents & libc::POLLIN != 0;
        }
        let _ = fd;
        false
    }

    /// The epoll instance of `rt`'s reactor: the one that lists a socket registered with it
    /// (`/proc/self/fdinfo` shows each epoll instance's targets).
    #[cfg(target_os = "linux")]
    pub(super) fn find_reactor_fd(rt: &tokio::runtime::Runtime) -> Option<i32> {
        use std::os::fd::AsRawFd;
        let (probe, _peer) = std::os::unix::net::UnixStream::pair().ok()?;
        probe.set_nonblocking(true).ok()?;
        let probe = {
            let _in_rt = rt.enter();
            tokio::net::UnixStream::from_std(probe).ok()?
        };
        let target = probe.as_raw_fd().to_string();
        // The probe's inode too (fdinfo's `ino:`, hexadecimal): a descriptor number alone could
        // name a stale target in another instance.
        let ino = {
            // SAFETY: fstat fills an initialised struct for a live descriptor.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(probe.as_raw_fd(), &mut st) } != 0 {
                return None;
            }
            format!("ino:{:x}", st.st_ino)
        };
        for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            let is_epoll = std::fs::read_link(entry.path())
                .is_ok_and(|l| l.as_os_str() == "anon_inode:[eventpoll]");
            if !is_epoll {
                continue;
            }
            let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
                continue;
            };
            let lists_probe = info.lines().any(|line| {
                let mut words = line.split_whitespace();
                words.next() == Some("tfd:")
                    && words.next() == Some(target.as_str())
                    && line.split_whitespace().any(|w| w == ino)
            });
            if lists_probe {
                return Some(fd);
            }
        }
        None
    }
}
