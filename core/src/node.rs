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
use crate::topology::{self, Identities, ServerInfo, build_client, parse_info};

mod coalesce;

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
    /// Connected and out of restart quarantine: its "yes" votes count.
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
            }),
            reconnecting: AtomicBool::new(false),
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

    /// Connects once (used at manager start); on failure a background reconnect loop takes over.
    /// True when connected.
    pub(crate) async fn connect_or_schedule(self: &Arc<Self>) -> bool {
        // Counts as the reconnect loop while it runs: a request meanwhile starts no other.
        self.reconnecting.store(true, Ordering::Release);
        let attempt = self.try_connect().await;
        self.reconnecting.store(false, Ordering::Release);
        match attempt {
            Ok(()) => true,
            Err(e) => {
                self.note_error(e);
                self.schedule_reconnect();
                false
            }
        }
    }

    /// True when the last connection attempt failed because the host name did not resolve.
    pub(crate) fn unresolvable(&self) -> bool {
        self.unresolvable.load(Ordering::Acquire)
    }

    /// True when the last connection attempt was refused the user name or password: retrying
    /// will not help until someone fixes them.
    pub(crate) fn auth_refused(&self) -> bool {
        self.auth_refused.load(Ordering::Acquire)
    }

    /// A failed connection attempt as the report says it: the server's refusal of the
    /// credentials in plain words (and remembered), a TLS hint where one fits.
    fn connect_error(&self, e: &redis::RedisError) -> String {
        let refused = e.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"));
        self.auth_refused.store(refused, Ordering::Release);
        if refused {
            return format!(
                "authentication failed: the server refused the user name or password (WRONGPASS; {})",
                self.scrub(&e.to_string())
            );
        }
        let tls = self.display.starts_with("rediss");
        with_tls_hint(self.scrub(&e.to_string()), tls)
    }

    /// Restart detection without `INFO`: the age of the node's data from the epoch key (see
    /// [`crate::scripts::EPOCH_SOURCE`]) stands in for its uptime.
    async fn data_age(&self, conn: &mut MultiplexedConnection) -> Result<ServerInfo, String> {
        let (age, born): (i64, i64) = tokio::time::timeout(
            self.connect_timeout,
            redis::cmd("EVAL")
                .arg(crate::scripts::EPOCH_SOURCE)
                .arg(1)
                .arg(&self.epoch_key)
                .query_async(conn),
        )
        .await
        .map_err(|_| "data age (INFO not permitted): no reply within connect_timeout".to_owned())?
        .map_err(|e| {
            format!(
                "INFO is not permitted and the data age key {:?} cannot be used: {}",
                self.epoch_key,
                self.scrub(&e.to_string())
            )
        })?;
        Ok(ServerInfo {
            run_id: format!("epoch:{born}"),
            version: String::new(),
            uptime: Duration::from_secs(age.max(0) as u64),
            ..ServerInfo::default()
        })
    }

    /// How long this promoted master has reigned, from the record on the node (see
    /// [`crate::scripts::MASTER_SOURCE`]).
    async fn reign(
        &self,
        conn: &mut MultiplexedConnection,
        replid: &str,
    ) -> Result<Duration, String> {
        let age: i64 = tokio::time::timeout(
            self.connect_timeout,
            redis::cmd("EVAL")
                .arg(crate::scripts::MASTER_SOURCE)
                .arg(1)
                .arg(&self.master_key)
                .arg(replid)
                .query_async(conn),
        )
        .await
        .map_err(|_| "dating the master's reign: no reply within connect_timeout".to_owned())?
        .map_err(|e| {
            format!(
                "this master was promoted from a replica and the key {:?} that dates its reign cannot be used: {}",
                self.master_key,
                self.scrub(&e.to_string())
            )
        })?;
        Ok(Duration::from_secs(age.max(0) as u64))
    }

    /// Resolves a TCP node's host name first, so that a name that does not resolve is reported
    /// as such ("cannot resolve host …"), not as whatever the connect attempt says.
    async fn resolve(&self) -> Result<(), String> {
        let client = self.client();
        let (host, port) = match client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(h, p) => (h.clone(), *p),
            redis::ConnectionAddr::TcpTls { host, port, .. } => match &self.pinned {
                Some(p) => (p.host.clone(), *port),
                None => (host.clone(), *port),
            },
            _ => return Ok(()),
        };
        let lookup = tokio::time::timeout(
            self.connect_timeout,
            tokio::net::lookup_host((host.as_str(), port)),
        )
        .await;
        let failed = matches!(lookup, Ok(Err(_)));
        self.unresolvable.store(failed, Ordering::Release);
        match lookup {
            Ok(Err(e)) => Err(format!(
                "cannot resolve host {:?}: {e}",
                crate::config::cut(&host)
            )),
            Err(_) => Err(format!(
                "cannot resolve host {:?}: no answer within connect_timeout",
                crate::config::cut(&host)
            )),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// The data node's client (cheap to clone).
    fn client(&self) -> redis::Client {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Points a Sentinel voter's client at the master its sentinels name now.
    async fn find_master(&self) -> Result<(), String> {
        let Some((spec, template, tls)) = &self.sentinel else {
            return Ok(());
        };
        // The sentinels' own password is hidden too, wherever a sentinel's error shows it.
        let sentinel_secret = spec
            .sentinels
            .first()
            .and_then(|s| s.redis_settings().password());
        let hide = |e: &str| scrub(&self.scrub(e), sentinel_secret);
        let (client, master) =
            topology::find_master(spec, template, tls, self.connect_timeout, hide).await?;
        *self.client.lock().unwrap_or_else(|p| p.into_inner()) = client;
        self.state.lock().unwrap_or_else(|p| p.into_inner()).master = Some(master);
        Ok(())
    }

    /// Connects a cluster voter: the cluster connection, then every shard's master checked.
    async fn connect_cluster(&self, cv: &ClusterVoter) -> Result<(), String> {
        let client =
            shards::cluster_client(&cv.spec.seeds, &cv.template, &cv.tls, self.connect_timeout)?;
        let mut conn = tokio::time::timeout(self.connect_timeout, client.get_async_connection())
            .await
            .map_err(|_| "no cluster connection within connect_timeout".to_owned())?
            .map_err(|e| self.scrub(&e.to_string()))?;
        let read = shards::read(&mut conn, &self.check(cv))
            .await
            .map_err(|e| self.scrub(&e))?;
        self.install_shards(cv, read.list);
        let received = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.closed {
            return Ok(());
        }
        st.conn = Some(Conn::Cluster(conn));
        st.generation += 1;
        st.eligible_at = received;
        st.quarantine = Quarantine::Restart;
        st.connected_at = Some(received);
        st.info = Some(ServerInfo {
            version: read.version,
            ..ServerInfo::default()
        });
        st.last_error = None;
        Ok(())
    }

    fn check<'a>(&self, cv: &'a ClusterVoter) -> shards::Check<'a> {
        shards::Check {
            template: &cv.template,
            tls: &cv.tls,
            connect_timeout: self.connect_timeout,
            quarantine: self.quarantine,
            key_prefix: &cv.key_prefix,
        }
    }

    /// Takes a fresh reading of the shards; a change of any shard's master is a change of the
    /// voter's data (re-seat writes keys back there).
    fn install_shards(&self, cv: &ClusterVoter, list: Vec<Shard>) {
        let signature: String = list
            .iter()
            .map(|s| format!("{}-{}={}/{};", s.start, s.end, s.addr, s.replid))
            .collect();
        let mut old = cv.signature.lock().unwrap_or_else(|p| p.into_inner());
        if *old != signature {
            self.data_epoch.fetch_add(1, Ordering::AcqRel);
            *old = signature;
        }
        drop(old);
        *cv.shards.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(list);
    }

    /// Reads a cluster voter's shards again in the background (a vote found a shard served by
    /// a master other than the one checked), unless a reading is under way.
    fn refresh_shards(self: &Arc<Self>) {
        let Some(cv) = &self.cluster else { return };
        if cv.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        self.rt.spawn(async move {
            let Some(node) = weak.upgrade() else { return };
            let Some(cv) = &node.cluster else { return };
            if let Some((Conn::Cluster(mut conn), _)) = node.current() {
                match shards::read(&mut conn, &node.check(cv)).await {
                    Ok(read) => node.install_shards(cv, read.list),
                    Err(e) => node.note_error(node.scrub(&e)),
                }
            }
            cv.refreshing.store(false, Ordering::Release);
        });
    }

    async fn try_connect(&self) -> Result<(), String> {
        if let Some(cv) = &self.cluster {
            self.resolve().await?;
            return self.connect_cluster(cv).await;
        }
        self.find_master().await?;
        self.resolve().await?;
        let mut config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None)
            .set_pipeline_buffer_size(4096);
        if let Some(p) = &self.pinned {
            config = config.set_dns_resolver(p.clone());
        }
        let mut conn = self
            .client()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.connect_error(&e))?;
        // Read uptime after connecting: a node that restarted lost its keys and must stay out of
        // the quorum until every lock it might have held has expired (seeds: delayed restarts).
        let mut ask = redis::pipe();
        ask.cmd("INFO").arg("server").cmd("INFO").arg("replication");
        let reply: redis::RedisResult<(String, String)> =
            tokio::time::timeout(self.connect_timeout, ask.query_async(&mut conn))
                .await
                .map_err(|_| "INFO server: no reply within connect_timeout".to_owned())?;
        let info = match reply {
            Ok((server, replication)) => parse_info(&format!("{server}\r\n{replication}")),
            // INFO is @dangerous: a least-privilege ACL user dates the node's data instead.
            Err(e) if e.code() == Some("NOPERM") => match self.quarantine {
                Some(_) => self.data_age(&mut conn).await?,
                None => ServerInfo::default(),
            },
            Err(e) => return Err(self.scrub(&e.to_string())),
        };
        if info.cluster_node {
            // Its keys would be spread over shards this connection cannot reach (MOVED for
            // most names), and its other nodes listed as more voters would vote twice.
            return Err(format!(
                "is a node of a Redis Cluster (redis_mode:cluster), which serves only its own hash slots: give the whole cluster as one voter, redis-cluster://{}",
                self.display
                    .split_once("://")
                    .map_or(&*self.display, |(_, rest)| rest)
            ));
        }
        if info.role == "slave" {
            // A voter writes its keys on a master; a replica refuses them (READONLY).
            return Err(format!(
                "is a replica (of {}), not a master: a voter must be a master (after a failover, name the new master, or let Sentinel find it with a redis-sentinel:// URL)",
                crate::config::cut(&info.master_of_replica)
            ));
        }
        // A master promoted from a replica may lack keys its old master granted and had not
        // replicated: its reign is dated on the node itself, so that a client that never saw
        // the old master keeps it out as long as one that did.
        // With replica acknowledgement every granted key reached the replicas before it
        // counted, so the promoted one has them all: no failover quarantine.
        let reign = match (self.quarantine, info.promoted) {
            (Some(_), true) if self.replica_acks == 0 => {
                Some(self.reign(&mut conn, &info.replid).await?)
            }
            _ => None,
        };
        let received = Instant::now();
        let mut load = redis::pipe();
        for source in crate::scripts::ALL_SOURCES {
            load.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        tokio::time::timeout(
            self.connect_timeout,
            load.query_async::<Vec<String>>(&mut conn),
        )
        .await
        .map_err(|_| "SCRIPT LOAD: no reply within connect_timeout".to_owned())?
        .map_err(|e| self.scrub(&e.to_string()))?;
        // uptime_in_seconds is floored: the true uptime may be up to 1 s more, so the +1 s in the
        // quarantine makes this conservative.
        let (eligible_at, why) = match self.quarantine {
            Some(q) => {
                let restart = received + q.saturating_sub(info.uptime);
                match reign {
                    Some(age) if received + q.saturating_sub(age) > restart => {
                        (received + q.saturating_sub(age), Quarantine::Failover(age))
                    }
                    _ => (restart, Quarantine::Restart),
                }
            }
            None => (received, Quarantine::Restart),
        };
        let major: Option<u32> = info.version.split('.').next().and_then(|m| m.parse().ok());
        self.set_nx_get
            .store(major.is_some_and(|m| m >= 7), Ordering::Relaxed);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.closed {
            // The manager closed while this connection was being made: drop it.
            return Ok(());
        }
        let same_data = st
            .info
            .as_ref()
            .is_some_and(|old| old.run_id == info.run_id || info.run_id.is_empty());
        if !same_data {
            self.data_epoch.fetch_add(1, Ordering::AcqRel);
        }
        if eligible_at > received {
            self.counters.quarantines.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("ironlock_quarantines_total").increment(1);
        }
        st.conn = Some(Conn::Single(conn));
        st.generation += 1;
        st.eligible_at = eligible_at;
        st.quarantine = why;
        st.connected_at = Some(received);
        // A data epoch (no INFO) dates the data to the second and two servers may share it:
        // only a real run_id says that two URLs are one server.
        let id = if info.run_id.starts_with("epoch:") {
            ""
        } else {
            info.run_id.as_str()
        };
        self.identities.record(self.index, id);
        st.info = Some(info);
        st.last_error = None;
        drop(st);
        tracing::debug!(node = %self.display, quarantined_for = ?eligible_at.saturating_duration_since(received), "connected");
        Ok(())
    }

    fn note_error(&self, e: String) {
        tracing::warn!(node = %self.display, error = %e, "node connection failed");
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_error = Some(e);
    }

    /// Closes the connection for good (the manager closed): the socket is released now, not
    /// when the last handle of the manager goes away, and no reconnection is made. Requests
    /// still in flight finish on their own handle of the connection.
    pub(crate) fn close(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.closed = true;
        st.conn = None;
        st.connected_at = None;
        st.last_error = Some("the lock manager is closed".to_owned());
    }

    fn is_closed(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).closed
    }

    /// Starts the background reconnect loop on the manager's runtime unless one runs already.
    fn schedule_reconnect(self: &Arc<Self>) {
        if self.is_closed() {
            return;
        }
        if self.reconnecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Node> = Arc::downgrade(self);
        self.rt.spawn(async move {
            let mut backoff = Duration::from_millis(20);
            loop {
                tokio::time::sleep(backoff).await;
                let Some(node) = weak.upgrade() else { return };
                if node.is_closed() {
                    return;
                }
                match node.try_connect().await {
                    Ok(()) => {
                        node.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                        node.reconnecting.store(false, Ordering::Release);
                        return;
                    }
                    Err(e) => node.note_error(e),
                }
                // Capped well below the shortest useful ttl: a held lock re-seats on a restarted
                // node only once it is connected again (SPEC §12), and a rolling restart gives
                // each node one short window.
                backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
            }
        });
    }

    fn current(&self) -> Option<(Conn, u64)> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.conn.clone().map(|c| (c, st.generation))
    }

    /// Which lifetime of the node's data the current connection sees (0: never connected).
    pub(crate) fn data_epoch(&self) -> u64 {
        self.data_epoch.load(Ordering::Acquire)
    }

    /// Whether this node's "yes" counts now (restart quarantine over, and not the same server
    /// as an earlier node).
    pub(crate) fn eligible(&self) -> bool {
        !self.identities.is_shadowed(self.index)
            && Instant::now()
                >= self
                    .state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .eligible_at
    }

    /// Why this node's "yes" does not count yet, for the report: when it restarted and when it
    /// counts again.
    pub(crate) fn quarantine_text(&self) -> String {
        if let Some(text) = self.same_server_text() {
            return text;
        }
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
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
        let quarantined = st.conn.is_some() && Instant::now() < st.eligible_at;
        let now = Instant::now();
        let info = st.info.clone().unwrap_or_default();
        let mut status = NodeStatus {
            url: self.display.to_string(),
            connected: st.conn.is_some(),
            eligible: st.conn.is_some()
                && now >= st.eligible_at
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
