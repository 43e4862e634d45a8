//! One Redis node: its multiplexed connection, per-request timeout, background reconnection and
//! the restart quarantine read from `INFO server` on every (re)connection.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue};

use crate::alarm::Alarm;
use crate::config::{ClusterSpec, EffectiveTls, NodeSpec, SentinelSpec, scrub};
use crate::drain::{Draining, InFlight};
use crate::shards::{self, Conn, Shard};
use crate::topology::{self, Identities, SENTINEL_LEASE, ServerInfo, build_client, parse_info};

mod coalesce;
mod connect;
mod watch;

/// Resolves a TLS server name to the host the node's URL gives (the connection goes to that
/// host; the certificate is checked against the name).
#[derive(Clone)]
struct Pinned {
    host: String,
}

impl redis::io::AsyncDNSResolver for Pinned {
    fn resolve<'a, 'b: 'a>(
        &'a self,
        _name: &'b str,
        port: u16,
    ) -> redis::RedisFuture<'a, Box<dyn Iterator<Item = std::net::SocketAddr> + Send + 'a>> {
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((self.host.as_str(), port))
                    .await?
                    .collect();
            Ok(Box::new(addrs.into_iter()) as Box<dyn Iterator<Item = _> + Send>)
        })
    }
}

/// The subscribing half of a node's notification connection.
#[derive(Clone)]
pub(crate) enum Subscriber {
    /// A RESP2 pub/sub connection.
    PubSub(redis::aio::PubSubSink),
    /// A RESP3 multiplexed connection whose pushes carry the messages (nodes with a TLS server
    /// name: only this kind of connection takes the resolver that pins the name to the host).
    Push(MultiplexedConnection),
}

impl Subscriber {
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            Subscriber::PubSub(s) => s.subscribe(channels).await,
            Subscriber::Push(c) => c.subscribe(channels).await,
        }
    }

    pub(crate) async fn unsubscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            Subscriber::PubSub(s) => s.unsubscribe(channels).await,
            Subscriber::Push(c) => c.unsubscribe(channels).await,
        }
    }
}

/// Release announcements: `(channel, payload)`.
pub(crate) type Messages = futures_util::stream::BoxStream<'static, (String, String)>;

/// Why a node did not vote.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    Timeout,
    Error(String),
}

impl Failure {
    pub(crate) fn text(&self) -> String {
        match self {
            Failure::Timeout => "no reply within node_timeout".to_owned(),
            Failure::Error(e) => e.clone(),
        }
    }
}

/// Why a node's "yes" does not count yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quarantine {
    /// It restarted (its uptime, or the age of its data, is below the quarantine).
    Restart,
    /// Its master changed: it was promoted from a replica this long before the connection.
    Failover(Duration),
}

struct State {
    conn: Option<Conn>,
    /// Bumped on every new connection, so a stale failure cannot drop a fresh connection.
    generation: u64,
    /// The node's "yes" votes count from this instant on.
    eligible_at: Instant,
    /// Why `eligible_at` is in the future.
    quarantine: Quarantine,
    info: Option<ServerInfo>,
    connected_at: Option<Instant>,
    last_error: Option<String>,
    /// Set by [`Node::close`]: no connection is kept or made any more.
    closed: bool,
    /// A Sentinel voter's master, as the sentinels named it at the last connection.
    master: Option<String>,
    /// A Sentinel voter: when the last question that a majority of its sentinels answered with
    /// this master was asked (its votes count for [`SENTINEL_LEASE`] from then).
    confirmed_at: Option<Instant>,
    /// A Sentinel voter: why its sentinels did not confirm the master at the last check.
    unconfirmed: Option<String>,
}

/// Counters of one node's votes since the manager started.
#[derive(Default)]
pub(crate) struct VoteCounters {
    pub(crate) votes_for: AtomicU64,
    pub(crate) votes_against: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) not_eligible: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) reseats: AtomicU64,
    pub(crate) quarantines: AtomicU64,
}

