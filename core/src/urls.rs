//! Node URLs: parsing (standalone `redis://`, `rediss://`, `unix://`, and Sentinel voters'
//! `redis-sentinel://`), the server each names, node lists, and redaction of passwords.

use crate::config::{Config, EffectiveTls, cut, scrub};
use crate::error::{Error, ErrorKind, Result};

/// One validated node: what to connect to, how to show it, and what to scrub from error texts.
pub(crate) struct NodeSpec {
    pub(crate) info: redis::ConnectionInfo,
    pub(crate) display: String,
    /// The TLS it connects with (for `rediss://` nodes).
    pub(crate) tls: EffectiveTls,
    pub(crate) secret: Option<String>,
    /// A Sentinel-managed master: `info` is then the template of the data node's connection
    /// (credentials, database, TLS) whose address the sentinels give.
    pub(crate) sentinel: Option<SentinelSpec>,
    /// A Redis Cluster: `info` is then the template of its nodes' connections.
    pub(crate) cluster: Option<ClusterSpec>,
}

/// The seed nodes of a Redis Cluster voter (its other nodes are found from them).
#[derive(Clone)]
pub(crate) struct ClusterSpec {
    pub(crate) seeds: Vec<redis::ConnectionInfo>,
}

/// The sentinels that name a voter's master, and the master's name among them.
#[derive(Clone)]
pub(crate) struct SentinelSpec {
    pub(crate) sentinels: Vec<redis::ConnectionInfo>,
    pub(crate) master: String,
}

const ENCODE_HINT: &str = "if the user name or password holds reserved characters, \
percent-encode them (# as %23, ? as %3F, / as %2F, @ as %40, : in a user name as %3A)";

/// Which server an address names, as far as the text tells: the host in lower case without a
/// trailing dot, `localhost`, `127.0.0.1` and `::1` as one loopback host, and the port (the
/// database number does not make another server). Names that only DNS or the server itself can
/// tell apart are caught at connection by the server's `run_id`.
pub(crate) fn server_identity(addr: &redis::ConnectionAddr) -> String {
    let (host, port) = match addr {
        redis::ConnectionAddr::Tcp(host, port) => (host.as_str(), *port),
        redis::ConnectionAddr::TcpTls { host, port, .. } => (host.as_str(), *port),
        redis::ConnectionAddr::Unix(path) => return format!("unix:{}", path.display()),
        other => return format!("{other:?}"),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let host = match host.as_str() {
        "localhost" | "127.0.0.1" | "::1" | "0:0:0:0:0:0:0:1" => "loopback",
        h => h,
    };
    format!("tcp:{host}:{port}")
}

pub(crate) fn parse_node(i: usize, url: &str, config: &Config) -> Result<NodeSpec> {
    let name = format!("nodes[{i}]");
    if url.trim().is_empty() {
        return Err(Error::invalid(format!("{name}: empty URL")));
    }
    let auth = (
        config.sentinel_username.as_deref(),
        config.sentinel_password.as_deref(),
    );
    for (prefix, kind, tls) in [
        ("redis-sentinel://", Multi::Sentinel, false),
        ("rediss-sentinel://", Multi::Sentinel, true),
        ("redis-cluster://", Multi::Cluster, false),
        ("rediss-cluster://", Multi::Cluster, true),
    ] {
        if url.starts_with(prefix) {
            return parse_multi(i, url, kind, tls, auth);
        }
    }
    let display = redact_url(url);
    // What messages quote: cut to ~80 characters.
    let shown = cut(&display);
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(Error::invalid(format!(
            "{name}: unparsable URL {shown:?} (expected redis://, rediss://, unix://, redis-sentinel:// or redis-cluster://)"
        )));
    };
    let plausible = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !plausible {
        return Err(Error::invalid(format!(
            "{name}: unparsable URL {shown} (expected redis://, rediss://, unix://, redis-sentinel:// or redis-cluster://)"
        )));
    }
    if !matches!(
        scheme,
        "redis" | "rediss" | "unix" | "redis+unix" | "valkey" | "valkeys"
    ) {
        return Err(Error::new(
            ErrorKind::Connection,
            format!(
                "{name}: unsupported scheme {:?} in {shown} (expected redis://, rediss://, unix://, redis-sentinel:// or redis-cluster://)",
                cut(scheme)
            ),
        ));
    }
    let parsed = url::Url::parse(url);
    if let Ok(u) = &parsed
        && let Some(what) = misplaced_text(u)
    {
        return Err(Error::invalid(format!(
            "{name}: unparsable URL {shown}: {what}; {ENCODE_HINT}"
        )));
    }
    let info: redis::ConnectionInfo = redis::IntoConnectionInfo::into_connection_info(url)
        .map_err(|e| {
            let secret = parsed.as_ref().ok().and_then(|u| u.password());
            let why = scrub(&e.to_string(), secret);
            let hint = if url.contains('@') {
                format!("; {ENCODE_HINT}")
            } else {
                String::new()
            };
            Error::invalid(format!("{name}: unparsable URL {shown}: {why}{hint}"))
        })?;
    let secret = info.redis_settings().password().map(str::to_owned);
    Ok(NodeSpec {
        info,
        display,
        tls: EffectiveTls::default(),
        secret,
        sentinel: None,
        cluster: None,
    })
}

