//! Settings, their defaults, and the validation every binding relies on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
pub(crate) use crate::urls::{ClusterSpec, NodeSpec, SentinelSpec};
pub use crate::urls::{
    NodeParts, agree_sentinel_login, node_url, nodes_from_env, redact_url, split_node_list,
};
use crate::urls::{parse_node, server_identity};

/// Settings of a [`LockManager`](crate::LockManager). Built with chained setters; validated by
/// [`LockManager::new`](crate::LockManager::new), which names the first bad argument.
///
/// ```
/// use std::time::Duration;
/// let config = ironlock::Config::new(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002"])
///     .retry_count(3)
///     .retry_delay(Duration::from_millis(100))
///     .key_prefix("locks:");
/// assert_eq!(config.nodes().len(), 2);
/// ```
#[derive(Clone, PartialEq)]
pub struct Config {
    pub(crate) nodes: Vec<String>,
    pub(crate) retry_count: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) drift_constant: Duration,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_ttl: Duration,
    pub(crate) restart_quarantine: bool,
    pub(crate) replica_acks: u32,
    pub(crate) reseat: bool,
    pub(crate) key_prefix: String,
    pub(crate) min_validity: Duration,
    pub(crate) max_extensions: Option<u32>,
    pub(crate) extension_threshold: Option<Duration>,
    pub(crate) fair: bool,
    pub(crate) queue_timeout: Option<Duration>,
    pub(crate) tls_ca_cert: Option<Vec<u8>>,
    pub(crate) tls_client_cert: Option<Vec<u8>>,
    pub(crate) tls_client_key: Option<Vec<u8>>,
    pub(crate) tls_server_name: Option<String>,
    /// Per-node TLS, by node index (validated against the node list).
    pub(crate) node_tls: BTreeMap<usize, NodeTls>,
    pub(crate) sentinel_username: Option<String>,
    pub(crate) sentinel_password: Option<String>,
}

/// TLS settings of one node that override the manager's for that node only; a field left `None`
/// takes the manager's ([`Config::tls_ca_cert`], [`Config::tls_client_cert`],
/// [`Config::tls_client_key`], [`Config::tls_server_name`]). Give it with [`Config::node_tls`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NodeTls {
    /// The CA (PEM) this node's certificate is checked against.
    pub ca_cert: Option<Vec<u8>>,
    /// The client certificate (PEM) this node wants for mutual TLS.
    pub client_cert: Option<Vec<u8>>,
    /// The private key (PEM) of `client_cert`. Never shown in `Debug` or errors.
    pub client_key: Option<Vec<u8>>,
    /// The name this node's certificate must hold, when the URL's host is not it (an IP
    /// address, a load balancer's name); also sent as the TLS server name (SNI).
    pub server_name: Option<String>,
}

impl fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTls")
            .field("ca_cert", &self.ca_cert.as_ref().map(|_| "<PEM>"))
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<PEM>"))
            .field("client_key", &self.client_key.as_ref().map(|_| "***"))
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// Defaults, as in the seeds where they give one.
pub mod defaults {
    use std::time::Duration;
    /// Further rounds after the first.
    pub const RETRY_COUNT: u32 = 10;
    /// Mean pause between rounds.
    pub const RETRY_DELAY: Duration = Duration::from_millis(200);
    /// Uniform ± spread around `RETRY_DELAY`.
    pub const RETRY_JITTER: Duration = Duration::from_millis(100);
    /// Clock drift allowance per unit of ttl.
    pub const DRIFT_FACTOR: f64 = 0.01;
    /// Fixed clock drift allowance.
    pub const DRIFT_CONSTANT: Duration = Duration::from_millis(2);
    /// Per-node request timeout.
    pub const NODE_TIMEOUT: Duration = Duration::from_millis(50);
    /// Per-node connection timeout.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
    /// Longest ttl any acquire or extend may ask for; also the restart quarantine length.
    pub const MAX_TTL: Duration = Duration::from_secs(60);
}

