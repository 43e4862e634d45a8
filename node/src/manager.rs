//! `NativeManager`: the core `LockManager` behind a JS class, and the cancellation token that
//! lets an `AbortSignal` stop a waiting acquire.

use std::sync::{Arc, Weak};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use ironlock::LockManager;
use napi::bindgen_prelude::{Function, Object, Unknown};
use napi::{Env, Result};
use napi_derive::napi;
use tokio::sync::watch;

use crate::complete::{CompleteArgs, Completer, Done};
use crate::error::{aborted, boundary, in_node_words, to_napi};
use crate::lock::NativeLock;
use crate::runtime::{Closable, EnvScope, spawn, until_set};
use crate::settings::{self, AcquireOptions, millis};

type Connecting = Shared<BoxFuture<'static, ironlock::Result<LockManager>>>;

/// The core manager (once connected), shared with the environment's cleanup hook.
struct Core(Connecting);

impl Closable for Core {
    /// The environment that created this manager exits: stop its background work (locks it
    /// still holds expire with their ttl).
    fn close_on_exit(&self) {
        let manager = self.0.clone();
        spawn(async move {
            if let Ok(m) = manager.await {
                m.close();
            }
        });
    }
}

/// A lock manager over N Redis nodes. Construction validates synchronously and connects in the
/// background; every operation waits for the connection attempt first.
#[napi]
pub struct NativeManager {
    core: Arc<Core>,
    scope: Arc<EnvScope>,
    completer: Completer,
    /// The node URLs with passwords replaced by `***`.
    nodes: Vec<String>,
}

/// What one node holds under a resource's key (`LockManager#inspect`).
#[napi(object)]
pub struct NodeHolder {
    /// The node's URL, password replaced by `***`.
    pub url: String,
    /// The token stored under the key, if the key exists.
    pub token: Option<String>,
    /// The key's remaining time to live in milliseconds, if it exists.
    pub ttl: Option<f64>,
    /// The permits of the semaphore of the same name on this node, longest-lived first.
    pub permits: Vec<NodePermit>,
    /// The limit that semaphore is in use with on this node, while it has holders.
    pub limit: Option<u32>,
    /// Why the node could not be asked.
    pub error: Option<String>,
}

/// One permit of a semaphore on one node.
#[napi(object)]
pub struct NodePermit {
    /// The permit's token.
    pub token: String,
    /// Milliseconds until the node drops it.
    pub ttl: f64,
}

impl From<ironlock::Holder> for NodeHolder {
    fn from(h: ironlock::Holder) -> Self {
        NodeHolder {
            url: h.url,
            token: h.token,
            ttl: h.ttl.map(|t| t.as_millis() as f64),
            permits: h
                .permits
                .into_iter()
                .map(|p| NodePermit {
                    token: p.token,
                    ttl: p.ttl.as_millis() as f64,
                })
                .collect(),
            limit: h.limit,
            error: h.error,
        }
    }
}

#[napi]
impl NativeManager {
    /// Validates `nodes` and `settings` (throwing INVALID_ARGUMENT or CONNECTION at once) and
    /// starts connecting to every node without blocking the event loop. `complete(id, error,
    /// value, report)` settles the calls that take an `id` (see `complete.rs`).
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "nodes: Array<string>, settings: Record<string, unknown> | undefined | null, complete: (id: number, error: string | null, value: unknown, report: string | undefined) => void"
    )]
    pub fn new(
        env: &Env,
        nodes: Vec<String>,
        settings: Option<Object<'_>>,
        complete: Function<'_, CompleteArgs, Unknown<'static>>,
    ) -> Result<Self> {
        boundary(|| {
            let config = settings::config(nodes, settings)?;
            config
                .check()
                .map_err(|e| to_napi(in_node_words(e, "ttl")))?;
            let nodes = config
                .nodes()
                .iter()
                .map(|u| ironlock::redact_url(u))
                .collect();
            let scope = EnvScope::of(env)?;
            let completer = Completer::new(env, &complete)?;
            let manager = LockManager::new(config).boxed().shared();
            // Connecting runs as a task on the runtime, whether or not anyone awaits it yet.
            let driver = manager.clone();
            spawn(async move {
                let _ = driver.await;
            });
            let core = Arc::new(Core(manager));
            scope.register(Arc::downgrade(&core) as Weak<dyn Closable>);
            Ok(NativeManager {
                core,
                scope,
                completer,
                nodes,
            })
        })
    }

    /// Acquires `resources` for `ttl_ms` and settles `id` with a `NativeLock`, or with CONTENDED
    /// / UNAVAILABLE / … or, when `cancel` fires first, ABORTED (any key already set is released
    /// in the background). Throws at once for invalid arguments. An acquire still waiting when
    /// the environment exits stops (with UNAVAILABLE, delivered to nobody) instead of taking a
    /// lock that nobody could release.
    #[napi(catch_unwind)]
    pub fn acquire(
        &self,
        id: u32,
        resources: Vec<String>,
        ttl_ms: f64,
        options: Option<AcquireOptions>,
        cancel: Option<&CancelToken>,
    ) -> Result<()> {
        self.start_acquire(id, resources, None, ttl_ms, options, cancel)
    }

    /// As `acquire`, for one of `limit` permits of the counting semaphore `resource`: settles
    /// `id` with a `NativeLock` (a permit), or CONTENDED when every permit is held.
    #[napi(catch_unwind)]
    pub fn acquire_permit(
        &self,
        id: u32,
        resource: String,
        limit: u32,
        ttl_ms: f64,
        options: Option<AcquireOptions>,
        cancel: Option<&CancelToken>,
    ) -> Result<()> {
        self.start_acquire(id, vec![resource], Some(limit), ttl_ms, options, cancel)
    }
}

