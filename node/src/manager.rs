//! `NativeManager`: the core `LockManager` behind a JS class, and the cancellation token that
//! lets an `AbortSignal` stop a waiting acquire.

use std::future::Future;
use std::sync::{Arc, Mutex, Weak};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use ironlock::LockManager;
use napi::bindgen_prelude::{Function, Object, ObjectFinalize, Unknown};
use napi::{Env, Result};
use napi_derive::napi;
use tokio::sync::watch;

use crate::complete::{CompleteArgs, Completer, Done};
use crate::election::NativeElection;
use crate::error::{aborted, boundary, in_call_words, in_node_words, invalid, to_napi};
use crate::lock::NativeLock;
use crate::runtime::{Closable, EnvScope, spawn, until_set};
use crate::settings::{self, AcquireOptions, millis};

pub(crate) type Connecting = Shared<BoxFuture<'static, ironlock::Result<LockManager>>>;

/// The core manager (once connected), shared with the environment's cleanup hook. `close()`
/// takes it out, so that its nodes, buffers and stats are freed at once rather than when V8
/// collects the JS object (which, for a small object, can be thousands of managers later); the
/// stats it had are kept for `stats()`.
pub(crate) struct Core {
    /// The manager and the function that settles its calls; both dropped by `close()`.
    manager: Mutex<Option<(Connecting, Completer)>>,
    last_stats: Mutex<Option<ironlock::Stats>>,
    /// Turns `true` when `close()` takes the manager out (what ends an election's observers).
    closed: watch::Sender<bool>,
}

impl Core {
    /// The manager, or UNAVAILABLE once it was closed.
    pub(crate) fn get(&self) -> Result<Connecting> {
        Ok(self.with_completer()?.0)
    }

    /// A receiver that turns `true` once the manager is closed.
    pub(crate) fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// The manager and its completion function, or UNAVAILABLE once it was closed.
    pub(crate) fn with_completer(&self) -> Result<(Connecting, Completer)> {
        lock(&self.manager).clone().ok_or_else(|| {
            to_napi(ironlock::Error::new(
                ironlock::ErrorKind::Unavailable,
                "the lock manager is closed",
            ))
        })
    }

    /// Takes the manager out (None when it was already closed), keeping its stats.
    fn take(&self) -> Option<Connecting> {
        let (taken, _completer) = lock(&self.manager).take()?;
        self.closed.send_replace(true);
        if let Some(Ok(m)) = taken.peek() {
            *lock(&self.last_stats) = Some(m.stats());
        }
        Some(taken)
    }

