//! `NativeManager`: the core `LockManager` behind a JS class, and the cancellation token that
//! lets an `AbortSignal` stop a waiting acquire.

use futures_util::future::{BoxFuture, FutureExt, Shared};
use ironlock::LockManager;
use napi::bindgen_prelude::{Function, PromiseRaw, Unknown, spawn};
use napi::{Env, Result};
use napi_derive::napi;
use tokio::sync::watch;

use crate::complete::{CompleteArgs, Completer, Done};
use crate::error::{ABORTED, encode, to_napi};
use crate::lock::NativeLock;
use crate::settings::{AcquireOptions, Settings, millis};

type Connecting = Shared<BoxFuture<'static, ironlock::Result<LockManager>>>;

/// A lock manager over N Redis nodes. Construction validates synchronously and connects in the
/// background; every operation waits for the connection attempt first.
#[napi]
pub struct NativeManager {
    manager: Connecting,
    completer: Completer,
}

#[napi]
impl NativeManager {
    /// Validates `nodes` and `settings` (throwing INVALID_ARGUMENT or CONNECTION at once) and
    /// starts connecting to every node without blocking the event loop. `complete(id, error,
    /// value)` settles the calls that take an `id` (see `complete.rs`).
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "nodes: Array<string>, settings: Settings | undefined | null, complete: (id: number, error: string | null, value: unknown) => void"
    )]
    pub fn new(
        nodes: Vec<String>,
        settings: Option<Settings>,
        complete: Function<'_, CompleteArgs, Unknown<'static>>,
    ) -> Result<Self> {
        let completer = Completer::new(&complete)?;
        let config = settings.unwrap_or_default().into_config(nodes)?;
        config.check().map_err(to_napi)?;
        let manager = LockManager::new(config).boxed().shared();
        // Connecting runs as a task on the runtime, whether or not anyone awaits it yet.
        let driver = manager.clone();
        spawn(async move {
            let _ = driver.await;
        });
        Ok(NativeManager { manager, completer })
    }

    /// Acquires `resources` for `ttl_ms` and settles `id` with a `NativeLock`, or with CONTENDED
    /// / UNAVAILABLE / … or, when `cancel` fires first, ABORTED (any key already set is released
    /// in the background). Throws at once for invalid arguments.
    #[napi(catch_unwind)]
    pub fn acquire(
        &self,
        id: u32,
        resources: Vec<String>,
        ttl_ms: f64,
        options: Option<AcquireOptions>,
        cancel: Option<&CancelToken>,
    ) -> Result<()> {
        let ttl = millis("durationMs", ttl_ms)?;
        let options = options.unwrap_or_default().into_core()?;
        let cancelled = cancel.map(|c| c.tx.subscribe());
        let manager = self.manager.clone();
        let completer = self.completer.clone();
        self.completer.run(id, async move {
            let manager = manager.await.map_err(to_napi)?;
            let acquire = manager.acquire_with(&resources, ttl, options);
            let result = match cancelled {
                None => acquire.await,
                Some(rx) => tokio::select! {
                    r = acquire => r,
                    () = until_cancelled(rx) => {
                        return Err(encode(ABORTED, "the acquire was aborted", None));
                    }
                },
            };
            result
                .map(|lock| Done::Lock(NativeLock::new(lock, completer)))
                .map_err(to_napi)
        });
        Ok(())
    }

    /// Resolves once the first connection attempt to every node has finished (a node that is
    /// down does not fail it); rejects with CONNECTION when a host cannot be resolved.
    #[napi(ts_return_type = "Promise<void>", catch_unwind)]
    pub fn ready<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        let manager = self.manager.clone();
        env.spawn_future(async move { manager.await.map(|_| ()).map_err(to_napi) })
    }

    /// Stops the manager's background tasks; later operations reject with UNAVAILABLE. Locks
    /// already granted are not released.
    #[napi(ts_return_type = "Promise<void>", catch_unwind)]
    pub fn close<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        let manager = self.manager.clone();
        env.spawn_future(async move {
            if let Ok(m) = manager.await {
                m.close();
            }
            Ok(())
        })
    }
}

/// Resolves when the token is cancelled; never when it is dropped uncancelled.
async fn until_cancelled(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Cancels the acquire it was passed to (the JS layer calls `cancel()` on `abort`).
#[napi]
pub struct CancelToken {
    tx: watch::Sender<bool>,
}

#[napi]
impl CancelToken {
    /// A token that is not cancelled yet.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        CancelToken {
            tx: watch::channel(false).0,
        }
    }

    /// Cancels every acquire this token was passed to. Idempotent.
    #[napi]
    pub fn cancel(&self) {
        self.tx.send_replace(true);
    }
}
