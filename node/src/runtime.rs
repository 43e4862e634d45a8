//! The addon's Tokio runtime and the per-environment bookkeeping that keeps every Node
//! environment (the main thread and each worker thread) independent of the others.
//!
//! Node loads this addon once per process but registers it once per environment: every worker
//! thread that `require`s `ironlock` gets its own module instance, and environments start and
//! end in any order, concurrently or one after another. So:
//!
//! - One process-wide runtime ([`spawn`]), built on first use and never shut down, driven from
//!   each environment's event loop (`uv.rs`).
//!   napi-rs's own runtime is not used (the crate builds napi without its `async` feature): it
//!   is shut down whenever the last environment that loaded the addon exits and rebuilt, with
//!   napi's defaults, by the next one, which would kill the core's background work (the last
//!   deletes of a release, reconnections) with the environment and race a worker that loads the
//!   addon while another one exits.
//! - Nothing bound to an environment outlives it on that runtime: the threadsafe functions and
//!   deferred Promises that settle calls are napi's, which turn into no-ops once their
//!   environment is gone, and [`EnvScope`] (one per environment, dropped by an environment
//!   cleanup hook) closes the environment's managers and stops its waiting acquires and
//!   `waitLost` watchers when the environment exits, whether or not JS closed them.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use futures_util::FutureExt;
use ironlock::driven::{CallQueue, DrivenRuntime};
use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{Env, Result};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::panicked;

/// The runtime every core call and background task of the addon runs on: a current-thread
/// runtime that each environment's JS thread drives from its libuv loop (`uv.rs`) and a thread of
/// its own drives in between, so a call's requests are written and its replies read on the JS
/// thread, without a hand-off to another thread and back (bench/RESULTS.md). Process-wide and
/// never shut down, so it is shared by every environment and outlives each.
static RUNTIME: LazyLock<DrivenRuntime> = LazyLock::new(|| {
    // Its threads block SIGPIPE: Node ignores it, but a program that embeds Node may not. Where
    // it is ignored at start it stays so (JavaScript cannot restore the default action), and a
    // call on the JS thread skips reading the disposition.
    DrivenRuntime::for_event_loop("ironlock-rt", 2)
        .map(DrivenRuntime::host_ignores_sigpipe)
        .unwrap_or_else(|e| panic!("ironlock: cannot start the Tokio runtime: {e}"))
});

/// The addon's runtime.
pub fn runtime() -> &'static DrivenRuntime {
    &RUNTIME
}

/// Runs `fut` on the addon's runtime. Called on a JS thread, it also starts it there: the task
/// runs until it first waits (its requests are written) before this returns. Calls queued by
/// [`start`] start first, in order.
pub fn spawn<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if Handle::try_current().is_ok() || RUNTIME.reactor_fd().is_none() {
        // Inside the runtime; or no event loop watches it (not Linux), so its own thread drives
        // it all the time and takes the task from there.
        return RUNTIME.handle().spawn(fut);
    }
    RUNTIME.drive_now(|| {
        CALLS.start_queued();
        RUNTIME.handle().spawn(fut)
    })
}

/// The calls of [`start`]: counted while in flight, queued while others are.
static CALLS: CallQueue = CallQueue::new();

/// Runs a call's `fut` (acquire, release, extend) on the addon's runtime. When no other call is
/// in flight it starts at once on this thread, as [`spawn`] does (one call at a time: each is
/// written without delay). Otherwise it is queued, and every call queued meanwhile starts in the
/// next drive of the runtime (by the event loop, in the same turn): their commands to a node go
/// out in one write instead of one each, which is what many calls in flight need.
pub fn start<F>(fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let counted = CALLS.enter();
    let fut = async move {
        let _counted = counted;
        fut.await
    };
    if CALLS.alone() || Handle::try_current().is_ok() || RUNTIME.reactor_fd().is_none() {
        spawn(fut);
        return;
    }
    // Woken by the runtime's reactor, this thread's event loop drives it in its next turn.
    CALLS.queue(RUNTIME.handle(), fut);
}

/// Resolves once the flag behind `rx` is set; never when its sender is dropped unset.
pub async fn until_set(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// What one environment started on the runtime: its managers (to close them when it exits) and
/// the signal that stops its waiting tasks.
pub struct EnvScope {
    exited: watch::Sender<bool>,
    managers: Mutex<Vec<Weak<dyn Closable>>>,
}

/// A manager that can be closed from the environment cleanup hook.
pub trait Closable: Send + Sync {
    /// Stops the manager's background work (without waiting on the JS thread).
    fn close_on_exit(&self);
}

/// Live scopes by `napi_env` address. An entry is removed by the environment's cleanup hook
/// before Node frees the env, so a reused address never finds a stale scope.
static SCOPES: LazyLock<Mutex<HashMap<usize, Arc<EnvScope>>>> = LazyLock::new(Default::default);

impl EnvScope {
    /// The scope of `env`, created (with its cleanup hook) on first use in that environment.
    pub fn of(env: &Env) -> Result<Arc<EnvScope>> {
        let key = env.raw() as usize;
        let mut scopes = SCOPES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(scope) = scopes.get(&key) {
            return Ok(Arc::clone(scope));
        }
        let scope = Arc::new(EnvScope {
            exited: watch::channel(false).0,
            managers: Mutex::new(Vec::new()),
        });
        // Runs on the environment's JS thread when it is torn down (worker exit or terminate,
        // process exit), before napi finalizes the environment's objects.
        env.add_env_cleanup_hook(key, |key| {
            let scope = SCOPES
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            if let Some(scope) = scope {
                scope.exit();
            }
        })?;
        scopes.insert(key, Arc::clone(&scope));
        drop(scopes);
        crate::uv::watch(env)?;
        Ok(scope)
    }

    /// Registers a manager to close when the environment exits.
    pub fn register(&self, manager: Weak<dyn Closable>) {
        let mut managers = self.managers.lock().unwrap_or_else(|p| p.into_inner());
        managers.retain(|m| m.strong_count() > 0);
        managers.push(manager);
    }

    /// A receiver that turns `true` when the environment exits.
    pub fn exited(&self) -> watch::Receiver<bool> {
        self.exited.subscribe()
    }

    fn exit(&self) {
        self.exited.send_replace(true);
        let managers =
            std::mem::take(&mut *self.managers.lock().unwrap_or_else(|p| p.into_inner()));
        for m in managers.iter().filter_map(Weak::upgrade) {
            m.close_on_exit();
        }
    }

    /// A Promise settled by `fut`, run on the runtime. A panic rejects it with the core's
    /// INTERNAL error; when the environment exits first, `fut` is dropped (nobody is left to
    /// settle).
    pub fn promise<'env, T, F>(&self, env: &'env Env, fut: F) -> Result<Object<'env>>
    where
        T: ToNapiValue + Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let (deferred, promise) = env.create_deferred::<T, _>()?;
        let exited = self.exited();
        spawn(async move {
            let outcome = tokio::select! {
                r = AssertUnwindSafe(fut).catch_unwind() => r,
                () = until_set(exited) => return,
            };
            match outcome {
                Ok(Ok(v)) => deferred.resolve(move |_| Ok(v)),
                Ok(Err(e)) => deferred.reject(e),
                Err(p) => deferred.reject(panicked(&*p)),
            }
        });
        Ok(promise)
    }
}