pub(crate) struct Node {
    pub(crate) display: Arc<str>,
    /// Where this node stands in the manager's node list.
    index: usize,
    identities: Arc<Identities>,
    secret: Option<String>,
    /// The data node's client: fixed for a standalone voter; for a Sentinel voter, rebuilt for
    /// the master the sentinels name at each (re)connection.
    client: Mutex<redis::Client>,
    /// A Sentinel-managed voter: its sentinels, and the data nodes' connection template.
    sentinel: Option<(SentinelSpec, redis::ConnectionInfo, EffectiveTls)>,
    /// A Redis Cluster voter: its seeds, its nodes' connection template and its shards.
    cluster: Option<ClusterVoter>,
    /// With a TLS server name other than the URL's host: the client connects to the name (so
    /// that the certificate is checked against it) and this resolves the name to the URL's host.
    pinned: Option<Pinned>,
    /// With `pinned`: a RESP3 client for release notifications (pub/sub pushes on a multiplexed
    /// connection, the one kind of connection that takes a custom resolver).
    push_client: Option<redis::Client>,
    node_timeout: Duration,
    connect_timeout: Duration,
    /// `None` when restart quarantine is off.
    quarantine: Option<Duration>,
    /// Replicas that must acknowledge a vote's write (`WAIT`), 0 for none (`replica_acks`).
    replica_acks: u32,
    state: Mutex<State>,
    reconnecting: AtomicBool,
    /// A Sentinel voter's watch of its sentinels runs (`watch`).
    watching: AtomicBool,
    /// The last attempt found that the host name does not resolve.
    unresolvable: AtomicBool,
    /// The last attempt was refused the credentials.
    auth_refused: AtomicBool,
    /// The server takes `SET … NX … GET` (read at connection; a lock-free read per request).
    set_nx_get: AtomicBool,
    /// Which lifetime of the node's data the connection sees: bumped when a (re)connection finds
    /// a `run_id` (or, without `INFO`, a data epoch) other than the last one, so a lock can tell
    /// that the node lost its keys since it last held them (re-seating). 0 before the
    /// first connection; unchanged when the node does not say who it is.
    data_epoch: AtomicU64,
    /// The manager's count of requests whose round was decided before they were answered.
    inflight: Arc<InFlight>,
    /// Dates the node's data when `INFO` is not permitted (restart quarantine for ACL users).
    epoch_key: String,
    /// Dates the reign of a master promoted from a replica.
    master_key: String,
    /// The runtime the manager was created on: reconnections and drains run there, whichever
    /// thread noticed that they are needed.
    rt: tokio::runtime::Handle,
    /// The manager's round deadlines (shared by its nodes).
    alarm: Arc<Alarm>,
    /// Lock extensions waiting to go out together (`coalesce`).
    extensions: coalesce::Extensions,
    pub(crate) counters: VoteCounters,
}

/// What a Redis Cluster voter keeps besides its connection.
struct ClusterVoter {
    spec: ClusterSpec,
    template: redis::ConnectionInfo,
    tls: EffectiveTls,
    key_prefix: String,
    /// The shards as last checked (replaced whole when they are read again).
    shards: Mutex<Arc<Vec<Shard>>>,
    /// Which masters with which replication IDs: a change is a change of the data (re-seat).
    signature: Mutex<String>,
    refreshing: AtomicBool,
}

/// The SHAs of the scripts that are no votes (releases): a shard in quarantine runs them and
/// their replies count as they are.
static NOT_VOTES: std::sync::LazyLock<[String; 3]> = std::sync::LazyLock::new(|| {
    [
        crate::scripts::RELEASE_SOURCE,
        crate::scripts::SEM_RELEASE_SOURCE,
        crate::scripts::FAIR_LEAVE_SOURCE,
    ]
    .map(|s| redis::Script::new(s).get_hash().to_owned())
});

/// Whether `cmd` is a vote (a write that grants or keeps a lock), not a release.
fn is_vote(cmd: &redis::Cmd) -> bool {
    cmd.args_iter().nth(1).is_some_and(
        |a| !matches!(a, redis::Arg::Simple(sha) if NOT_VOTES.iter().any(|n| n.as_bytes() == sha)),
    )
}