impl Config {
    /// A configuration for the given node URLs with every other setting at its default.
    pub fn new<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Config {
            nodes: nodes.into_iter().map(Into::into).collect(),
            retry_count: defaults::RETRY_COUNT,
            retry_delay: defaults::RETRY_DELAY,
            retry_jitter: defaults::RETRY_JITTER,
            drift_factor: defaults::DRIFT_FACTOR,
            drift_constant: defaults::DRIFT_CONSTANT,
            node_timeout: defaults::NODE_TIMEOUT,
            connect_timeout: defaults::CONNECT_TIMEOUT,
            max_ttl: defaults::MAX_TTL,
            restart_quarantine: true,
            replica_acks: 0,
            reseat: true,
            key_prefix: String::new(),
            min_validity: Duration::ZERO,
            max_extensions: None,
            extension_threshold: None,
            fair: false,
            queue_timeout: None,
            tls_ca_cert: None,
            tls_client_cert: None,
            tls_client_key: None,
            tls_server_name: None,
            node_tls: BTreeMap::new(),
            sentinel_username: None,
            sentinel_password: None,
        }
    }

    /// The node URLs as given (they may contain passwords: do not log them).
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        impl Config {
            $(
                $(#[$doc])*
                #[must_use]
                pub fn $name(mut self, value: $ty) -> Self {
                    self.$name = value;
                    self
                }
            )*
        }
    };
}

setters! {
    /// Further rounds after the first (0 = try once). Default 10.
    retry_count: u32;
    /// Mean pause between rounds. Default 200 ms.
    retry_delay: Duration;
    /// Uniform ± spread of the pause. Default 100 ms.
    retry_jitter: Duration;
    /// Drift allowance per unit of ttl, in [0, 0.5). Default 0.01.
    drift_factor: f64;
    /// Fixed drift allowance. Default 2 ms.
    drift_constant: Duration;
    /// Per-node request timeout, far below any ttl. Default 50 ms.
    node_timeout: Duration;
    /// Per-node connection timeout. Default 1 s.
    connect_timeout: Duration;
    /// Largest ttl allowed, and the quarantine of a restarted node. Default 60 s.
    max_ttl: Duration;
    /// Keep restarted nodes out of the quorum for `max_ttl` + drift + 1 s. Default on; switch off
    /// only for nodes that persist with `appendfsync always`.
    restart_quarantine: bool;
    /// Replica acknowledgement (0 = off, the default; at most 16): a node's "yes" counts only
    /// once this many of its master's replicas have acknowledged the write (`WAIT n
    /// node_timeout/2` sent right after it on the same connection); fewer in that time makes
    /// the vote an error. A master promoted from such a replica then holds every lock its
    /// old master granted, so a voter whose master changed counts at once instead of sitting
    /// out the failover quarantine (the restart quarantine still applies). Safe only when
    /// **every** client of these nodes sets it, to the number of replicas each master has: a
    /// client without it may hold a lock that no replica has. Not for `redis-cluster://`
    /// voters (refused by [`Config::check`]): WAIT cannot follow a write through the cluster
    /// client, so they keep the failover quarantine.
    replica_acks: u32;
    /// Re-seat on extension: an extension that finds a held lock's keys gone from a
    /// node that restarted since it last held them writes them back there (`SET NX`, never over
    /// another token), so a lock held through a rolling restart of every node is not lost.
    /// Default on.
    reseat: bool;
    /// A grant needs validity above this. Default 0.
    min_validity: Duration;
    /// How often one lock may be extended. Default unlimited.
    max_extensions: Option<u32>;
    /// Auto-extension extends when remaining validity falls below this. Default ttl / 3.
    extension_threshold: Option<Duration>;
    /// Acquire fairly (FIFO) unless an acquire says otherwise. Default off.
    fair: bool;
    /// How long a fair waiter's queue entry outlives its last heartbeat (a waiter that crashed
    /// or went silent drops out of line after this). Default `None`: 2 × `retry_delay`.
    queue_timeout: Option<Duration>;
}

impl Config {
    /// The ACL user name that `redis-sentinel://` voters log in to their sentinels with (the
    /// URL's own credentials are the data nodes'). Default: none.
    #[must_use]
    pub fn sentinel_username(mut self, user: Option<String>) -> Self {
        self.sentinel_username = user;
        self
    }

    /// The password that `redis-sentinel://` voters log in to their sentinels with (a
    /// sentinel's `requirepass`). Never shown in `Debug` or errors. Default: none.
    #[must_use]
    pub fn sentinel_password(mut self, password: Option<String>) -> Self {
        self.sentinel_password = password;
        self
    }

    /// Prepended to every resource name to form the Redis key. Default empty.
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }
}

