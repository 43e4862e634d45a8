//! The lock manager: the public facade over the shared cluster state, acquire and the locks.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::acquire::{self, AcquireOptions};
use crate::cluster::Cluster;
use crate::config::{Config, validate_resources};
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::Holder;
use crate::lock::{Access, Kind, Lock, Released, release_round, released};
use crate::node::NodeStatus;
use crate::quorum::Tally;
use crate::stats::Stats;

/// Takes and manages Redlock locks over N independent Redis masters. Cheap to clone.
#[derive(Clone)]
pub struct LockManager {
    pub(crate) cluster: Arc<Cluster>,
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field(
                "nodes",
                &self
                    .cluster
                    .nodes
                    .iter()
                    .map(|n| &n.display)
                    .collect::<Vec<_>>(),
            )
            .field("quorum", &self.cluster.quorum)
            .finish()
    }
}

impl LockManager {
    /// Validates the configuration and connects to every node at once (each bounded by
    /// `connect_timeout`). A node that is down does not stop the manager from starting: it is
    /// a failing voter until a background reconnection succeeds.
    ///
    /// The manager keeps the tokio runtime it is created on and runs all of its background work
    /// there, so its methods and its locks may then be used from any thread and any runtime.
    pub async fn new(config: Config) -> Result<LockManager> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::Internal,
                "LockManager::new must run inside a tokio runtime",
            )
        })?;
        let cluster = Arc::new(Cluster::new(config, rt)?);
        connect_until_quorum(&cluster).await?;
        if let Err(e) = cluster.check_distinct() {
            cluster.close();
            return Err(e);
        }
        Ok(LockManager { cluster })
    }

    /// The settings this manager runs with.
    pub fn config(&self) -> &Config {
        &self.cluster.config
    }

    /// Q = floor(N / 2) + 1.
    pub fn quorum(&self) -> usize {
        self.cluster.quorum
    }

    /// Counters and latency histograms since the manager was created, summed over
    /// its nodes where they are per node ([`node_status`](Self::node_status) has them per node).
    /// The same events also go to the `metrics` crate facade.
    pub fn stats(&self) -> Stats {
        let mut s = self.cluster.stats.snapshot();
        s.wakeups = self.cluster.notifier.wakeups.load(Ordering::Relaxed);
        for n in self.cluster.nodes.iter().map(|n| n.status()) {
            s.reseats += n.reseats;
            s.quarantines += n.quarantines;
            s.reconnects += n.reconnects;
            s.votes_for += n.votes_for;
            s.votes_against += n.votes_against;
            s.votes_error += n.errors;
            s.votes_timeout += n.timeouts;
            s.votes_not_eligible += n.not_eligible;
        }
        s
    }

    /// Every node's connection, eligibility and vote counters.
    pub fn node_status(&self) -> Vec<NodeStatus> {
        self.cluster.nodes.iter().map(|n| n.status()).collect()
    }

    /// `Ok` when at least a quorum of nodes has a connection open now; otherwise a `Connection`
    /// error naming every node without one and its last error (passwords redacted). For a
    /// caller that asked to wait until the manager is connected (Node's `connect()`): a manager
    /// whose every node is down would otherwise start, and only its first acquire would fail.
    pub fn require_connected_quorum(&self) -> Result<()> {
        let nodes = self.node_status();
        let down: Vec<String> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.connected)
            .map(|(i, n)| {
                let why = n.last_error.as_deref().unwrap_or("not connected yet");
                format!("nodes[{i}] {}: {why}", n.url)
            })
            .collect();
        let connected = nodes.len() - down.len();
        if connected >= self.cluster.quorum {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Connection,
            format!(
                "{connected} of {} nodes connected, fewer than the quorum of {} ({})",
                nodes.len(),
                self.cluster.quorum,
                down.join("; "),
            ),
        ))
    }

    /// Waits until the requests that rounds stopped waiting for (a release returns once a
    /// quorum deleted the keys; an acquire once its outcome is decided) have been answered or
    /// have timed out: at most `node_timeout` plus a little. Call it before a short-lived
    /// process exits right after a release, so that the last deletes reach every node. Sleeps
    /// until woken; it does not poll.
    pub async fn flush(&self) {
        let limit = self.cluster.config.node_timeout + Duration::from_millis(100);
        self.cluster.inflight.wait(limit).await;
    }

    /// Stops background tasks and closes the connections to the nodes at once (not when the
    /// last clone of the manager or of a lock it granted is dropped); later operations fail with
    /// `Unavailable`, and locks it granted can no longer be extended or released (release them
    /// first: otherwise their keys stay until their ttl).
    pub fn close(&self) {
        self.cluster.close();
    }

    /// Acquires `resources` for `ttl` with the manager's retry settings.
    pub async fn acquire<S: AsRef<str>>(&self, resources: &[S], ttl: Duration) -> Result<Lock> {
        self.acquire_with(resources, ttl, AcquireOptions::default())
            .await
    }

    /// Acquires `resources` (all of them, or none, on each node) for `ttl`.
    ///
    /// Cancel-safe: if the returned future is dropped before it completes (on any thread, inside
    /// a runtime or not), the keys it may have set are released in the background.
    pub async fn acquire_with<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
        options: AcquireOptions,
    ) -> Result<Lock> {
        acquire::acquire(&self.cluster, resources, ttl, options).await
    }

    /// The counting semaphore `resource` with `limit` permits: at most `limit`
    /// holders at once, across the quorum. Each permit is a [`Lock`] (ttl, validity, extend,
    /// release, auto-extension, fencing, the lost signal, the report). A permit needs
    /// [`Semaphore::quorum`] = floor(limit × N / (limit + 1)) + 1 admitting nodes — more than a
    /// majority for a limit of 2 or more — so N − that many nodes may be down. The semaphore's
    /// key is apart from a lock on the same name (`<prefix><resource>:ironlock:semaphore`).
    /// `limit` is checked (1 to [`MAX_SEMAPHORE_LIMIT`](crate::MAX_SEMAPHORE_LIMIT)) when a
    /// permit is acquired.
    pub fn semaphore(&self, resource: impl Into<String>, limit: u32) -> Semaphore {
        Semaphore {
            manager: self.clone(),
            resource: resource.into(),
            limit,
        }
    }

    /// The read-write lock `resource`: [`RwLock::read`] is shared with other readers,
    /// [`RwLock::write`] excludes readers and other writers, and a plain lock of the same name
    /// excludes both (the writer's key is the lock's own key; while readers hold, it holds a
    /// marker that no token equals). A writer that is waiting holds back new readers (its mark,
    /// renewed by its rounds, lives a queue timeout), so writers never starve. With `fair`
    /// readers and writers wait in the lock's one line (shared with fair locks of the name) and
    /// are served in the order they queued, readers in a row together. Both sides are
    /// [`Lock`]s (ttl, validity, extend, release, auto-extension, fencing, the lost signal, the
    /// report) granted by the same majority as a lock.
    pub fn rw_lock(&self, resource: impl Into<String>) -> RwLock {
        RwLock {
            manager: self.clone(),
            resource: resource.into(),
        }
    }

    /// Acquires, runs `work` while the lock is extended in the background, then releases.
    /// `work` receives the lock: select on [`Lock::lost`] to stop at once when it is lost.
    /// Returns `Lost` (and discards the work's output) when the loss rule of
    /// [`Lock::finish`] says the work did not hold the lock to its end.
    pub async fn using<S, F, Fut, T>(&self, resources: &[S], ttl: Duration, work: F) -> Result<T>
    where
        S: AsRef<str>,
        F: FnOnce(Lock) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let lock = self.acquire(resources, ttl).await?;
        let keeper = lock.keep_alive();
        let out = work(lock.clone()).await;
        keeper.stop();
        lock.finish().await?;
        Ok(out)
    }

    /// Deletes `resources` on every node where they still hold `token` (e.g. a lock taken by
    /// another process, whose token you were given).
    pub async fn release_token<S: AsRef<str>>(
        &self,
        resources: &[S],
        token: &str,
    ) -> Result<Released> {
        validate_resources(resources)?;
        if token.is_empty() {
            return Err(Error::invalid("token: empty"));
        }
        if token.contains(' ') {
            // No token holds a space; the readers of a read-write lock mark its key with one.
            return Err(Error::invalid(
                "token: holds a space, which no lock token does",
            ));
        }
        let keys: Vec<String> = resources
            .iter()
            .map(|r| self.cluster.key(r.as_ref()))
            .collect();
        let q = self.cluster.quorum;
        let round = release_round(
            &self.cluster.nodes,
            Kind::Lock,
            q,
            &keys,
            token,
            true,
            Tally::ReleaseAll,
        )
        .await;
        Ok(released(q, round))
    }

    /// Who holds `resource` on each node, and for how long: the lock's token, and the permits of
    /// the semaphore of the same name with the limit it is in use with.
    pub async fn inspect(&self, resource: &str) -> Result<Vec<Holder>> {
        crate::inspect::inspect(&self.cluster, resource).await
    }
}