/// The default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// A voter given by several hosts: a Sentinel-managed master or a Redis Cluster.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Multi {
    Sentinel,
    Cluster,
}

/// `redis-sentinel://[user:password@]host[:port][,host[:port]…][/db]#MASTER` (Lettuce's form;
/// `rediss-sentinel://` for TLS): the credentials and database are the data nodes'; the
/// sentinels' own credentials are the settings `sentinel_username` / `sentinel_password`.
/// `redis-cluster://[user:password@]host[:port][,host[:port]…]` (`rediss-cluster://`): seed
/// nodes of a Redis Cluster, with the credentials of its nodes (database 0 only).
fn parse_multi(
    i: usize,
    url: &str,
    kind: Multi,
    tls: bool,
    auth: (Option<&str>, Option<&str>),
) -> Result<NodeSpec> {
    let name = format!("nodes[{i}]");
    let scheme = match (kind, tls) {
        (Multi::Sentinel, false) => "redis-sentinel",
        (Multi::Sentinel, true) => "rediss-sentinel",
        (Multi::Cluster, false) => "redis-cluster",
        (Multi::Cluster, true) => "rediss-cluster",
    };
    let rest = &url[scheme.len() + 3..];
    let (example, what, default_port) = match kind {
        Multi::Sentinel => (
            "redis-sentinel://127.0.0.1:26379,127.0.0.1:26380#mymaster",
            "sentinel",
            SENTINEL_PORT,
        ),
        Multi::Cluster => (
            "redis-cluster://127.0.0.1:7000,127.0.0.1:7001",
            "seed node",
            6379,
        ),
    };
    let (rest, master) = match (kind, rest.rsplit_once('#')) {
        (Multi::Sentinel, Some((r, m))) => (r, m),
        (Multi::Cluster, None) => (rest, ""),
        (Multi::Cluster, Some(_)) => {
            return Err(Error::invalid(format!(
                "{name}: a {scheme}:// URL has no '#' part ({example}); {ENCODE_HINT}"
            )));
        }
        (Multi::Sentinel, None) => {
            return Err(Error::invalid(format!(
                "{name}: a {scheme}:// URL names its master after '#' ({example})"
            )));
        }
    };
    if kind == Multi::Sentinel && (master.is_empty() || master.contains(['/', '@', ',', ' '])) {
        return Err(Error::invalid(format!(
            "{name}: the master name after '#' must be a plain name{} ({example}); {ENCODE_HINT}",
            quoted_if_plain(master)
        )));
    }
    // Options after '?' (a `pass=` among them) are not part of these forms: refused without
    // quoting them.
    if rest.contains('?') {
        return Err(Error::invalid(format!(
            "{name}: a {scheme}:// URL takes no '?' options ({example}); {ENCODE_HINT}"
        )));
    }
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (Some(u), r),
        None => (None, rest),
    };
    let (hosts, db) = match rest.split_once('/') {
        Some((h, d)) => (h, Some(d)),
        None => (rest, None),
    };
    let db: i64 = match db {
        None | Some("") => 0,
        Some(d) => d.parse().map_err(|_| {
            Error::invalid(format!(
                "{name}: the database after '/' must be a number{}; {ENCODE_HINT}",
                quoted_if_plain(d)
            ))
        })?,
    };
    if kind == Multi::Cluster && db != 0 {
        return Err(Error::invalid(format!(
            "{name}: a Redis Cluster has only database 0, got /{db}"
        )));
    }
    let (userinfo, auth) = match kind {
        Multi::Sentinel => (userinfo, auth),
        // The seeds are the cluster's own nodes: the URL's credentials are theirs.
        Multi::Cluster => (userinfo, (None, None)),
    };
    let mut sentinels = Vec::new();
    let mut shown_hosts = Vec::new();
    for (k, host) in hosts.split(',').enumerate() {
        let host = host.trim();
        let parsed = url::Url::parse(&format!("redis://{host}"))
            .ok()
            .filter(|u| {
                !host.is_empty()
                    && u.host_str().is_some_and(|h| !h.is_empty())
                    && (u.path() == "/" || u.path().is_empty())
                    && u.username().is_empty()
            });
        let Some(u) = parsed else {
            return Err(Error::invalid(format!(
                "{name}: {what} {k}{} is not host[:port] ({example}); {ENCODE_HINT}",
                quoted_if_plain(host)
            )));
        };
        let h = u
            .host_str()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = u.port().unwrap_or(default_port);
        let addr = if tls {
            redis::ConnectionAddr::TcpTls {
                host: h.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            redis::ConnectionAddr::Tcp(h.to_owned(), port)
        };
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some(user) = auth.0 {
            settings = settings.set_username(user);
        }
        if let Some(pw) = auth.1 {
            settings = settings.set_password(pw);
        }
        let info = redis::IntoConnectionInfo::into_connection_info(format!(
            "{}://{}:{port}",
            if tls { "rediss" } else { "redis" },
            u.host_str().unwrap_or_default()
        ))
        .map_err(|e| Error::invalid(format!("{name}: {what} {k}: {e}")))?
        .set_addr(addr)
        .set_redis_settings(settings);
        sentinels.push(info);
        shown_hosts.push(format!("{}:{port}", u.host_str().unwrap_or_default()));
    }
    // The data nodes' connection: the URL's credentials and database over the scheme's TLS; the
    // address is set once the sentinels name the master.
    let data_scheme = if tls { "rediss" } else { "redis" };
    let data_url = match userinfo {
        Some(u) => format!("{data_scheme}://{u}@127.0.0.1:6379/{db}"),
        None => format!("{data_scheme}://127.0.0.1:6379/{db}"),
    };
    let info: redis::ConnectionInfo =
        redis::IntoConnectionInfo::into_connection_info(data_url.as_str()).map_err(|_| {
            Error::invalid(format!(
                "{name}: unparsable user name or password in {}; {ENCODE_HINT}",
                cut(&redact_conservatively(url))
            ))
        })?;
    let secret = info.redis_settings().password().map(str::to_owned);
    let user = info
        .redis_settings()
        .username()
        .map(|u| format!("{u}{}@", if secret.is_some() { ":***" } else { "" }))
        .unwrap_or_else(|| {
            if secret.is_some() {
                ":***@".to_owned()
            } else {
                String::new()
            }
        });
    let db_shown = if db == 0 {
        String::new()
    } else {
        format!("/{db}")
    };
    let hosts = shown_hosts.join(",");
    Ok(match kind {
        Multi::Sentinel => NodeSpec {
            info,
            display: format!("{scheme}://{user}{hosts}{db_shown}#{master}"),
            tls: EffectiveTls::default(),
            secret,
            sentinel: Some(SentinelSpec {
                sentinels,
                master: master.to_owned(),
            }),
            cluster: None,
        },
        Multi::Cluster => NodeSpec {
            info,
            display: format!("{scheme}://{user}{hosts}"),
            tls: EffectiveTls::default(),
            secret,
            sentinel: None,
            cluster: Some(ClusterSpec { seeds: sentinels }),
        },
    })
}

