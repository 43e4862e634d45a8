//! What one acquire call sends: its keys, token and scripts per primitive (a lock, a permit, a
//! read, a write, a leadership), prepared once and sent by every round; the fence write-back;
//! and what an acquire that ends without a grant takes back.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::fair::{Fair, QueueOp};
use crate::lock::{Kind, release_on};
use crate::node::Node;
use crate::quorum::{self, Reply, Round, Tally};
use crate::scripts;

/// Everything one acquire call sends, prepared once and cluster by its rounds.
pub(crate) struct AcquireRequest {
    pub(crate) kind: Kind,
    /// [`Kind::quorum`] of the manager's nodes.
    pub(crate) quorum: usize,
    /// Shared with the lock it grants (no copy per call).
    pub(crate) keys: Arc<[String]>,
    pub(crate) token: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) fencing: bool,
    /// The acquire script (all-or-nothing per node, fence counters), built when a node first
    /// needs it: a single-key lock on Redis 7+ never does.
    pub(crate) script: OnceLock<redis::Cmd>,
    /// One key and no fencing: `SET key token NX PX ttl GET`, sent instead of the script to
    /// nodes that take it (Redis 7+).
    pub(crate) set_nx_get: Option<redis::Cmd>,
    /// A fair acquire's place in line.
    pub(crate) fair: Option<Fair>,
    /// The lock's minimum hold (checked: at most the ttl, a lock).
    pub(crate) min_hold: Option<Duration>,
    /// How long a waiting writer's mark holds back new readers after its last round.
    pub(crate) mark_ttl: Duration,
    /// A candidate's value, written with its term when it is granted the leadership.
    pub(crate) value: Option<Arc<str>>,
}

impl AcquireRequest {
    pub(crate) fn new(
        keys: Arc<[String]>,
        kind: Kind,
        quorum: usize,
        token: Arc<str>,
        ttl: Duration,
        fencing: bool,
        fair: Option<Fair>,
    ) -> Self {
        let plain_lock = kind == Kind::Lock && keys.len() == 1 && !fencing && fair.is_none();
        let set_nx_get = plain_lock.then(|| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&keys[0])
                .arg(&*token)
                .arg("NX")
                .arg("PX")
                .arg(ttl.as_millis() as u64)
                .arg("GET");
            cmd
        });
        AcquireRequest {
            kind,
            quorum,
            keys,
            token,
            ttl,
            fencing,
            script: OnceLock::new(),
            set_nx_get,
            fair,
            min_hold: None,
            mark_ttl: Duration::ZERO,
            value: None,
        }
    }

    /// The lock keys, then (with fencing) their fence counter keys.
    pub(crate) fn script_keys(&self) -> Vec<String> {
        let mut keys = self.keys.to_vec();
        if self.fencing {
            keys.extend(self.keys.iter().map(|k| scripts::fence_key(k)));
        }
        keys
    }

    /// The acquire script for this request (see `script`).
    pub(crate) fn script(&self) -> &redis::Cmd {
        self.script.get_or_init(|| {
            let mut keys = self.script_keys();
            match self.kind {
                // The semaphore key, its limit key, then (with fencing) its fence counter key.
                Kind::Permit { .. } => keys.insert(1, scripts::limit_key(&self.keys[0])),
                // The lock key, its readers key, its writer mark key (then the fence counter).
                Kind::Read => {
                    keys.insert(1, scripts::readers_key(&self.keys[0]));
                    keys.insert(2, scripts::writer_mark_key(&self.keys[0]));
                }
                // The lock key, its writer mark key (then the fence counter).
                Kind::Write => keys.insert(1, scripts::writer_mark_key(&self.keys[0])),
                Kind::Lock | Kind::Leader => {}
            }
            let ttl_ms = self.ttl.as_millis().to_string();
            let flag = if self.fencing { "1" } else { "0" };
            match self.kind {
                // A candidate always waits in line (fair): this script is only a lock's.
                Kind::Lock | Kind::Leader => {
                    scripts::evalsha(&scripts::ACQUIRE, &keys, &[&self.token, &ttl_ms, flag])
                }
                Kind::Permit { limit } => scripts::evalsha(
                    &scripts::SEM_ACQUIRE,
                    &keys,
                    &[&self.token, &ttl_ms, flag, &limit.to_string()],
                ),
                Kind::Read => {
                    scripts::evalsha(&scripts::READ_ACQUIRE, &keys, &[&self.token, &ttl_ms, flag])
                }
                Kind::Write => {
                    let mark_ms = self.mark_ttl.as_millis().max(1).to_string();
                    scripts::evalsha(
                        &scripts::WRITE_ACQUIRE,
                        &keys,
                        &[&self.token, &ttl_ms, flag, &mark_ms],
                    )
                }
            }
        })
    }

    /// Takes off `nodes` all an acquire that ends without a grant may have left there: a fair
    /// waiter's queue entries and keys, a writer's key and mark (readers held back by it may
    /// go), or any key a round set.
    pub(crate) async fn abandon(&self, nodes: &[Arc<Node>]) {
        if self.fair.is_some() {
            return self.leave_queue(nodes, QueueOp::Leave).await;
        }
        let announce = self.kind == Kind::Write;
        release_on(
            nodes,
            self.kind,
            self.quorum,
            &self.keys,
            &self.token,
            announce,
        )
        .await;
    }

    /// Sends a [`QueueOp`] of this request's queue entries to `nodes` and waits for the round.
    pub(crate) async fn leave_queue(&self, nodes: &[Arc<Node>], mode: QueueOp) {
        let Some(fair) = &self.fair else { return };
        let cmd = Arc::new(fair.leave_cmd(self, mode));
        quorum::run(
            nodes,
            Tally::ReleaseAll,
            self.quorum,
            Instant::now(),
            |node| {
                let cmd = cmd.clone();
                async move {
                    match node.query::<i64>(&cmd).await {
                        Ok(_) => Reply::Yes(0),
                        Err(f) => Reply::Failed(f),
                    }
                }
            },
        )
        .await;
    }
}

pub(crate) async fn write_fence(
    cluster: &Cluster,
    req: &Arc<AcquireRequest>,
    f: u64,
    t1: Instant,
) -> Round {
    let f = f.to_string();
    let script = match req.kind {
        Kind::Lock | Kind::Write => &scripts::FENCE,
        Kind::Permit { .. } | Kind::Read => &scripts::SEM_FENCE,
        Kind::Leader => &scripts::LEADER_FENCE,
    };
    let mut keys = req.script_keys();
    let mut args = vec![&*req.token, f.as_str()];
    match req.kind {
        // The readers' sorted set holds the token, as a semaphore's does.
        Kind::Read => keys[0] = scripts::readers_key(&keys[0]),
        // A leader's grant also writes its record: the term is the fence, with its value.
        Kind::Leader => {
            keys.push(scripts::leader_key(&req.keys[0]));
            args.push(req.value.as_deref().unwrap_or(""));
        }
        _ => {}
    }
    let cmd = Arc::new(scripts::evalsha(script, &keys, &args));
    quorum::run_flag(&cluster.nodes, req.quorum, t1, cmd).await
}