/// How long start-up waits for the other nodes once a quorum is connected (at least).
const QUORUM_GRACE: Duration = Duration::from_millis(200);

/// Connects to every node at once and returns once every attempt has ended, or a short grace
/// after a quorum is connected (twice the time the quorum took, at least `QUORUM_GRACE`): a
/// silent node then costs start-up almost nothing, and keeps connecting in the background,
/// while healthy nodes that are merely a little slower are all connected on return. Fails with
/// `Connection` only when so many host names do not resolve that no quorum could ever form
/// (nodes that refuse or time out may come back).
async fn connect_until_quorum(cluster: &Arc<Cluster>) -> Result<()> {
    let started = tokio::time::Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for node in &cluster.nodes {
        let (node, tx) = (node.clone(), tx.clone());
        cluster.rt.spawn(async move {
            let _ = tx.send(node.connect_or_schedule().await);
        });
    }
    drop(tx);
    let mut connected = 0;
    let mut grace_until: Option<tokio::time::Instant> = None;
    loop {
        let next = match grace_until {
            Some(until) => match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(next) => next,
                Err(_) => return Ok(()),
            },
            None => rx.recv().await,
        };
        let Some(ok) = next else { break };
        connected += usize::from(ok);
        if connected >= cluster.quorum && grace_until.is_none() {
            grace_until = Some(started + (2 * started.elapsed()).max(QUORUM_GRACE));
        }
    }
    if connected >= cluster.quorum {
        return Ok(());
    }
    // Nodes that will not come back by themselves: a host name that does not resolve, or
    // credentials the server refuses.
    let unusable: Vec<String> = cluster
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.unresolvable() || n.auth_refused())
        .map(|(i, n)| {
            let why = n.status().last_error.unwrap_or_default();
            format!("nodes[{i}] {}: {why}", n.display)
        })
        .collect();
    if cluster.nodes.len() - unusable.len() < cluster.quorum {
        let what = if cluster.nodes.iter().any(|n| n.auth_refused()) {
            "nodes refuse the user name or password or have host names that do not resolve"
        } else {
            "node host names do not resolve"
        };
        return Err(Error::new(
            ErrorKind::Connection,
            format!(
                "{} ({} of {} {what}, so no quorum of {} can form)",
                unusable.join("; "),
                unusable.len(),
                cluster.nodes.len(),
                cluster.quorum,
            ),
        ));
    }
    Ok(())
}