impl Config {
    /// Trust only this CA (PEM) for `rediss://` nodes instead of the system's trust store
    /// (certificate verification is always on).
    #[must_use]
    pub fn tls_ca_cert(mut self, pem: Option<Vec<u8>>) -> Self {
        self.tls_ca_cert = pem;
        self
    }

    /// The client certificate (PEM, with its chain) for mutual TLS (servers with
    /// `tls-auth-clients yes`, Redis's default); give its key with [`Config::tls_client_key`].
    #[must_use]
    pub fn tls_client_cert(mut self, pem: Option<Vec<u8>>) -> Self {
        self.tls_client_cert = pem;
        self
    }

    /// The private key (PEM) of [`Config::tls_client_cert`]. Never shown in `Debug` or errors.
    #[must_use]
    pub fn tls_client_key(mut self, pem: Option<Vec<u8>>) -> Self {
        self.tls_client_key = pem;
        self
    }

    /// The name every `rediss://` node's certificate must hold when the URLs name the nodes
    /// otherwise (by IP address, say); also sent as the TLS server name (SNI). redis-cli's
    /// `--sni`. Verification stays on: the certificate must be valid for this name.
    #[must_use]
    pub fn tls_server_name(mut self, name: Option<String>) -> Self {
        self.tls_server_name = name;
        self
    }

    /// TLS settings for node `index` (in the order of the node list) that override the
    /// manager's for that node: its own CA, client certificate and key, or server name. The node
    /// must be a `rediss://` URL. Given twice for one node, the last one counts.
    #[must_use]
    pub fn node_tls(mut self, index: usize, tls: NodeTls) -> Self {
        self.node_tls.insert(index, tls);
        self
    }

    /// What node `index` connects with: its own TLS settings, else the manager's.
    pub(crate) fn effective_tls(&self, index: usize) -> EffectiveTls {
        let own = self.node_tls.get(&index);
        let pick =
            |mine: Option<&Vec<u8>>, manager: &Option<Vec<u8>>| mine.or(manager.as_ref()).cloned();
        let cert = pick(
            own.and_then(|t| t.client_cert.as_ref()),
            &self.tls_client_cert,
        );
        let key = pick(
            own.and_then(|t| t.client_key.as_ref()),
            &self.tls_client_key,
        );
        EffectiveTls {
            ca_cert: pick(own.and_then(|t| t.ca_cert.as_ref()), &self.tls_ca_cert),
            client: cert.zip(key),
            server_name: own
                .and_then(|t| t.server_name.clone())
                .or_else(|| self.tls_server_name.clone()),
        }
    }
}

/// The TLS one node connects with (its own settings over the manager's).
#[derive(Clone, Default)]
pub(crate) struct EffectiveTls {
    pub(crate) ca_cert: Option<Vec<u8>>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
    pub(crate) server_name: Option<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|u| redact_url(u)).collect();
        f.debug_struct("Config")
            .field("nodes", &nodes)
            .field("retry_count", &self.retry_count)
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .field("drift_factor", &self.drift_factor)
            .field("drift_constant", &self.drift_constant)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_ttl", &self.max_ttl)
            .field("restart_quarantine", &self.restart_quarantine)
            .field("reseat", &self.reseat)
            .field("key_prefix", &self.key_prefix)
            .field("min_validity", &self.min_validity)
            .field("max_extensions", &self.max_extensions)
            .field("extension_threshold", &self.extension_threshold)
            .field("fair", &self.fair)
            .field("queue_timeout", &self.queue_timeout)
            .field("tls_ca_cert", &self.tls_ca_cert.as_ref().map(|_| "<PEM>"))
            .field(
                "tls_client_cert",
                &self.tls_client_cert.as_ref().map(|_| "<PEM>"),
            )
            .field(
                "tls_client_key",
                &self.tls_client_key.as_ref().map(|_| "***"),
            )
            .field("tls_server_name", &self.tls_server_name)
            .field("node_tls", &self.node_tls)
            .field("sentinel_username", &self.sentinel_username)
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
            .finish()
    }
}

impl Config {
    /// Checks every setting and parses every URL without connecting; names the first bad
    /// argument. [`LockManager::new`](crate::LockManager::new) runs the same checks.
    pub fn check(&self) -> Result<()> {
        self.validate().map(drop)
    }