/// `, got "text"` when `text` is plainly not a secret (the characters of a host name, a port
/// list or a number), else nothing: a piece of a URL that did not parse may be a piece of a
/// password with an unencoded reserved character, and is never quoted then.
fn quoted_if_plain(text: &str) -> String {
    let plain = text.len() <= 80
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_:[]".contains(c));
    if plain {
        format!(", got {text:?}")
    } else {
        String::new()
    }
}

/// Text that a Redis URL never holds where the parser put it, and that most likely is a piece of
/// a password with an unencoded `#`, `?`, `/` or `@`: a fragment, or an `@` after the host.
fn misplaced_text(u: &url::Url) -> Option<&'static str> {
    if u.fragment().is_some() {
        return Some("it has a '#' part, which a Redis URL never has");
    }
    let unix = matches!(u.scheme(), "unix" | "redis+unix");
    if (!unix && u.path().contains('@')) || u.query().is_some_and(|q| q.contains('@')) {
        return Some("an '@' follows the host");
    }
    None
}

/// The URL with any password (userinfo or `pass`/`password` query parameter) replaced by `***`.
///
/// When the text does not parse as a URL, or parses in a way that may leave a secret in plain
/// sight (an `@` or a `pass=` the parser did not treat as credentials, a `#` part), everything
/// before the last `@` (the whole userinfo, whatever characters the password holds) and
/// everything after the host are hidden instead.
pub fn redact_url(raw: &str) -> String {
    // A Sentinel or Cluster URL that parses shows as the voter does (hosts, database, master).
    for (prefix, kind, tls) in [
        ("redis-sentinel://", Multi::Sentinel, false),
        ("rediss-sentinel://", Multi::Sentinel, true),
        ("redis-cluster://", Multi::Cluster, false),
        ("rediss-cluster://", Multi::Cluster, true),
    ] {
        if raw.starts_with(prefix) {
            if let Ok(spec) = parse_multi(0, raw, kind, tls, (None, None)) {
                return spec.display;
            }
            break;
        }
    }
    // A second `@` means a password with an unencoded `@` (the parser ends the userinfo at the
    // first one; a reader, and the fallback, at the last). The parser's reading is taken only
    // when the text spells `scheme://` itself: it reads `ws:/!J::@h` (no scheme meant, the user
    // `ws` with the password `/!J::`) as `ws://!J::@h`, the user `!J`, which would show part of
    // the password as a user name.
    if let Ok(mut u) = url::Url::parse(raw)
        && u.fragment().is_none()
        && raw.matches('@').count() <= 1
        && raw
            .get(..u.scheme().len() + 3)
            .is_some_and(|head| head.eq_ignore_ascii_case(&format!("{}://", u.scheme())))
    {
        if u.password().is_some() {
            let _ = u.set_password(Some("***"));
        }
        if u.query().is_some() {
            // Once a password is in the query, an unencoded `&` or `=` in it would read as
            // further pairs: only a numeric `db` is shown beside the mask then.
            let has_secret = u
                .query_pairs()
                .any(|(k, _)| matches!(k.as_ref(), "pass" | "password"));
            let pairs: Vec<(String, String)> = u
                .query_pairs()
                .filter_map(|(k, v)| match k.as_ref() {
                    "pass" | "password" => Some((k.into_owned(), "***".to_owned())),
                    "db" if v.bytes().all(|b| b.is_ascii_digit()) => {
                        Some((k.into_owned(), v.into_owned()))
                    }
                    _ if has_secret => None,
                    _ => Some((k.into_owned(), v.into_owned())),
                })
                .collect();
            u.query_pairs_mut().clear().extend_pairs(pairs);
        }
        let shown = u.to_string();
        if looks_clean(&shown) {
            return shown;
        }
    }
    redact_conservatively(raw)
}