/// One node as the manager sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// URL with the password redacted.
    pub url: String,
    /// A connection is open.
    pub connected: bool,
    /// Connected, out of restart and failover quarantine, and (a Sentinel voter) its master
    /// confirmed by a majority of its sentinels within the last 2 s: its "yes" votes count.
    pub eligible: bool,
    /// Time left in restart quarantine.
    pub quarantine_remaining: Duration,
    /// `run_id` from `INFO server` at the last connection.
    pub run_id: String,
    /// Server version from `INFO server`.
    pub version: String,
    /// Server uptime (estimated from the last `INFO server`).
    pub uptime: Duration,
    /// The last connection error, if any.
    pub last_error: Option<String>,
    /// The earlier node in the list that this one turned out to be (the same `run_id`): its
    /// votes do not count, since one server is one vote.
    pub same_server_as: Option<usize>,
    /// What kind of voter: `standalone` (one master at a fixed address) or `sentinel` (the
    /// master a group of sentinels names).
    pub kind: &'static str,
    /// A Sentinel voter's current master (`host:port`), as its sentinels named it.
    pub master: Option<String>,
    /// A cluster voter's number of shards (slot ranges with a master); 0 for other kinds.
    pub shards: usize,
    /// The replicas (`host:port`) the master reported connected at the last connection, for
    /// standalone and Sentinel voters.
    pub replicas: Vec<String>,
    /// Why its "yes" does not count now (restart or failover quarantine, the same server as
    /// another node), when it does not.
    pub not_counted_because: Option<String>,
    /// Counted "yes" votes.
    pub votes_for: u64,
    /// "No" votes.
    pub votes_against: u64,
    /// Errors (including "not connected").
    pub errors: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// "Yes" votes refused by restart quarantine.
    pub not_eligible: u64,
    /// Successful reconnections.
    pub reconnects: u64,
    /// Keys written back by an extension after this node restarted (re-seating).
    pub reseats: u64,
    /// Times this node entered restart quarantine on (re)connecting.
    pub quarantines: u64,
}

/// How a manager's nodes connect and where their background work runs.
pub(crate) struct NodeSettings {
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// `None` when restart quarantine is off.
    pub(crate) quarantine: Option<Duration>,
    /// The `replica_acks` setting.
    pub(crate) replica_acks: u32,
    pub(crate) inflight: Arc<InFlight>,
    pub(crate) rt: tokio::runtime::Handle,
    pub(crate) alarm: Arc<Alarm>,
    /// [`crate::scripts::epoch_key`] of the manager's key prefix.
    pub(crate) epoch_key: String,
    /// [`crate::scripts::master_key`] of the manager's key prefix.
    pub(crate) master_key: String,
    pub(crate) identities: Arc<Identities>,
}

/// The longest pause between two reconnection attempts of a node that is down.
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_millis(200);