    /// Checks every setting and parses every URL; names the first bad argument.
    pub(crate) fn validate(&self) -> Result<Vec<NodeSpec>> {
        if self.nodes.is_empty() {
            return Err(Error::invalid("nodes: the node list is empty"));
        }
        if self.nodes.len() > 64 {
            return Err(Error::invalid(format!(
                "nodes: at most 64 nodes are supported, got {}",
                self.nodes.len()
            )));
        }
        if !(self.drift_factor >= 0.0 && self.drift_factor < 0.5) {
            return Err(Error::invalid(format!(
                "drift_factor: must be in [0, 0.5), got {}",
                self.drift_factor
            )));
        }
        nonzero("node_timeout", self.node_timeout)?;
        nonzero("connect_timeout", self.connect_timeout)?;
        nonzero("max_ttl", self.max_ttl)?;
        for (name, d) in [
            ("retry_delay", self.retry_delay),
            ("retry_jitter", self.retry_jitter),
            ("node_timeout", self.node_timeout),
            ("connect_timeout", self.connect_timeout),
            ("drift_constant", self.drift_constant),
        ] {
            if d > DAY {
                return Err(Error::invalid(format!(
                    "{name}: must be at most a day (86400 s)"
                )));
            }
        }
        if self.max_ttl > MAX_TTL_LIMIT {
            return Err(Error::invalid(
                "max_ttl: must be at most 2^53 - 1 ms (9007199254740991 ms, JavaScript's largest exact integer)",
            ));
        }
        if self.drift(self.max_ttl) >= self.max_ttl {
            return Err(Error::invalid(
                "max_ttl: must exceed its own drift allowance (drift_factor × max_ttl + drift_constant)",
            ));
        }
        if self.replica_acks > 16 {
            return Err(Error::invalid(format!(
                "replica_acks: must be 0 (off) to 16 replicas, got {}",
                self.replica_acks
            )));
        }
        if self.min_validity >= self.max_ttl {
            return Err(Error::invalid("min_validity: must be below max_ttl"));
        }
        if let Some(t) = self.extension_threshold {
            nonzero("extension_threshold", t)?;
            if t >= self.max_ttl {
                return Err(Error::invalid("extension_threshold: must be below max_ttl"));
            }
        }
        if let Some(t) = self.queue_timeout {
            nonzero("queue_timeout", t)?;
            if t > DAY {
                return Err(Error::invalid(
                    "queue_timeout: must be at most a day (86400 s)",
                ));
            }
        }
        if self.tls_client_cert.is_some() != self.tls_client_key.is_some() {
            return Err(Error::invalid(if self.tls_client_cert.is_some() {
                "tls_client_key: a client certificate needs its private key"
            } else {
                "tls_client_cert: a client key needs its certificate"
            }));
        }
        if let Some(name) = &self.tls_server_name {
            check_server_name("tls_server_name", name)?;
        }
        for (i, tls) in &self.node_tls {
            let name = format!("node_tls[{i}]");
            if *i >= self.nodes.len() {
                return Err(Error::invalid(format!(
                    "{name}: there is no node {i} (the node list has {})",
                    self.nodes.len()
                )));
            }
            if tls.client_cert.is_some() != tls.client_key.is_some() {
                return Err(Error::invalid(if tls.client_cert.is_some() {
                    format!("{name}.client_key: a client certificate needs its private key")
                } else {
                    format!("{name}.client_cert: a client key needs its certificate")
                }));
            }
            if let Some(server) = &tls.server_name {
                check_server_name(&format!("{name}.server_name"), server)?;
            }
        }
        if self.key_prefix.contains('\0') {
            return Err(Error::invalid("key_prefix: must not contain NUL"));
        }
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut specs = Vec::with_capacity(self.nodes.len());
        for (i, url) in self.nodes.iter().enumerate() {
            let mut spec = parse_node(i, url, self)?;
            let tls = matches!(spec.info.addr(), redis::ConnectionAddr::TcpTls { .. });
            if !tls && self.node_tls.contains_key(&i) {
                return Err(Error::invalid(format!(
                    "node_tls[{i}]: nodes[{i}] ({}) does not use TLS (a rediss:// URL does)",
                    cut(&spec.display)
                )));
            }
            if tls {
                spec.tls = self.effective_tls(i);
            }
            let identity = match (&spec.sentinel, &spec.cluster) {
                (Some(s), _) => format!("sentinel:{}", s.master),
                (None, Some(c)) => c
                    .seeds
                    .first()
                    .map(|seed| format!("cluster:{}", server_identity(seed.addr())))
                    .unwrap_or_default(),
                (None, None) => server_identity(spec.info.addr()),
            };
            if let Some(&first) = seen.get(&identity) {
                let earlier: &NodeSpec = &specs[first];
                return Err(Error::invalid(format!(
                    "nodes[{i}]: duplicate node {}: the same server as nodes[{first}] ({}); one server is one vote, whatever its database number",
                    cut(&spec.display),
                    cut(&earlier.display)
                )));
            }
            if self.replica_acks > 0 && spec.cluster.is_some() {
                return Err(Error::invalid(format!(
                    "replica_acks: not available with a Redis Cluster voter (nodes[{i}] {}): WAIT cannot follow a write through the cluster client, so a cluster voter keeps the failover quarantine; set replica_acks to 0",
                    cut(&spec.display)
                )));
            }
            seen.insert(identity, i);
            specs.push(spec);
        }
        Ok(specs)
    }