impl NativeManager {
    fn start_acquire(
        &self,
        id: u32,
        resources: Vec<String>,
        limit: Option<u32>,
        ttl_ms: f64,
        options: Option<AcquireOptions>,
        cancel: Option<&CancelToken>,
    ) -> Result<()> {
        boundary(|| {
            let ttl = millis("durationMs", ttl_ms)?;
            let options = options.unwrap_or_default().into_core()?;
            let cancelled = cancel.map(|c| c.tx.subscribe());
            let exited = self.scope.exited();
            let manager = self.core.0.clone();
            let completer = self.completer.clone();
            let scope = Arc::clone(&self.scope);
            self.completer.run(id, async move {
                let manager = manager.await.map_err(to_napi)?;
                let semaphore = limit.map(|k| manager.semaphore(resources[0].as_str(), k));
                let acquire = async {
                    match &semaphore {
                        Some(sem) => sem.acquire_with(ttl, options).await,
                        None => manager.acquire_with(&resources, ttl, options).await,
                    }
                };
                let cancelled = async move {
                    match cancelled {
                        Some(rx) => until_set(rx).await,
                        None => std::future::pending().await,
                    }
                };
                let result = tokio::select! {
                    r = acquire => r,
                    () = cancelled => return Err(aborted()),
                    () = until_set(exited) => {
                        return Err(to_napi(ironlock::Error::new(
                            ironlock::ErrorKind::Unavailable,
                            "the JS environment that started the acquire exited",
                        )));
                    }
                };
                result
                    .map(|lock| Done::Lock(NativeLock::new(lock, completer, scope)))
                    .map_err(|e| to_napi(in_node_words(e, "durationMs")))
            });
            Ok(())
        })
    }
}

#[napi]
impl NativeManager {
    /// Resolves once the manager has started: a quorum of nodes is connected, or every node's
    /// first connection attempt has finished (a node that is down, silent or cannot be resolved
    /// does not fail it: it votes "error" until a background reconnection succeeds). Rejects
    /// with CONNECTION when fewer hosts than a quorum can be resolved.
    #[napi(ts_return_type = "Promise<void>", catch_unwind)]
    pub fn ready<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        boundary(|| {
            let manager = self.core.0.clone();
            self.scope.promise(
                env,
                async move { manager.await.map(|_| ()).map_err(to_napi) },
            )
        })
    }

    /// The node URLs, passwords replaced by `***`.
    #[napi(getter)]
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.clone()
    }

    /// Q = floor(N / 2) + 1, as the core computes it.
    #[napi(getter)]
    pub fn quorum(&self) -> u32 {
        u32::try_from(ironlock::quorum(self.nodes.len())).unwrap_or(u32::MAX)
    }

    /// Who holds `resource` on each node, in node order (the core's `inspect`). Throws
    /// INVALID_ARGUMENT at once for a bad name.
    #[napi(ts_return_type = "Promise<Array<NodeHolder>>", catch_unwind)]
    pub fn inspect<'env>(&self, env: &'env Env, resource: String) -> Result<Object<'env>> {
        boundary(|| {
            ironlock::validate_resource(&resource).map_err(to_napi)?;
            let manager = self.core.0.clone();
            self.scope.promise(env, async move {
                let m = manager.await.map_err(to_napi)?;
                let holders = m.inspect(&resource).await.map_err(to_napi)?;
                Ok(holders
                    .into_iter()
                    .map(NodeHolder::from)
                    .collect::<Vec<_>>())
            })
        })
    }

    /// Deletes `resources` on every node where they still hold `token` (a lock taken
    /// elsewhere, whose token was handed over); resolves to whether a quorum still held it.
    #[napi(ts_return_type = "Promise<boolean>", catch_unwind)]
    pub fn release_token<'env>(
        &self,
        env: &'env Env,
        resources: Vec<String>,
        token: String,
    ) -> Result<Object<'env>> {
        boundary(|| {
            ironlock::validate_resources(&resources).map_err(to_napi)?;
            let manager = self.core.0.clone();
            self.scope.promise(env, async move {
                let m = manager.await.map_err(to_napi)?;
                let released = m.release_token(&resources, &token).await;
                Ok(released.map_err(to_napi)?.held)
            })
        })
    }

    /// The core's stats snapshot as JSON (`LockManager#stats` parses it): zero until the
    /// manager has connected.
    #[napi(catch_unwind)]
    pub fn stats_json(&self) -> Result<String> {
        boundary(|| {
            let stats = match self.core.0.peek() {
                Some(Ok(m)) => m.stats(),
                _ => ironlock::Stats::zero(),
            };
            Ok(stats.to_json())
        })
    }

    /// Stops the manager's background tasks; later operations reject with UNAVAILABLE. Locks
    /// already granted are not released.
    #[napi(ts_return_type = "Promise<void>", catch_unwind)]
    pub fn close<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        boundary(|| {
            let manager = self.core.0.clone();
            self.scope.promise(env, async move {
                if let Ok(m) = manager.await {
                    m.close();
                }
                Ok(())
            })
        })
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