impl Node {
    pub(crate) fn new(
        index: usize,
        spec: NodeSpec,
        settings: &NodeSettings,
    ) -> Result<Arc<Node>, String> {
        let mut info = spec.info;
        let mut pinned = None;
        if let (
            Some(name),
            redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            },
        ) = (&spec.tls.server_name, info.addr())
        {
            pinned = Some(Pinned { host: host.clone() });
            let addr = redis::ConnectionAddr::TcpTls {
                host: name.clone(),
                port: *port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            };
            info = info.set_addr(addr);
        }
        let build = |info: redis::ConnectionInfo| build_client(&spec.tls, info);
        let push_client = match pinned {
            Some(_) => {
                let resp3 = info
                    .redis_settings()
                    .clone()
                    .set_protocol(redis::ProtocolVersion::RESP3);
                Some(build(info.clone().set_redis_settings(resp3))?)
            }
            None => None,
        };
        let sentinel = spec.sentinel.map(|s| (s, info.clone(), spec.tls.clone()));
        let cluster = spec.cluster.map(|c| ClusterVoter {
            template: info.clone(),
            tls: spec.tls.clone(),
            key_prefix: settings
                .master_key
                .strip_suffix("ironlock:master")
                .unwrap_or_default()
                .to_owned(),
            shards: Mutex::new(Arc::new(Vec::new())),
            signature: Mutex::new(String::new()),
            refreshing: AtomicBool::new(false),
            spec: c,
        });
        // A cluster voter's release announcements are read from its first seed (a PUBLISH
        // reaches every node of a cluster).
        let info = match cluster.as_ref().and_then(|c| c.spec.seeds.first()) {
            Some(seed) => info.set_addr(seed.addr().clone()),
            None => info,
        };
        let client = Mutex::new(build(info)?);
        Ok(Arc::new(Node {
            display: settings.identities.displays[index].clone(),
            index,
            identities: settings.identities.clone(),
            secret: spec.secret,
            client,
            sentinel,
            cluster,
            pinned,
            push_client,
            node_timeout: settings.node_timeout,
            connect_timeout: settings.connect_timeout,
            quarantine: settings.quarantine,
            replica_acks: settings.replica_acks,
            state: Mutex::new(State {
                conn: None,
                generation: 0,
                eligible_at: Instant::now(),
                quarantine: Quarantine::Restart,
                info: None,
                connected_at: None,
                last_error: Some("not connected yet".to_owned()),
                closed: false,
                master: None,
                confirmed_at: None,
                unconfirmed: None,
            }),
            reconnecting: AtomicBool::new(false),
            watching: AtomicBool::new(false),
            unresolvable: AtomicBool::new(false),
            auth_refused: AtomicBool::new(false),
            set_nx_get: AtomicBool::new(false),
            data_epoch: AtomicU64::new(0),
            inflight: settings.inflight.clone(),
            epoch_key: settings.epoch_key.clone(),
            master_key: settings.master_key.clone(),
            rt: settings.rt.clone(),
            alarm: settings.alarm.clone(),
            extensions: coalesce::Extensions::default(),
            counters: VoteCounters::default(),
        }))
    }

    /// A pub/sub connection for release notifications: what to subscribe with and the
    /// `(channel, payload)` messages, which end when the connection does.
    pub(crate) async fn subscriber(&self) -> redis::RedisResult<(Subscriber, Messages)> {
        let Some(client) = &self.push_client else {
            let (sink, stream) = self.client().get_async_pubsub().await?.split();
            let messages = stream.map(|m| {
                let payload: String = m.get_payload().unwrap_or_default();
                (m.get_channel_name().to_owned(), payload)
            });
            return Ok((Subscriber::PubSub(sink), Box::pin(messages)));
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<redis::PushInfo>();
        let mut config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None)
            .set_push_sender(tx);
        if let Some(p) = &self.pinned {
            config = config.set_dns_resolver(p.clone());
        }
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let messages = futures_util::stream::unfold(rx, |mut rx| async move {
            loop {
                let push = rx.recv().await?;
                match push.kind {
                    redis::PushKind::Message => {
                        let mut data = push.data.into_iter();
                        let (Some(channel), Some(payload)) = (data.next(), data.next()) else {
                            continue;
                        };
                        let channel = String::from_redis_value(channel).unwrap_or_default();
                        let payload = String::from_redis_value(payload).unwrap_or_default();
                        return Some(((channel, payload), rx));
                    }
                    redis::PushKind::Disconnection => return None,
                    _ => {}
                }
            }
        });
        Ok((Subscriber::Push(conn), Box::pin(messages)))
    }

    pub(crate) fn scrub(&self, text: &str) -> String {
        scrub(text, self.secret.as_deref())
    }

    fn current(&self) -> Option<(Conn, u64)> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.conn.clone().map(|c| (c, st.generation))
    }

    /// Whether this voter is a Redis Cluster (each call reaches one hash slot).
    pub(crate) fn is_cluster_voter(&self) -> bool {
        self.cluster.is_some()
    }

    /// Which lifetime of the node's data the current connection sees (0: never connected).
    pub(crate) fn data_epoch(&self) -> u64 {
        self.data_epoch.load(Ordering::Acquire)
    }

    /// Whether this node's "yes" counts now: restart and failover quarantine over, not the same
    /// server as an earlier node, and for a Sentinel voter, its master confirmed by a majority
    /// of its sentinels within [`SENTINEL_LEASE`].
    pub(crate) fn eligible(&self) -> bool {
        if self.identities.is_shadowed(self.index) {
            return false;
        }
        let now = Instant::now();
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        now >= st.eligible_at && self.confirmed(&st, now)
    }

    /// A Sentinel voter's master was named by a majority of its sentinels less than
    /// [`SENTINEL_LEASE`] ago (always true of other voters).
    fn confirmed(&self, st: &State, now: Instant) -> bool {
        self.sentinel.is_none()
            || st
                .confirmed_at
                .is_some_and(|asked| now < asked + SENTINEL_LEASE)
    }

    /// Why this node's "yes" does not count yet, for the report: when it restarted and when it
    /// counts again.
    pub(crate) fn quarantine_text(&self) -> String {
        if let Some(text) = self.same_server_text() {
            return text;
        }
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if now >= st.eligible_at && !self.confirmed(&st, now) {
            let master = st.master.as_deref().unwrap_or("its master");
            let last = match st.confirmed_at {
                Some(asked) => format!("{:.1} s ago", now.duration_since(asked).as_secs_f64()),
                None => "never".to_owned(),
            };
            return format!(
                "not confirmed as the master: a majority of its sentinels last named {master} {last}, and its votes count for {} s after they do (a failover may have replaced it){}",
                SENTINEL_LEASE.as_secs(),
                st.unconfirmed
                    .as_deref()
                    .map_or(String::new(), |why| format!("; {why}"))
            );
        }
        let left = st.eligible_at.saturating_duration_since(now);
        let up = match (&st.info, st.connected_at) {
            (Some(info), Some(at)) => info.uptime + now.saturating_duration_since(at),
            _ => Duration::ZERO,
        };
        let left = left.as_secs() + u64::from(left.subsec_nanos() > 0);
        match st.quarantine {
            Quarantine::Failover(age) => {
                let ago = age
                    + st.connected_at
                        .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
                format!(
                    "in failover quarantine: this master was promoted from a replica {} s ago and may lack locks its old master granted; counted again in {left} s; see restart_quarantine",
                    ago.as_secs()
                )
            }
            Quarantine::Restart => format!(
                "in restart quarantine: restarted {} s ago; counted again in {left} s; see restart_quarantine",
                up.as_secs()
            ),
        }
    }

    /// Why this node is not counted when it is the same server as an earlier node.
    pub(crate) fn same_server_text(&self) -> Option<String> {
        let (first, url, id) = self.identities.same_as(self.index)?;
        Some(format!(
            "the same server as nodes[{first}] ({url}, run_id {}): one server is one vote, so only nodes[{first}] counts; list each server once",
            crate::config::cut(&id)
        ))
    }

    /// The bound on one request: enforced by the round that sends it (`quorum::run`).
    pub(crate) fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// Sends one command (built once per round and shared by every node) and reads its reply.
    /// No timer here: the round bounds all of its requests with one `node_timeout` deadline, and
    /// a request it stops waiting for keeps its place on the connection (later requests on it
    /// stay ordered after it). A broken connection is replaced in the background.
    /// Extensions waiting in the node's batch are sent first (`coalesce`): a request never
    /// overtakes one asked for before it.
    pub(crate) async fn query<T: FromRedisValue>(
        self: &Arc<Self>,
        cmd: &redis::Cmd,
    ) -> Result<T, Failure> {
        self.send_extensions();
        self.query_now(cmd).await
    }

    async fn query_now<T: FromRedisValue>(
        self: &Arc<Self>,
        cmd: &redis::Cmd,
    ) -> Result<T, Failure> {
        let (mut conn, generation) = self.connection()?;
        if let Some(cv) = &self.cluster {
            let list = cv.shards.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let (guarded, shard) = shards::guard(cmd, &list).map_err(|e| {
                if e.contains("checking the shards again") {
                    self.refresh_shards();
                }
                Failure::Error(e)
            })?;
            let reply = guarded.query_async(&mut conn).await;
            let value = self.settle(Ok(reply), generation)?;
            // A shard in quarantine ran the vote, but it does not count (releases do).
            if is_vote(cmd)
                && let Some(why) = shard.and_then(|s| s.not_counted(Instant::now()))
            {
                return Err(Failure::Error(why));
            }
            return Ok(value);
        }
        if self.replica_acks > 0 && is_vote(cmd) {
            return self.query_acknowledged(cmd, conn, generation).await;
        }
        let reply = cmd.query_async(&mut conn).await;
        self.settle(Ok(reply), generation)
    }

    /// A vote in replica-acknowledgement mode: `cmd` then `WAIT replica_acks node_timeout/2` in
    /// one pipeline (WAIT counts the replicas that have every write this connection sent so
    /// far, this one included). Fewer than `replica_acks` makes the vote an error: its key may
    /// be on the master alone, which a failover could lose.
    async fn query_acknowledged<T: FromRedisValue>(
        self: &Arc<Self>,
        cmd: &redis::Cmd,
        mut conn: Conn,
        generation: u64,
    ) -> Result<T, Failure> {
        // Half the round's bound: a WAIT that times out still answers within the round, so the
        // report says how many replicas acknowledged rather than "no reply".
        let wait_ms = u64::try_from(self.node_timeout.as_millis() / 2)
            .unwrap_or(u64::MAX)
            .max(1);
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(self.replica_acks)
            .arg(wait_ms);
        let reply = pipe.query_async::<(redis::Value, i64)>(&mut conn).await;
        let (value, acked) = self.settle(Ok(reply), generation)?;
        if acked < i64::from(self.replica_acks) {
            return Err(Failure::Error(format!(
                "the write reached {acked} of the {} replicas replica_acks asks for within {wait_ms} ms: not counted",
                self.replica_acks
            )));
        }
        T::from_redis_value(value).map_err(|e| Failure::Error(self.scrub(&e.to_string())))
    }

    /// Counts one request drained in the background until the guard drops.
    pub(crate) fn draining(&self) -> Draining {
        Draining::new(&self.inflight)
    }

    /// The runtime of the manager this node belongs to.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.rt
    }

    /// The manager's round deadlines.
    pub(crate) fn alarm(&self) -> &Arc<Alarm> {
        &self.alarm
    }

    /// Whether the server takes `SET … NX … GET` (Redis and Valkey 7 and later), as read from
    /// `INFO server` at the last connection.
    pub(crate) fn has_set_nx_get(&self) -> bool {
        self.set_nx_get.load(Ordering::Relaxed)
    }

    /// Runs one pipeline with the per-request timeout (inspection, not locking).
    pub(crate) async fn query_pipe<T: FromRedisValue>(
        self: &Arc<Self>,
        pipe: &redis::Pipeline,
    ) -> Result<T, Failure> {
        let (mut conn, generation) = self.connection()?;
        let reply = tokio::time::timeout(self.node_timeout, pipe.query_async(&mut conn)).await;
        self.settle(reply, generation)
    }

    fn connection(self: &Arc<Self>) -> Result<(Conn, u64), Failure> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        self.schedule_reconnect();
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let why = st.last_error.as_deref().unwrap_or("no connection");
        Err(Failure::Error(format!("not connected: {why}")))
    }

    fn settle<T>(
        self: &Arc<Self>,
        reply: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
        generation: u64,
    ) -> Result<T, Failure> {
        match reply {
            Err(_) => Err(Failure::Timeout),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                // A node that forgot our scripts (SCRIPT FLUSH) gets a fresh connection, which
                // loads them again.
                let noscript =
                    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript);
                // A master demoted to replica by a failover refuses writes: connect again, which
                // finds the new master (Sentinel, a DNS name that moved) or reports the replica.
                let demoted = e.code() == Some("READONLY") || e.to_string().contains("READONLY");
                // A cluster shard's master changed since it was checked: check them again.
                if e.code() == Some("IRONLOCK_STALE") || e.to_string().contains("IRONLOCK_STALE") {
                    self.refresh_shards();
                }
                if noscript || demoted {
                    self.drop_connection(generation, &e.to_string());
                } else if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
                {
                    // Said so in the report and in the error message's per-node summary
                    // ("connection lost: broken pipe"), until a reconnect attempt says more.
                    let why = format!("connection lost: {e}");
                    self.drop_connection(generation, &why);
                    return Err(Failure::Error(self.scrub(&why)));
                }
                Err(Failure::Error(self.scrub(&e.to_string())))
            }
        }
    }

    fn drop_connection(self: &Arc<Self>, generation: u64, why: &str) {
        {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.generation != generation || st.conn.is_none() {
                return;
            }
            st.conn = None;
            st.connected_at = None;
            st.last_error = Some(self.scrub(why));
        }
        tracing::warn!(node = %self.display, error = %self.scrub(why), "connection dropped; reconnecting");
        self.schedule_reconnect();
    }

    /// A snapshot for [`LockManager::node_status`](crate::LockManager::node_status).
    pub(crate) fn status(&self) -> NodeStatus {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let quarantined = st.conn.is_some() && (now < st.eligible_at || !self.confirmed(&st, now));
        let info = st.info.clone().unwrap_or_default();
        let mut status = NodeStatus {
            url: self.display.to_string(),
            connected: st.conn.is_some(),
            eligible: st.conn.is_some()
                && now >= st.eligible_at
                && self.confirmed(&st, now)
                && !self.identities.is_shadowed(self.index),
            quarantine_remaining: st.eligible_at.saturating_duration_since(now),
            run_id: info.run_id,
            version: info.version,
            uptime: st
                .connected_at
                .map(|c| info.uptime + now.saturating_duration_since(c))
                .unwrap_or_default(),
            last_error: st.last_error.clone(),
            same_server_as: self.identities.same_as(self.index).map(|(i, _, _)| i),
            kind: match (&self.sentinel, &self.cluster) {
                (Some(_), _) => "sentinel",
                (None, Some(_)) => "cluster",
                (None, None) => "standalone",
            },
            master: st.master.clone(),
            shards: 0,
            replicas: info.replicas.clone(),
            not_counted_because: None,
            votes_for: self.counters.votes_for.load(Ordering::Relaxed),
            votes_against: self.counters.votes_against.load(Ordering::Relaxed),
            errors: self.counters.errors.load(Ordering::Relaxed),
            timeouts: self.counters.timeouts.load(Ordering::Relaxed),
            not_eligible: self.counters.not_eligible.load(Ordering::Relaxed),
            reconnects: self.counters.reconnects.load(Ordering::Relaxed),
            reseats: self.counters.reseats.load(Ordering::Relaxed),
            quarantines: self.counters.quarantines.load(Ordering::Relaxed),
        };
        drop(st);
        if quarantined || self.identities.is_shadowed(self.index) {
            status.not_counted_because = Some(self.quarantine_text());
        }
        if let Some(cv) = &self.cluster {
            let list = cv.shards.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let now = Instant::now();
            let why: Vec<String> = list.iter().filter_map(|s| s.not_counted(now)).collect();
            status.shards = list.len();
            if !why.is_empty() {
                status.not_counted_because = Some(why.join("; "));
            }
        }
        status
    }
}