    /// The queue timeout in effect: the setting, or 2 × `retry_delay` (at least 10 ms).
    pub(crate) fn effective_queue_timeout(&self) -> Duration {
        self.queue_timeout
            .unwrap_or_else(|| (self.retry_delay * 2).max(Duration::from_millis(10)))
    }

    /// drift = ttl × drift_factor + drift_constant.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        crate::quorum::drift(ttl, self.drift_factor, self.drift_constant)
    }

    /// Checks a ttl given to acquire or extend.
    pub(crate) fn check_ttl(&self, name: &str, ttl: Duration) -> Result<()> {
        if ttl.is_zero() {
            return Err(Error::invalid(format!("{name}: must be positive")));
        }
        if ttl > self.max_ttl {
            return Err(Error::invalid(format!(
                "{name}: must be at most max_ttl ({:?})",
                self.max_ttl
            )));
        }
        if ttl <= self.drift(ttl) + self.min_validity {
            return Err(Error::invalid(format!(
                "{name}: {ttl:?} leaves no validity after the drift allowance ({:?}) and min_validity",
                self.drift(ttl)
            )));
        }
        Ok(())
    }
}

const DAY: Duration = Duration::from_secs(86_400);

/// A TLS server name: a DNS name (letters, digits, `-`, `.`, at most 253 characters) or an IP
/// address.
fn check_server_name(name: &str, value: &str) -> Result<()> {
    let dns = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if dns || value.parse::<std::net::IpAddr>().is_ok() {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{name}: {:?} is not a DNS name or an IP address",
            cut(value)
        )))
    }
}

/// The largest `max_ttl`: 2^53 − 1 ms, the largest integer a JavaScript number holds exactly
/// (node-redlock's users pass durations up to `Number.MAX_SAFE_INTEGER`); Redis takes it in PX.
const MAX_TTL_LIMIT: Duration = Duration::from_millis((1 << 53) - 1);

/// A number for a message: in full when short, in scientific notation when huge (1e300 is not
/// printed with its 301 digits).
fn number(x: f64) -> String {
    if x.is_finite() && x.abs() >= 1e15 {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

fn nonzero(name: &str, d: Duration) -> Result<()> {
    if d.is_zero() {
        return Err(Error::invalid(format!("{name}: must be positive")));
    }
    Ok(())
}

/// How to write a password or user name with reserved characters, quoted by every error about
/// a URL whose credentials did not parse.
/// Resource names for a message, cut like [`cut`].
pub(crate) fn quote_resources<S: AsRef<str>>(resources: &[S]) -> String {
    let names: Vec<&str> = resources.iter().map(AsRef::as_ref).collect();
    cut(&format!("{names:?}"))
}

/// At most about 80 characters of `text` for a message, with "…" and the full length when cut.
pub fn cut(text: &str) -> String {
    const LIMIT: usize = 80;
    if text.chars().count() <= LIMIT {
        return text.to_owned();
    }
    let head: String = text.chars().take(LIMIT).collect();
    format!("{head}… ({} characters)", text.chars().count())
}

/// Removes a secret from free text (error messages from the Redis client).
pub(crate) fn scrub(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if !s.is_empty() => text.replace(s, "***"),
        _ => text.to_owned(),
    }
}

/// Converts a binding's float seconds (Python) to a `Duration`, naming the argument when the value
/// is negative, NaN or infinite.
pub fn duration_from_secs_f64(name: &str, secs: f64) -> Result<Duration> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(Error::invalid(format!(
            "{name}: must be a finite, non-negative number of seconds, got {}",
            number(secs)
        )));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| {
        Error::invalid(format!(
            "{name}: {} seconds is out of range (at most {} s)",
            number(secs),
            u64::MAX
        ))
    })
}