/// A counting semaphore across the quorum ([`LockManager::semaphore`]). Cheap to clone.
#[derive(Clone)]
pub struct Semaphore {
    manager: LockManager,
    resource: String,
    limit: u32,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("resource", &self.resource)
            .field("limit", &self.limit)
            .field("quorum", &self.quorum())
            .finish()
    }
}

impl Semaphore {
    /// The resource name, as given.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// How many permits may be held at once.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The nodes that must admit a permit: floor(limit × N / (limit + 1)) + 1.
    pub fn quorum(&self) -> usize {
        crate::quorum::semaphore_quorum(self.manager.cluster.nodes.len(), self.limit.max(1))
    }

    /// Acquires a permit for `ttl` with the manager's retry settings.
    pub async fn acquire(&self, ttl: Duration) -> Result<Lock> {
        self.acquire_with(ttl, AcquireOptions::default()).await
    }

    /// Acquires a permit for `ttl` (cancel-safe as [`LockManager::acquire_with`]); fails with
    /// `Contended` when all permits stay held, `Unavailable` when fewer than
    /// [`quorum`](Self::quorum) nodes could admit it.
    pub async fn acquire_with(&self, ttl: Duration, options: AcquireOptions) -> Result<Lock> {
        acquire::acquire_permit(
            &self.manager.cluster,
            &self.resource,
            self.limit,
            ttl,
            options,
        )
        .await
    }
}

/// A read-write lock across the quorum ([`LockManager::rw_lock`]). Cheap to clone.
#[derive(Clone)]
pub struct RwLock {
    manager: LockManager,
    resource: String,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("resource", &self.resource)
            .finish()
    }
}

impl RwLock {
    /// The resource name, as given.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Acquires a read (shared) lock for `ttl` with the manager's retry settings.
    pub async fn read(&self, ttl: Duration) -> Result<Lock> {
        self.read_with(ttl, AcquireOptions::default()).await
    }

    /// Acquires a read lock for `ttl` (cancel-safe as [`LockManager::acquire_with`]); fails
    /// with `Contended` while a writer or a plain lock holds the resource or a writer waits for
    /// it. With `fair` it waits in line: admitted when no writer or plain lock holds the
    /// resource or waits ahead of it. `min_hold` is refused (`InvalidArgument`).
    pub async fn read_with(&self, ttl: Duration, options: AcquireOptions) -> Result<Lock> {
        let cluster = &self.manager.cluster;
        crate::rwlock::acquire_rw(cluster, &self.resource, Access::Read, ttl, options).await
    }

    /// Acquires the write (exclusive) lock for `ttl` with the manager's retry settings.
    pub async fn write(&self, ttl: Duration) -> Result<Lock> {
        self.write_with(ttl, AcquireOptions::default()).await
    }

    /// Acquires the write lock for `ttl` (cancel-safe as [`LockManager::acquire_with`]); fails
    /// with `Contended` while readers, another writer or a plain lock hold the resource. While
    /// it waits, new readers are refused. With `fair` it waits in line: granted when nothing
    /// holds the resource and it heads the line. `min_hold` is refused (`InvalidArgument`).
    pub async fn write_with(&self, ttl: Duration, options: AcquireOptions) -> Result<Lock> {
        let cluster = &self.manager.cluster;
        crate::rwlock::acquire_rw(cluster, &self.resource, Access::Write, ttl, options).await
    }
}