/// A connection error, with what to set when it is a TLS handshake failure the user can fix.
/// `tls`: the URL asked for TLS (`rediss://`).
fn with_tls_hint(text: String, tls: bool) -> String {
    let lower = text.to_ascii_lowercase();
    let hint = if tls && lower.contains("timed out") {
        // A plain server reads the ClientHello as a command and waits for the rest of the line.
        "no TLS handshake within connect_timeout: does the server speak TLS on this port (its --tls-port)?"
    } else if !tls && (lower.contains("connection reset") || lower.contains("broken pipe")) {
        // A TLS port drops a client whose first bytes are not a TLS handshake.
        "the server dropped the connection at once: does this port want TLS (a rediss:// URL)?"
    } else if text.contains("CertificateRequired") || text.contains("certificate required") {
        "the server requires a client certificate: set tls_client_cert and tls_client_key"
    } else if text.contains("UnknownIssuer") || text.contains("unknown issuer") {
        "the server's certificate is not signed by a trusted CA: set tls_ca_cert"
    } else if text.contains("NotValidForName") || text.contains("not valid for name") {
        "the server's certificate does not name this host: connect by a name it holds, or set tls_server_name to one"
    } else if text.contains("InvalidContentType") || text.contains("corrupt message") {
        "the server did not answer in TLS: is this its --tls-port?"
    } else if text.contains("BadCertificate") || text.contains("UnknownCA") {
        "the server refused the client certificate: is it signed by a CA the server trusts?"
    } else {
        return text;
    };
    format!("{text} ({hint})")
}