/// Converts a binding's milliseconds (Node numbers, C integers) to a `Duration`, naming the
/// argument when the value is negative, fractional, NaN or infinite.
pub fn duration_from_millis_f64(name: &str, ms: f64) -> Result<Duration> {
    if !ms.is_finite() || ms < 0.0 || ms.fract() != 0.0 || ms > u64::MAX as f64 {
        return Err(Error::invalid(format!(
            "{name}: must be a non-negative integer number of milliseconds, got {}",
            number(ms)
        )));
    }
    Ok(Duration::from_millis(ms as u64))
}

/// Checks a resource list: non-empty, no empty names, no duplicates. (NUL bytes are valid in a
/// Redis key, so they are allowed; C callers cannot pass them anyway.)
pub fn validate_resources<S: AsRef<str>>(resources: &[S]) -> Result<()> {
    if resources.is_empty() {
        return Err(Error::invalid("resources: the resource list is empty"));
    }
    // A set only for long lists: most calls name one resource, and a few compare faster than
    // they hash (and allocate nothing).
    let mut seen = (resources.len() > 8).then(|| HashSet::with_capacity(resources.len()));
    for (i, r) in resources.iter().enumerate() {
        let r = r.as_ref();
        check_name(|| format!("resources[{i}]"), "resource", r)?;
        let duplicate = match seen.as_mut() {
            Some(seen) => !seen.insert(r),
            None => resources[..i].iter().any(|p| p.as_ref() == r),
        };
        if duplicate {
            return Err(Error::invalid(format!(
                "resources[{i}]: duplicate resource {:?}",
                cut(r)
            )));
        }
    }
    Ok(())
}

/// The suffixes ironlock appends to a resource's key for keys of its own (fence counter,
/// semaphore, fair queue, heartbeats, tickets). A resource whose name ends in one would share a
/// key with another resource's (`job:ironlock:fence` is `job`'s fence counter), so such names
/// are refused.
pub const RESERVED_SUFFIXES: [&str; 9] = [
    ":ironlock:fence",
    ":ironlock:semaphore",
    ":ironlock:queue",
    ":ironlock:beats",
    ":ironlock:ticket",
    ":ironlock:limit",
    ":ironlock:readers",
    ":ironlock:writer",
    ":ironlock:leader",
];

/// One name: not empty, not ending in a [`RESERVED_SUFFIXES`] entry; `what` names the
/// argument, `noun` what it names ("resource", "election").
fn check_name(what: impl Fn() -> String, noun: &str, r: &str) -> Result<()> {
    if r.is_empty() {
        return Err(Error::invalid(format!("{}: empty {noun} name", what())));
    }
    if let Some(suffix) = RESERVED_SUFFIXES.iter().find(|s| r.ends_with(*s)) {
        return Err(Error::invalid(format!(
            "{}: a name ending in {suffix:?} would share a key that ironlock keeps for {:?}",
            what(),
            cut(&r[..r.len() - suffix.len()])
        )));
    }
    Ok(())
}

/// Checks one resource name (a semaphore's): not empty, not ending in one of the
/// [`RESERVED_SUFFIXES`]. Errors name the argument `resource`.
pub fn validate_resource(name: &str) -> Result<()> {
    check_name(|| "resource".to_owned(), "resource", name)
}

/// Checks an election's name as [`validate_resource`] checks a resource's (it is the election's
/// lock key); errors name the argument `name`.
pub fn validate_election_name(name: &str) -> Result<()> {
    check_name(|| "name".to_owned(), "election", name)
}