    fn stats(&self) -> ironlock::Stats {
        if let Some((connecting, _)) = lock(&self.manager).as_ref()
            && let Some(Ok(m)) = connecting.peek()
        {
            return m.stats();
        }
        lock(&self.last_stats)
            .clone()
            .unwrap_or_else(ironlock::Stats::zero)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Closes `connecting`'s manager once it has connected (a manager still connecting is closed
/// when it gets there).
async fn close_when_connected(connecting: Connecting) {
    if let Ok(m) = connecting.await {
        m.close();
    }
}

impl Closable for Core {
    /// The environment that created this manager exits: stop its background work (locks it
    /// still holds expire with their ttl).
    fn close_on_exit(&self) {
        if let Some(connecting) = self.take() {
            spawn(close_when_connected(connecting));
        }
    }
}

/// What V8 is told a manager costs in native memory (its nodes' state, connections and
/// buffers: about 8 KiB plus 8 KiB per node, measured with connections open), so that managers
/// dropped without `close()` are collected at a pace that bounds the memory they hold.
fn native_size(nodes: usize) -> i64 {
    8192 * (1 + i64::try_from(nodes).unwrap_or(i64::MAX / 16_384))
}

/// A lock manager over N Redis nodes. Construction validates synchronously and connects in the
/// background; every operation waits for the connection attempt first.
#[napi(custom_finalize)]
pub struct NativeManager {
    core: Arc<Core>,
    /// The bytes reported to V8 with `adjust_external_memory`, given back when finalized.
    external: i64,
    scope: Arc<EnvScope>,
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
            let nodes: Vec<String> = config
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
            let core = Arc::new(Core {
                manager: Mutex::new(Some((manager, completer))),
                last_stats: Mutex::new(None),
                closed: watch::channel(false).0,
            });
            scope.register(Arc::downgrade(&core) as Weak<dyn Closable>);
            // Only a hint to V8's collector: a manager is never refused for it.
            let size = native_size(nodes.len());
            let external = if env.adjust_external_memory(size).is_ok() {
                size
            } else {
                0
            };
            Ok(NativeManager {
                core,
                external,
                scope,
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
    ) -> Result<bool> {
        self.start_acquire(id, resources, None, ttl_ms, options, cancel)
    }

    /// As `acquire`, for the one resource `resource` (no array to read: the JS layer calls it
    /// for a single resource, the common case).
    #[napi(catch_unwind)]
    pub fn acquire_one(
        &self,
        id: u32,
        resource: String,
        ttl_ms: f64,
        options: Option<AcquireOptions>,
        cancel: Option<&CancelToken>,
    ) -> Result<bool> {
        self.start_acquire(id, vec![resource], None, ttl_ms, options, cancel)
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
    ) -> Result<bool> {
        self.start_acquire(
            id,
            vec![resource],
            Some(Side::Permit(limit)),
            ttl_ms,
            options,
            cancel,
        )
    }

    /// As `acquire`, for the `access` side (`"read"` or `"write"`) of the read-write lock
    /// `resource`: settles `id` with a `NativeLock` (its `access` says which side), or
    /// CONTENDED while the other side (or a plain lock of the name) holds it.
    #[napi(
        catch_unwind,
        ts_args_type = "id: number, resource: string, access: 'read' | 'write', ttlMs: number, options?: AcquireOptions | undefined | null, cancel?: CancelToken | undefined | null"
    )]
    pub fn acquire_rw(
        &self,
        id: u32,
        resource: String,
        access: String,
        ttl_ms: f64,
        options: Option<AcquireOptions>,
        cancel: Option<&CancelToken>,
    ) -> Result<bool> {
        let side = match access.as_str() {
            "read" => Side::Rw(ironlock::Access::Read),
            "write" => Side::Rw(ironlock::Access::Write),
            other => {
                return Err(invalid(format!(
                    "access: expected \"read\" or \"write\", got {:?}",
                    ironlock::cut(other)
                )));
            }
        };
        self.start_acquire(id, vec![resource], Some(side), ttl_ms, options, cancel)
    }
}

/// What an acquire of a single resource takes instead of the plain lock.
#[derive(Clone, Copy)]
enum Side {
    /// One of `limit` permits of the counting semaphore.
    Permit(u32),
    /// One side of the read-write lock.
    Rw(ironlock::Access),
}

/// Runs `work` (an acquire or a campaign, named `what`) until it finishes, `cancelled` fires
/// (ABORTED; `work` is dropped, which takes back whatever it set on the nodes) or the JS
/// environment exits (UNAVAILABLE, delivered to nobody: nothing is left to use a grant).
pub(crate) async fn unless_cancelled<T>(
    work: impl Future<Output = ironlock::Result<T>>,
    cancelled: Option<watch::Receiver<bool>>,
    exited: watch::Receiver<bool>,
    what: &str,
) -> Result<ironlock::Result<T>> {
    let cancelled = async move {
        match cancelled {
            Some(rx) => until_set(rx).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = work => Ok(r),
        () = cancelled => Err(aborted()),
        () = until_set(exited) => Err(to_napi(ironlock::Error::new(
            ironlock::ErrorKind::Unavailable,
            format!("the JS environment that started the {what} exited"),
        ))),
    }
}

impl NativeManager {
    fn start_acquire(
        &self,
        id: u32,
        resources: Vec<String>,
        side: Option<Side>,
        ttl_ms: f64,
        options: Option<AcquireOptions>,
        cancel: Option<&CancelToken>,
    ) -> Result<bool> {
        boundary(|| {
            let ttl = millis("durationMs", ttl_ms)?;
            let options = options.unwrap_or_default().into_core()?;
            let cancelled = cancel.map(CancelToken::subscribe);
            let exited = self.scope.exited();
            let (manager, completer) = self.core.with_completer()?;
            let scope = Arc::clone(&self.scope);
            let stashed = completer.clone().run(id, async move {
                let manager = manager.await.map_err(to_napi)?;
                let acquire = async {
                    match side {
                        None => manager.acquire_with(&resources, ttl, options).await,
                        Some(Side::Permit(limit)) => {
                            let sem = manager.semaphore(resources[0].as_str(), limit);
                            sem.acquire_with(ttl, options).await
                        }
                        Some(Side::Rw(access)) => {
                            let rw = manager.rw_lock(resources[0].as_str());
                            match access {
                                ironlock::Access::Read => rw.read_with(ttl, options).await,
                                ironlock::Access::Write => rw.write_with(ttl, options).await,
                            }
                        }
                    }
                };
                unless_cancelled(acquire, cancelled, exited, "acquire")
                    .await?
                    .map(|lock| Done::Lock(NativeLock::new(lock, completer, scope)))
                    .map_err(|e| to_napi(in_call_words(e, "durationMs")))
            });
            Ok(stashed)
        })
    }
}

#[napi]
impl NativeManager {
    /// Resolves once the manager has started: a quorum of nodes is connected, or every node's
    /// first connection attempt has finished (a node that is down, silent or cannot be resolved
    /// does not fail it: it votes "error" until a background reconnection succeeds). Rejects
    /// with CONNECTION when fewer hosts than a quorum can be resolved.
    /// With `requireQuorum`, it then rejects with CONNECTION, naming each node that is not
    /// connected and why, when fewer than a quorum are (`LockManager.connect`).
    #[napi(ts_return_type = "Promise<void>", catch_unwind)]
    pub fn ready<'env>(
        &self,
        env: &'env Env,
        require_quorum: Option<bool>,
    ) -> Result<Object<'env>> {
        boundary(|| {
            // A closed manager had started (or never will): nothing to wait for.
            let manager = self.core.get().ok();
            self.scope.promise(env, async move {
                let Some(connecting) = manager else {
                    return Ok(());
                };
                let m = connecting.await.map_err(to_napi)?;
                if require_quorum == Some(true) {
                    m.require_connected_quorum().map_err(to_napi)?;
                }
                Ok(())
            })
        })
    }

    /// The leader election `name` of this manager's nodes. Throws INVALID_ARGUMENT at once for
    /// a bad name (`name: …`).
    #[napi(catch_unwind)]
    pub fn election(&self, name: String) -> Result<NativeElection> {
        boundary(|| NativeElection::new(Arc::clone(&self.core), Arc::clone(&self.scope), name))
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
            let manager = self.core.get()?;
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
            let manager = self.core.get()?;
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
        boundary(|| Ok(self.core.stats().to_json()))
    }

    /// Stops the manager's background tasks and frees its native state; later operations
    /// reject with UNAVAILABLE. Locks already granted are not released.
    #[napi(ts_return_type = "Promise<void>", catch_unwind)]
    pub fn close<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        boundary(|| {
            let manager = self.core.take();
            self.scope.promise(env, async move {
                if let Some(connecting) = manager {
                    close_when_connected(connecting).await;
                }
                Ok(())
            })
        })
    }
}

impl ObjectFinalize for NativeManager {
    /// Gives back the native size reported to V8 at construction.
    fn finalize(self, env: Env) -> Result<()> {
        env.adjust_external_memory(-self.external).map(|_| ())
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

impl CancelToken {
    /// A receiver that turns `true` once the token is cancelled.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}