/// True when every `@` follows our own mask, no `@` hides percent-encoded in the text, and every
/// `pass=` value is masked.
fn looks_clean(shown: &str) -> bool {
    let ats_masked = shown
        .match_indices('@')
        .all(|(i, _)| shown[..i].ends_with(":***"))
        && !shown.to_ascii_lowercase().contains("%40");
    let passes_masked = ["pass=", "password="].iter().all(|p| {
        shown
            .match_indices(p)
            .all(|(i, _)| shown[i + p.len()..].starts_with("***"))
    });
    ats_masked && passes_masked
}

/// Keeps a plausible scheme and the host; hides the rest.
///
/// A userinfo ends at the LAST `@` (a password may hold `@`, `#`, `?` and `/` unencoded), so
/// everything before it is hidden; the host is what follows it, up to a `/`, `?` or `#`. Text
/// without `@` has no userinfo: its authority is kept, except a "port" that is not a number
/// (`redis://:pw` reads as a password there).
fn redact_conservatively(raw: &str) -> String {
    let (scheme, rest) = match raw.split_once("://") {
        Some((s, r))
            if !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
        {
            (format!("{s}://"), r)
        }
        _ => (String::new(), raw),
    };
    // A query password runs to the end of the text, whatever it holds: nothing after it shows.
    // A `pass=` before the last `@` is ambiguous (an `@` in a query password, or a `pass=` in a
    // userinfo password): then nothing but the scheme shows.
    let query_password = rest.find("pass=").or_else(|| rest.find("password="));
    if let (Some(p), Some(at)) = (query_password, rest.rfind('@'))
        && p < at
    {
        return format!("{scheme}***");
    }
    let rest = match query_password {
        Some(i) => &rest[..i],
        None => rest,
    };
    let cut = |t: &str| t.split(['/', '?', '#']).next().unwrap_or("").to_owned();
    match rest.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}***@{}", cut(host)),
        None => {
            let authority = cut(rest);
            let port_at = authority
                .rfind(':')
                .filter(|&i| !authority[i..].contains(']'));
            match port_at {
                Some(i) if !authority[i + 1..].bytes().all(|b| b.is_ascii_digit()) => {
                    format!("{scheme}{}:***", &authority[..i])
                }
                _ => format!("{scheme}{authority}"),
            }
        }
    }
}

/// Splits a binding's single node string: comma-separated URLs, blanks around commas ignored.
/// An empty entry is an error naming `what` (the argument or variable the text came from).
pub fn split_node_list(what: &str, text: &str) -> Result<Vec<String>> {
    let mut nodes: Vec<String> = Vec::new();
    for part in text.split(',').map(str::trim) {
        // A Sentinel or Cluster URL lists its hosts with commas: a part without a scheme
        // continues it.
        let continues = !part.is_empty()
            && !part.contains("://")
            && nodes.last().is_some_and(|u| {
                [
                    "redis-sentinel://",
                    "rediss-sentinel://",
                    "redis-cluster://",
                    "rediss-cluster://",
                ]
                .iter()
                .any(|p| u.starts_with(p))
            });
        match nodes.last_mut() {
            Some(last) if continues => {
                last.push(',');
                last.push_str(part);
            }
            _ => nodes.push(part.to_owned()),
        }
    }
    if nodes.iter().any(String::is_empty) {
        return Err(Error::invalid(format!(
            "{what}: empty entry in the comma-separated list of node URLs"
        )));
    }
    Ok(nodes)
}