/// Turns raw bytes (from C) into a resource name, naming the argument when they are not UTF-8.
pub fn resource_from_bytes(index: usize, bytes: &[u8]) -> Result<String> {
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| Error::invalid(format!("resources[{index}]: not valid UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn redacts_userinfo_and_query_passwords() {
        assert_eq!(redact_url("redis://u:abc@defghi@[::"), "redis://***@[::");
        assert!(!redact_url("redis://[::1?pass=secret").contains("secret"));
        assert!(!redact_url("redis:;/x http://user:pw@h").contains("pw"));
        assert!(!redact_url("https:h/x://user:pw@h").contains("pw"));
        assert!(!redact_url("redis:/x[::edis://alice:s3cret@1").contains("s3cret"));
        assert!(
            !redact_url("unix:?db=0&pa\u{fffd}=redis://alice:s3cret@127.0.0.1").contains("s3cret")
        );
        assert_eq!(
            redact_url("redis://alice:s3cret@127.0.0.1:6379/2"),
            "redis://alice:***@127.0.0.1:6379/2"
        );
        assert_eq!(redact_url("redis://:s3cret@h:1"), "redis://:***@h:1");
        let u = redact_url("unix:///tmp/r.sock?db=1&pass=s3cret");
        assert!(!u.contains("s3cret") && u.contains("pass=***"), "{u}");
        assert_eq!(redact_url("not a url s3cret@host"), "***@host");
        let e = Config::new(["https:/h:secret@x/://y"]).check().unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        let e = Config::new(["redis://127.0.0.1:1"])
            .drift_constant(Duration::MAX)
            .check()
            .unwrap_err();
        assert!(e.message().starts_with("drift_constant"), "{e}");
        let e = Config::new(["redis://127.0.0.1:1"])
            .retry_delay(Duration::MAX)
            .check()
            .unwrap_err();
        assert!(e.message().starts_with("retry_delay"), "{e}");
    }

    #[test]
    fn reserved_characters_in_a_password_never_show() {
        for pw in [
            "Hunter2#Secret",
            "Hunter2?Secret",
            "Hunter2/Secret",
            "Hunt@er2#Se/cr?et",
        ] {
            let url = format!("redis://alice:{pw}@127.0.0.1:6379");
            let shown = redact_url(&url);
            assert_eq!(shown, "redis://***@127.0.0.1:6379", "{url}");
            let e = Config::new([url.as_str()]).check().unwrap_err();
            let text = e.to_string();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{text}");
            assert!(!text.contains("Hunt") && !text.contains("Secret"), "{text}");
            assert!(
                text.starts_with("nodes[0]: unparsable URL redis://***@127.0.0.1:6379"),
                "{text}"
            );
            assert!(
                text.contains("%23") && text.contains("%3F") && text.contains("%2F"),
                "{text}"
            );
        }
        // Parses, but the text after the '?' or '#' is a piece of the password.
        for url in ["redis://alice:123?Secret@h:1", "redis://:pw@h:1/0#Secret"] {
            let e = Config::new([url]).check().unwrap_err();
            assert!(!e.to_string().contains("Secret"), "{e}");
            assert!(e.to_string().contains("percent-encode"), "{e}");
        }
        assert_eq!(redact_url("redis://:Hunter2#Secret"), "redis://:***");
        let q = redact_url("unix:///tmp/r.sock?db=3&pass=QX&ZJ=KV");
        assert!(
            !q.contains("ZJ") && !q.contains("KV") && q.contains("db=3"),
            "{q}"
        );
        // Percent-encoded, the same password works and is hidden.
        let ok = Config::new(["redis://alice:Hunter2%23Secret@127.0.0.1:6379"]).validate();
        let specs = ok.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(specs[0].secret.as_deref(), Some("Hunter2#Secret"));
        assert_eq!(specs[0].display, "redis://alice:***@127.0.0.1:6379");
    }

    #[test]
    fn node_lists_and_parts() {
        assert_eq!(
            split_node_list("nodes", "redis://a:1, redis://b:2").unwrap(),
            ["redis://a:1", "redis://b:2"]
        );
        let e = split_node_list("IRONLOCK_NODES", "redis://a:1,,redis://b:2").unwrap_err();
        assert!(e.message().starts_with("IRONLOCK_NODES:"), "{e}");
        let url = node_url(&NodeParts {
            host: Some("127.0.0.1".into()),
            port: Some(7001),
            username: Some("alice".into()),
            password: Some("Hunter2#Secret/?@%41%".into()),
            db: Some(2),
            ..Default::default()
        })
        .unwrap();
        let specs = Config::new([url.as_str()]).validate().unwrap();
        assert_eq!(specs[0].secret.as_deref(), Some("Hunter2#Secret/?@%41%"));
        assert_eq!(specs[0].display, "redis://alice:***@127.0.0.1:7001/2");
        let tls = node_url(&NodeParts {
            host: Some("::1".into()),
            tls: true,
            ..Default::default()
        });
        assert_eq!(tls.unwrap(), "rediss://[::1]:6379");
        let unix = node_url(&NodeParts {
            path: Some("/tmp/r.sock".into()),
            db: Some(1),
            password: Some("p&w".into()),
            ..Default::default()
        })
        .unwrap();
        assert!(Config::new([unix.as_str()]).check().is_ok(), "{unix}");
        assert!(
            !redact_url(&unix).contains("p&w") && !redact_url(&unix).contains("p%26w"),
            "{}",
            redact_url(&unix)
        );
        assert_eq!(cut("short"), "short");
        let long = cut(&"x".repeat(100_000));
        assert!(
            long.len() < 120 && long.ends_with("(100000 characters)"),
            "{long}"
        );
    }

    #[test]
    fn a_ttl_must_be_positive_within_max_ttl_and_leave_validity_after_drift() {
        let c = Config::new(["redis://127.0.0.1:1"]).max_ttl(Duration::from_secs(10));
        let ms = Duration::from_millis;
        assert!(
            c.check_ttl("ttl", ms(10_000)).is_ok(),
            "max_ttl itself is allowed"
        );
        assert!(c.check_ttl("ttl", ms(100)).is_ok());
        for bad in [Duration::ZERO, ms(10_001), ms(2), ms(1)] {
            let e = c.check_ttl("ttl", bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}");
            assert!(e.message().starts_with("ttl: "), "{e}");
        }
        // drift(3 ms) = 2.03 ms: 0.97 ms of validity is left.
        assert!(c.check_ttl("ttl", ms(3)).is_ok());
        // A ttl equal to its drift leaves nothing.
        let exact = Config::new(["redis://127.0.0.1:1"]).drift_factor(0.0);
        assert!(exact.check_ttl("ttl", ms(2)).is_err());
        assert!(exact.check_ttl("ttl", ms(3)).is_ok());
        // min_validity is asked for on top of the drift: 100 ms + drift(102 ms) > 102 ms.
        let c = c.min_validity(ms(100));
        let e = c.check_ttl("ttl", ms(102)).unwrap_err();
        assert!(e.message().contains("leaves no validity"), "{e}");
        assert!(c.check_ttl("ttl", ms(104)).is_ok());
    }

    #[test]
    fn drift_follows_the_seeds() {
        let c = Config::new(["redis://127.0.0.1:1"]);
        assert_eq!(c.drift(Duration::from_secs(10)), Duration::from_millis(102));
    }

    #[test]
    fn duplicate_resources_are_named_in_short_and_long_lists() {
        for n in [2usize, 8, 9, 40] {
            let mut list: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
            assert!(validate_resources(&list).is_ok(), "n={n}");
            list[n - 1] = "r0".to_owned();
            let e = validate_resources(&list).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "n={n}");
            assert!(
                e.message()
                    .contains(&format!("resources[{}]: duplicate resource \"r0\"", n - 1)),
                "n={n}: {}",
                e.message()
            );
        }
        assert!(validate_resources(&["a"]).is_ok());
        assert!(validate_resources::<&str>(&[]).is_err());
    }

    #[test]
    fn bad_scheme_is_connection_and_garbage_is_invalid() {
        let e = Config::new(["http://127.0.0.1:1"])
            .validate()
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Connection);
        assert!(e.message().contains("nodes[0]"));
        let e = Config::new(["127.0.0.1:6379"]).validate().err().unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn durations_from_floats() {
        assert!(duration_from_secs_f64("ttl", f64::NAN).is_err());
        assert!(
            duration_from_secs_f64("ttl", -1.0)
                .unwrap_err()
                .message()
                .contains("ttl")
        );
        assert_eq!(
            duration_from_secs_f64("ttl", 1.5).unwrap(),
            Duration::from_millis(1500)
        );
        assert!(duration_from_millis_f64("ttl", 1.5).is_err());
        assert!(duration_from_millis_f64("ttl", f64::INFINITY).is_err());
        assert_eq!(
            duration_from_millis_f64("ttl", 250.0).unwrap(),
            Duration::from_millis(250)
        );
    }
}