/// The nodes to use when a caller gives none (the same rule in every language and the CLI):
/// `IRONLOCK_NODES` (comma-separated), else `REDIS_URL`; `Ok(None)` when neither is set.
pub fn nodes_from_env() -> Result<Option<Vec<String>>> {
    for var in ["IRONLOCK_NODES", "REDIS_URL"] {
        if let Ok(text) = std::env::var(var)
            && !text.trim().is_empty()
        {
            return split_node_list(var, &text).map(Some);
        }
    }
    Ok(None)
}

/// The one sentinel login (`key`: the user name or the password) a manager uses when Sentinel
/// nodes given as parts carry their own: a manager logs in to every sentinel with one, so the
/// setting (`setting`: its label as the caller names it, and its value) and every node's
/// (`given`: label and value, nodes that gave none left out) must agree. Returns the value to
/// use (the setting's, else the first node's; `None` when nobody gave one), or an
/// `InvalidArgument` naming the first node that differs and what it differs from. The values
/// are never shown.
pub fn agree_sentinel_login(
    key: &str,
    setting: Option<(&str, &str)>,
    given: &[(&str, &str)],
) -> Result<Option<String>> {
    let mut chosen = setting;
    for &(label, value) in given {
        match chosen {
            None => chosen = Some((label, value)),
            Some((from, v)) if v != value => {
                return Err(Error::invalid(format!(
                    "{label}: differs from {from}; a manager logs in to every sentinel with one {key}"
                )));
            }
            Some(_) => {}
        }
    }
    Ok(chosen.map(|(_, v)| v.to_owned()))
}

/// A node given as parts (redis-py's keywords, ioredis's options), for [`node_url`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeParts {
    /// Host name or address (default `127.0.0.1`); ignored when `path` is set.
    pub host: Option<String>,
    /// TCP port (default 6379).
    pub port: Option<u16>,
    /// Unix socket path (a `unix://` URL).
    pub path: Option<String>,
    /// ACL user name.
    pub username: Option<String>,
    /// Password (AUTH).
    pub password: Option<String>,
    /// Database number.
    pub db: Option<i64>,
    /// TLS (`rediss://`; `rediss-sentinel://` / `rediss-cluster://` with `sentinels` /
    /// `cluster`).
    pub tls: bool,
    /// The sentinels of a Sentinel-managed master named `master_name`: `(host, port)`, the
    /// port 26379 when `None` (then the host may also be `host:port`). Gives a
    /// `redis-sentinel://` URL; the credentials and database are then the data nodes'.
    pub sentinels: Vec<(String, Option<u16>)>,
    /// The master's name among the sentinels (redis-py's `service_name`, ioredis's `name`).
    pub master_name: Option<String>,
    /// The seed nodes of a Redis Cluster: `(host, port)`, the port 6379 when `None` (then the
    /// host may also be `host:port`). Gives a `redis-cluster://` URL.
    pub cluster: Vec<(String, Option<u16>)>,
}

/// The URL of a node given as parts; the user name and password are percent-encoded, so they
/// may hold any character.
///
/// With `sentinels` or `cluster` the URL is a `redis-sentinel://…#MASTER` or a
/// `redis-cluster://…` one; errors name the part (`host`, `sentinels[1]`, `master_name`, …).
pub fn node_url(parts: &NodeParts) -> Result<String> {
    if !parts.sentinels.is_empty() || !parts.cluster.is_empty() {
        return multi_url(parts);
    }
    if parts.master_name.is_some() {
        return Err(Error::invalid(
            "master_name: names a Sentinel-managed master, which needs its sentinels",
        ));
    }
    let mut u = match &parts.path {
        Some(path) => {
            let mut u = url::Url::parse("unix:///").expect("a valid base URL");
            u.set_path(path);
            if let Some(db) = parts.db {
                u.query_pairs_mut().append_pair("db", &db.to_string());
            }
            u
        }
        None => {
            let scheme = if parts.tls { "rediss" } else { "redis" };
            let host = parts.host.as_deref().unwrap_or("127.0.0.1");
            let host = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]")
            } else {
                host.to_owned()
            };
            let port = parts.port.unwrap_or(6379);
            let db = parts.db.map(|d| format!("/{d}")).unwrap_or_default();
            url::Url::parse(&format!("{scheme}://{host}:{port}{db}")).map_err(|e| {
                Error::invalid(format!(
                    "host: {:?} is not a host name ({e})",
                    cut(host.as_str())
                ))
            })?
        }
    };
    if parts.path.is_some() {
        if let Some(p) = &parts.password {
            u.query_pairs_mut().append_pair("pass", p);
        }
        if let Some(user) = &parts.username {
            u.query_pairs_mut().append_pair("user", user);
        }
        return Ok(u.to_string());
    }
    // `set_username` / `set_password` encode the reserved characters but leave a `%` as it is,
    // which the reader would then decode: encode it first.
    if let Some(user) = &parts.username {
        u.set_username(&user.replace('%', "%25"))
            .map_err(|()| Error::invalid("username: cannot be set on this URL"))?;
    }
    if let Some(p) = &parts.password {
        u.set_password(Some(&p.replace('%', "%25")))
            .map_err(|()| Error::invalid("password: cannot be set on this URL"))?;
    }
    Ok(u.to_string())
}

/// The `user:password@` of a URL, percent-encoded (empty without credentials).
fn userinfo(parts: &NodeParts) -> Result<String> {
    let mut u = url::Url::parse("redis://127.0.0.1").expect("a valid base URL");
    // As in `node_url`: a `%` is encoded first, the reader decodes it.
    if let Some(user) = &parts.username {
        u.set_username(&user.replace('%', "%25"))
            .map_err(|()| Error::invalid("username: cannot be set on this URL"))?;
    }
    if let Some(p) = &parts.password {
        u.set_password(Some(&p.replace('%', "%25")))
            .map_err(|()| Error::invalid("password: cannot be set on this URL"))?;
    }
    Ok(match (u.username(), u.password()) {
        ("", None) => String::new(),
        (user, None) => format!("{user}@"),
        (user, Some(p)) => format!("{user}:{p}@"),
    })
}

/// `host:port` of one sentinel or seed node, `what` naming it (`sentinels[2]`).
fn address(what: &str, host: &str, port: Option<u16>, default_port: u16) -> Result<String> {
    let bad = || {
        Error::invalid(format!(
            "{what}: {:?} is not a host name or address{}",
            cut(host),
            if port.is_none() {
                " with an optional :port"
            } else {
                ""
            }
        ))
    };
    let host = host.trim();
    if host.is_empty() || host.contains(|c: char| c.is_whitespace() || ",/@#?".contains(c)) {
        return Err(bad());
    }
    let bare_v6 = !host.starts_with('[') && host.matches(':').count() > 1;
    let (name, port) = match port {
        Some(p) => (host.to_owned(), p),
        None if bare_v6 => (host.to_owned(), default_port),
        None => {
            let u = url::Url::parse(&format!("redis://{host}")).map_err(|_| bad())?;
            let name = u.host_str().filter(|h| !h.is_empty()).ok_or_else(bad)?;
            (name.to_owned(), u.port().unwrap_or(default_port))
        }
    };
    if port == 0 {
        return Err(Error::invalid(format!("{what}: port 0 is not a port")));
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let shown = if name.contains(':') {
        format!("[{name}]")
    } else {
        name.to_owned()
    };
    // The host must read back as itself.
    url::Url::parse(&format!("redis://{shown}:{port}")).map_err(|_| bad())?;
    Ok(format!("{shown}:{port}"))
}

/// The URL of a Sentinel-managed master or of a Redis Cluster given as parts.
fn multi_url(parts: &NodeParts) -> Result<String> {
    let sentinel = !parts.sentinels.is_empty();
    if sentinel && !parts.cluster.is_empty() {
        return Err(Error::invalid(
            "cluster: give the sentinels of a master or the seed nodes of a cluster, not both",
        ));
    }
    let (field, list, default_port) = if sentinel {
        ("sentinels", &parts.sentinels, SENTINEL_PORT)
    } else {
        ("cluster", &parts.cluster, 6379)
    };
    for (name, given) in [
        ("host", parts.host.is_some()),
        ("port", parts.port.is_some()),
        ("path", parts.path.is_some()),
    ] {
        if given {
            return Err(Error::invalid(format!(
                "{name}: the addresses of a {} are in {field}",
                if sentinel {
                    "Sentinel-managed master's sentinels"
                } else {
                    "Redis Cluster's seed nodes"
                }
            )));
        }
    }
    let hosts = list
        .iter()
        .enumerate()
        .map(|(k, (h, p))| address(&format!("{field}[{k}]"), h, *p, default_port))
        .collect::<Result<Vec<_>>>()?
        .join(",");
    let user = userinfo(parts)?;
    let s = if parts.tls { "s" } else { "" };
    if !sentinel {
        if parts.master_name.is_some() {
            return Err(Error::invalid(
                "master_name: names a Sentinel-managed master; a Redis Cluster has none",
            ));
        }
        if let Some(db) = parts.db.filter(|&d| d != 0) {
            return Err(Error::invalid(format!(
                "db: a Redis Cluster has only database 0, got {db}"
            )));
        }
        return Ok(format!("redis{s}-cluster://{user}{hosts}"));
    }
    let master = parts.master_name.as_deref().unwrap_or_default();
    if master.is_empty() {
        return Err(Error::invalid(
            "master_name: a Sentinel-managed master needs its name (the sentinels' name for it)",
        ));
    }
    if master.contains(|c: char| c.is_whitespace() || c.is_control() || "/@,#".contains(c)) {
        return Err(Error::invalid(format!(
            "master_name: must be a plain name (no blanks, '/', '@', ',' or '#'), got {:?}",
            cut(master)
        )));
    }
    let db = match parts.db {
        Some(d) if d < 0 => {
            return Err(Error::invalid(format!(
                "db: must be a non-negative number, got {d}"
            )));
        }
        Some(d) if d != 0 => format!("/{d}"),
        _ => String::new(),
    };
    Ok(format!("redis{s}-sentinel://{user}{hosts}{db}#{master}"))
}

#[cfg(test)]
mod tests {

    #[test]
    fn one_sentinel_login_from_the_setting_or_the_nodes_never_showing_it() {
        assert_eq!(agree_sentinel_login("k", None, &[]).unwrap(), None);
        assert_eq!(
            agree_sentinel_login(
                "k",
                Some(("the k setting", "s3cret")),
                &[("nodes[1].k", "s3cret")]
            )
            .unwrap()
            .as_deref(),
            Some("s3cret")
        );
        assert_eq!(
            agree_sentinel_login("k", None, &[("nodes[0].k", "a"), ("nodes[2].k", "a")])
                .unwrap()
                .as_deref(),
            Some("a")
        );
        let e = agree_sentinel_login(
            "k",
            Some(("settings.k", "s3cret")),
            &[("nodes[1].k", "other")],
        )
        .unwrap_err();
        assert_eq!(
            e.message(),
            "nodes[1].k: differs from settings.k; a manager logs in to every sentinel with one k"
        );
        assert!(!e.message().contains("s3cret") && !e.message().contains("other"));
        let e = agree_sentinel_login("k", None, &[("nodes[0].k", "a"), ("nodes[2].k", "b")])
            .unwrap_err();
        assert!(
            e.message()
                .starts_with("nodes[2].k: differs from nodes[0].k;"),
            "{e}"
        );
        assert!(
            !e.message().contains("\"a\"") && !e.message().contains("\"b\""),
            "{e}"
        );
    }
    use super::*;

    fn hosts(list: &[(&str, Option<u16>)]) -> Vec<(String, Option<u16>)> {
        list.iter().map(|(h, p)| ((*h).to_owned(), *p)).collect()
    }

    fn spec(url: &str, config: Config) -> NodeSpec {
        parse_node(0, url, &config).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn sentinel_parts_make_a_sentinel_url() {
        let parts = NodeParts {
            sentinels: hosts(&[
                ("127.0.0.1", Some(26379)),
                ("h2:26380", None),
                ("::1", None),
            ]),
            master_name: Some("mymaster".into()),
            username: Some("app".into()),
            password: Some("p@ss:w/o#rd?%41%".into()),
            db: Some(3),
            ..Default::default()
        };
        let url = node_url(&parts).unwrap();
        assert!(url.starts_with("redis-sentinel://app:"), "{url}");
        assert!(
            url.ends_with("@127.0.0.1:26379,h2:26380,[::1]:26379/3#mymaster"),
            "{url}"
        );
        let node = spec(&url, Config::new([url.as_str()]));
        assert_eq!(node.secret.as_deref(), Some("p@ss:w/o#rd?%41%"));
        assert_eq!(node.info.redis_settings().username(), Some("app"));
        assert_eq!(node.info.redis_settings().db(), 3);
        assert_eq!(
            node.display,
            "redis-sentinel://app:***@127.0.0.1:26379,h2:26380,[::1]:26379/3#mymaster"
        );
        assert_eq!(redact_url(&url), node.display);
        let s = node.sentinel.expect("a sentinel voter");
        assert_eq!(s.master, "mymaster");
        assert_eq!(s.sentinels.len(), 3);
        // TLS, no credentials, db 0.
        let tls = node_url(&NodeParts {
            sentinels: hosts(&[("s1", None)]),
            master_name: Some("m".into()),
            db: Some(0),
            tls: true,
            ..Default::default()
        });
        assert_eq!(tls.unwrap(), "rediss-sentinel://s1:26379#m");
        // A password without a user name.
        let pw = node_url(&NodeParts {
            sentinels: hosts(&[("s1", Some(1))]),
            master_name: Some("m".into()),
            password: Some("x y".into()),
            ..Default::default()
        })
        .unwrap();
        let node = spec(&pw, Config::new([pw.as_str()]));
        assert_eq!(node.secret.as_deref(), Some("x y"));
        assert_eq!(node.display, "redis-sentinel://:***@s1:1#m");
    }

    #[test]
    fn cluster_parts_make_a_cluster_url() {
        let parts = NodeParts {
            cluster: hosts(&[
                ("127.0.0.1", Some(7000)),
                ("127.0.0.1:7001", None),
                ("c3", None),
            ]),
            username: Some("u%1".into()),
            password: Some("#secret@".into()),
            tls: true,
            ..Default::default()
        };
        let url = node_url(&parts).unwrap();
        let node = spec(&url, Config::new([url.as_str()]));
        assert_eq!(node.secret.as_deref(), Some("#secret@"));
        assert_eq!(node.info.redis_settings().username(), Some("u%1"));
        assert_eq!(
            node.display,
            "rediss-cluster://u%1:***@127.0.0.1:7000,127.0.0.1:7001,c3:6379"
        );
        assert_eq!(redact_url(&url), node.display);
        assert_eq!(node.cluster.expect("a cluster voter").seeds.len(), 3);
        // A URL that does not parse is still hidden.
        let bad = redact_url("redis-cluster://u:hunter2@h:1#x");
        assert!(!bad.contains("hunter2"), "{bad}");
        let bad = redact_url("redis-sentinel://u:hun%ZZter2@h:1#m");
        assert!(!bad.contains("hun"), "{bad}");
        let plain = NodeParts {
            cluster: hosts(&[("a", Some(1))]),
            db: Some(0),
            ..Default::default()
        };
        assert_eq!(node_url(&plain).unwrap(), "redis-cluster://a:1");
    }

    /// Found by the property test (`no_run_of_a_password_is_ever_printed`): a node given as
    /// `user:password@host` whose password starts with `/` reads, to a URL parser, as the scheme
    /// `ws` and the user `!J`: two characters of the password were shown as a user name.
    #[test]
    fn text_that_only_parses_as_another_url_hides_its_userinfo() {
        for raw in ["ws:/!J::@127.0.0.1:1", "http:/QXZ:@h:1", "redis:/QXZ:k@h:1"] {
            let shown = redact_url(raw);
            for secret in ["!J", "QXZ"] {
                assert!(!shown.contains(secret), "{raw} shows {secret}: {shown}");
            }
            assert!(
                shown.ends_with("***@127.0.0.1:1") || shown.ends_with("***@h:1"),
                "{shown}"
            );
        }
        // Real URLs keep their readable form.
        assert_eq!(redact_url("redis://u:pw@h:1"), "redis://u:***@h:1");
        assert_eq!(redact_url("REDIS://u:pw@h:1/0"), "redis://u:***@h:1/0");
    }

    #[test]
    fn bad_parts_are_named() {
        let base = NodeParts {
            sentinels: hosts(&[("s1", None)]),
            master_name: Some("m".into()),
            ..Default::default()
        };
        let err = |p: NodeParts| node_url(&p).unwrap_err().message().to_owned();
        assert!(
            err(NodeParts {
                master_name: None,
                ..base.clone()
            })
            .starts_with("master_name:")
        );
        assert!(
            err(NodeParts {
                master_name: Some("a b".into()),
                ..base.clone()
            })
            .starts_with("master_name:")
        );
        assert!(
            err(NodeParts {
                master_name: Some("m#x".into()),
                ..base.clone()
            })
            .starts_with("master_name:")
        );
        assert!(
            err(NodeParts {
                host: Some("h".into()),
                ..base.clone()
            })
            .starts_with("host:")
        );
        assert!(
            err(NodeParts {
                port: Some(1),
                ..base.clone()
            })
            .starts_with("port:")
        );
        assert!(
            err(NodeParts {
                cluster: hosts(&[("c", None)]),
                ..base.clone()
            })
            .starts_with("cluster:")
        );
        assert!(
            err(NodeParts {
                sentinels: hosts(&[("s1", None), ("a,b", None)]),
                ..base.clone()
            })
            .starts_with("sentinels[1]:")
        );
        assert!(
            err(NodeParts {
                sentinels: hosts(&[("", None)]),
                ..base.clone()
            })
            .starts_with("sentinels[0]:")
        );
        assert!(
            err(NodeParts {
                sentinels: hosts(&[("h:notaport", None)]),
                ..base.clone()
            })
            .starts_with("sentinels[0]:")
        );
        assert!(
            err(NodeParts {
                sentinels: hosts(&[("h", Some(0))]),
                ..base.clone()
            })
            .starts_with("sentinels[0]:")
        );
        assert!(
            err(NodeParts {
                db: Some(-1),
                ..base.clone()
            })
            .starts_with("db:")
        );
        let cluster = NodeParts {
            cluster: hosts(&[("c", None)]),
            ..Default::default()
        };
        assert!(
            err(NodeParts {
                db: Some(1),
                ..cluster.clone()
            })
            .starts_with("db:")
        );
        assert!(
            err(NodeParts {
                master_name: Some("m".into()),
                ..cluster.clone()
            })
            .starts_with("master_name:")
        );
        assert!(
            err(NodeParts {
                master_name: Some("m".into()),
                ..Default::default()
            })
            .starts_with("master_name:")
        );
        // Passwords never show in these errors.
        let e = err(NodeParts {
            password: Some("hunter2".into()),
            sentinels: hosts(&[("bad host", None)]),
            ..base
        });
        assert!(!e.contains("hunter2"), "{e}");
    }
}
