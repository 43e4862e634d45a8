//! Python arguments to core types. Wrong types raise `ArgumentTypeError` naming the argument;
//! wrong values go through the core's own validation (`InvalidArgumentError`).

use std::time::Duration;

use ironlock::{AcquireOptions, Config, SettingKind, SettingValue};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

use crate::error;

static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const SECONDS: &str = "a number of seconds (int or float) or a datetime.timedelta";

/// Float seconds or `datetime.timedelta` → `Duration` (NaN, negative and infinite refused).
pub(crate) fn duration(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let py = v.py();
    let secs = if v.is_instance(TIMEDELTA.import(py, "datetime", "timedelta")?)? {
        v.call_method0("total_seconds")?.extract::<f64>()?
    } else if v.is_instance_of::<PyBool>()
        || !(v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>())
    {
        return Err(error::wrong_type(name, SECONDS, v));
    } else {
        v.extract::<f64>()?
    };
    ironlock::duration_from_secs_f64(name, secs).map_err(|e| error::to_pyerr(py, e))
}

pub(crate) fn opt_duration(name: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match v {
        Some(v) if !v.is_none() => duration(name, v).map(Some),
        _ => Ok(None),
    }
}

pub(crate) fn count(name: &str, v: &Bound<'_, PyAny>) -> PyResult<u32> {
    ranged(name, v, 0, u32::MAX)
}

/// The number of permits of a semaphore, in the core's range (named as the core names it).
pub(crate) fn limit(v: &Bound<'_, PyAny>) -> PyResult<u32> {
    ranged("limit", v, 1, ironlock::MAX_SEMAPHORE_LIMIT)
}

/// An int in `lo..=hi`; any other int (however large) is an error naming `name` and the range.
fn ranged(name: &str, v: &Bound<'_, PyAny>, lo: u32, hi: u32) -> PyResult<u32> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(error::wrong_type(name, "an int", v));
    }
    let n = v.extract::<i128>().ok();
    match n.and_then(|n| u32::try_from(n).ok()) {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => {
            let shown = match n {
                Some(n) => n.to_string(),
                None => "an int too large to represent".to_owned(),
            };
            Err(error::invalid(
                v.py(),
                format!("{name}: must be between {lo} and {hi}, got {shown}"),
            ))
        }
    }
}

fn boolean(name: &str, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    if !v.is_instance_of::<PyBool>() {
        return Err(error::wrong_type(name, "a bool", v));
    }
    v.extract()
}

pub(crate) fn text(name: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if !v.is_instance_of::<PyString>() {
        return Err(error::wrong_type(name, "a str", v));
    }
    v.extract::<String>()
        .map_err(|_| error::invalid(v.py(), format!("{name}: not valid UTF-8 (lone surrogate)")))
}

/// A str, or a list/tuple of str → names. `what` is `resources` or `nodes`.
fn names(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if v.is_instance_of::<PyString>() {
        return Ok(vec![text(&format!("{what}[0]"), v)?]);
    }
    if !(v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>()) {
        return Err(error::wrong_type(what, "a str or a list of str", v));
    }
    v.try_iter()?
        .enumerate()
        .map(|(i, item)| text(&format!("{what}[{i}]"), &item?))
        .collect()
}

/// Resource names; an empty list and empty or duplicate names are refused by the core.
pub(crate) fn resources(v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let names = names("resources", v)?;
    ironlock::validate_resources(&names).map_err(|e| error::to_pyerr(v.py(), e))?;
    Ok(names)
}

pub(crate) fn resource(v: &Bound<'_, PyAny>) -> PyResult<String> {
    let name = text("resource", v)?;
    ironlock::validate_resource(&name).map_err(|e| error::to_pyerr(v.py(), e))?;
    Ok(name)
}

pub(crate) fn token(v: &Bound<'_, PyAny>) -> PyResult<String> {
    text("token", v)
}

/// The manager's nodes and keyword settings (SPEC §4) → a core `Config`. Each setting is
/// converted by its kind in the core's table (`ironlock::SETTINGS`) and applied by name.
pub(crate) fn config(
    py: Python<'_>,
    nodes: Option<&Bound<'_, PyAny>>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Config> {
    // An unknown keyword is named before the nodes are looked for: `masters=[…]` (pottery's
    // name) is a wrong name, not a missing node list.
    if let Some(settings) = settings {
        for key in settings.keys() {
            known_keyword(&key.extract::<String>()?)?;
        }
    }
    let (urls, mut tls, logins) = node_list(py, nodes)?;
    let mut c = Config::new(urls);
    if let Some(settings) = settings {
        for (key, v) in settings.iter() {
            let key: String = key.extract()?;
            if let Some(slot) = tls.slot(&key) {
                tls.manager[slot] = Some(text(&key, &v)?);
                continue;
            }
            c = setting(c, &key, &v)?;
        }
    }
    let c = apply_logins(py, c, &logins, settings)?;
    tls.apply(py, c)
}

/// A `TypeError` naming a keyword argument that is neither `nodes`, a setting nor a TLS name,
/// with the name it most likely meant (`masters` → `nodes`, `retryCount` → `retry_count`).
fn known_keyword(k: &str) -> PyResult<()> {
    let mut known = vec!["nodes"];
    known.extend(setting_names());
    known.extend(TLS_NAMES);
    if known[1..].contains(&k) {
        return Ok(());
    }
    let hint = match ironlock::suggest(k, &known) {
        Some(name) => format!(": did you mean {name}?"),
        None => String::new(),
    };
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "unexpected keyword argument {:?}{hint} (settings are: {}, {})",
        ironlock::cut(k),
        setting_names().join(", "),
        TLS_NAMES.join(", ")
    )))
}

/// One keyword setting, converted by its kind in the core's table and applied by name.
fn setting(c: Config, k: &str, v: &Bound<'_, PyAny>) -> PyResult<Config> {
    let Some(row) = ironlock::SETTINGS.iter().find(|s| s.name == k) else {
        return Err(known_keyword(k).err().unwrap_or_else(|| {
            pyo3::exceptions::PyTypeError::new_err(format!("{k}: not a setting"))
        }));
    };
    let value = match row.kind {
        SettingKind::Count => SettingValue::Count(count(k, v)?.into()),
        SettingKind::OptionalCount if v.is_none() => SettingValue::Unset,
        SettingKind::OptionalCount => SettingValue::Count(count(k, v)?.into()),
        SettingKind::Duration => SettingValue::Duration(duration(k, v)?),
        SettingKind::OptionalDuration if v.is_none() => SettingValue::Unset,
        SettingKind::OptionalDuration => SettingValue::Duration(duration(k, v)?),
        SettingKind::Fraction => {
            if v.is_instance_of::<PyBool>()
                || !(v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>())
            {
                return Err(error::wrong_type(k, "a float", v));
            }
            SettingValue::Fraction(v.extract()?)
        }
        SettingKind::Flag => SettingValue::Flag(boolean(k, v)?),
        SettingKind::Text => SettingValue::Text(text(k, v)?),
    };
    c.set(k, value).map_err(|e| error::to_pyerr(v.py(), e))
}

/// The TLS material, redis-py's names: `ssl_ca_certs` (CA file), `ssl_ca_data` (CA PEM text),
/// `ssl_certfile` and `ssl_keyfile` (client certificate and key files, mutual TLS), and
/// `ssl_server_hostname` (the name the certificate must hold when the host is an address). Given
/// as manager keywords (for every node), or carried by a node mapping or a redis-py client (that
/// node's own, over the keywords).
#[derive(Default)]
struct Tls {
    manager: Given,
    /// Per TLS node: its index, how to name it in errors, and what it gave.
    nodes: Vec<(usize, String, Given)>,
}

/// The values given for [`TLS_NAMES`], by slot.
type Given = [Option<String>; 5];

const TLS_NAMES: [&str; 5] = [
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_server_hostname",
];

impl Tls {
    fn slot(&self, key: &str) -> Option<usize> {
        TLS_NAMES.iter().position(|n| *n == key)
    }

    /// The core's form of what `given` holds (files read now); `source` names it in errors.
    fn material(py: Python<'_>, source: &str, given: &Given) -> PyResult<ironlock::NodeTls> {
        let read = |slot: usize| -> PyResult<Option<Vec<u8>>> {
            given[slot]
                .as_ref()
                .map(|path| {
                    std::fs::read(path).map_err(|e| {
                        error::invalid(
                            py,
                            format!(
                                "{source}{}: cannot read {:?}: {e}",
                                TLS_NAMES[slot],
                                ironlock::cut(path)
                            ),
                        )
                    })
                })
                .transpose()
        };
        let ca_cert = match (&given[1], read(0)?) {
            (Some(_), Some(_)) => {
                return Err(error::invalid(
                    py,
                    format!("{source}ssl_ca_certs: give ssl_ca_certs or ssl_ca_data, not both"),
                ));
            }
            (Some(pem), None) => Some(pem.as_bytes().to_vec()),
            (None, file) => file,
        };
        Ok(ironlock::NodeTls {
            ca_cert,
            client_cert: read(2)?,
            client_key: read(3)?,
            server_name: given[4].clone(),
        })
    }

    fn apply(self, py: Python<'_>, mut c: Config) -> PyResult<Config> {
        let m = Tls::material(py, "", &self.manager)?;
        if m.ca_cert.is_some() {
            c = c.tls_ca_cert(m.ca_cert);
        }
        if m.client_cert.is_some() {
            c = c.tls_client_cert(m.client_cert);
        }
        if m.client_key.is_some() {
            c = c.tls_client_key(m.client_key);
        }
        if m.server_name.is_some() {
            c = c.tls_server_name(m.server_name);
        }
        for (i, source, given) in &self.nodes {
            c = c.node_tls(*i, Tls::material(py, &format!("{source}."), given)?);
        }
        Ok(c)
    }
}

/// Every keyword setting, in SPEC §4 order (the core's table).
pub(crate) fn setting_names() -> Vec<&'static str> {
    ironlock::SETTINGS.iter().map(|s| s.name).collect()
}

/// The node list in any of its Python forms: a list of URLs, mappings with redis-py's keyword
/// names (a standalone node; `sentinels` + `service_name`: a Sentinel-managed master; `cluster`:
/// a Redis Cluster), or redis-py clients (`redis.Redis` / `redis.asyncio.Redis`, a
/// `Sentinel.master_for()` client, `redis.cluster.RedisCluster`; their connection settings are
/// read; ironlock keeps its own connections); one comma-separated string; nothing (None) for
/// `IRONLOCK_NODES`, then `REDIS_URL`. Also the sentinel logins the nodes carry, by node name.
fn node_list(
    py: Python<'_>,
    nodes: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Vec<String>, Tls, Logins)> {
    let mut tls = Tls::default();
    let mut logins = Logins::new();
    let Some(nodes) = nodes.filter(|n| !n.is_none()) else {
        return Ok((from_env(py)?, tls, logins));
    };
    if nodes.is_instance_of::<PyString>() {
        let text = text("nodes", nodes)?;
        let urls = ironlock::split_node_list("nodes", &text).map_err(|e| error::to_pyerr(py, e))?;
        return Ok((urls, tls, logins));
    }
    if !(nodes.is_instance_of::<PyList>() || nodes.is_instance_of::<PyTuple>()) {
        return Err(error::wrong_type(
            "nodes",
            "a list of node URLs, mappings or redis-py clients, or a comma-separated str",
            nodes,
        ));
    }
    let mut urls = Vec::new();
    for (i, item) in nodes.try_iter()?.enumerate() {
        let name = format!("nodes[{i}]");
        let (url, given, login) = node(&name, &item?)?;
        if given.iter().any(Option::is_some) {
            tls.nodes.push((i, name.clone(), given));
        }
        if login.iter().any(Option::is_some) {
            logins.push((name, login));
        }
        urls.push(url);
    }
    Ok((urls, tls, logins))
}

fn from_env(py: Python<'_>) -> PyResult<Vec<String>> {
    ironlock::nodes_from_env()
        .map_err(|e| error::to_pyerr(py, e))?
        .ok_or_else(|| {
            error::invalid(
                py,
                "nodes: none given, and neither IRONLOCK_NODES nor REDIS_URL is set".to_owned(),
            )
        })
}

/// The manager-level sentinel login settings, in [`Login`] slot order.
const LOGIN_NAMES: [&str; 2] = ["sentinel_username", "sentinel_password"];

/// A Sentinel node's login at its sentinels (user name, password), as it gave it.
type Login = [Option<String>; 2];

/// The logins given with nodes, by node name.
type Logins = Vec<(String, Login)>;

/// The sentinel logins the nodes carry → the manager's settings: a manager has one sentinel
/// login, so a node's must equal the setting (or another node's) or it is refused, named.
fn apply_logins(
    py: Python<'_>,
    mut c: Config,
    logins: &Logins,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Config> {
    for (slot, key) in LOGIN_NAMES.iter().enumerate() {
        let setting = match settings {
            Some(s) => s.get_item(key)?.filter(|v| !v.is_none()),
            None => None,
        };
        let setting = setting.map(|v| text(key, &v)).transpose()?;
        let setting_label = format!("the {key} setting");
        let labels: Vec<(String, &str)> = logins
            .iter()
            .filter_map(|(name, login)| Some((format!("{name}.{key}"), login[slot].as_deref()?)))
            .collect();
        let given: Vec<(&str, &str)> = labels.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        let chosen = ironlock::agree_sentinel_login(
            key,
            setting.as_deref().map(|v| (setting_label.as_str(), v)),
            &given,
        )
        .map_err(|e| error::to_pyerr(py, e))?;
        if let (None, Some(v)) = (setting, chosen) {
            c = c
                .set(key, SettingValue::Text(v))
                .map_err(|e| error::to_pyerr(py, e))?;
        }
    }
    Ok(c)
}

/// One node: a URL, a mapping, or a redis-py client; with the TLS material it carries (only
/// for a TLS node: redis-py ignores `ssl_*` keys without `ssl=True`) and, for a Sentinel node,
/// the login at its sentinels.
fn node(name: &str, v: &Bound<'_, PyAny>) -> PyResult<(String, Given, Login)> {
    if v.is_instance_of::<PyString>() {
        return Ok((text(name, v)?, Given::default(), Login::default()));
    }
    let py = v.py();
    let mut login = Login::default();
    let mut kind = Kind::Standalone;
    let (kwargs, client_tls) = if v.is_instance_of::<PyDict>() {
        let d = v.cast::<PyDict>()?;
        let item = |k: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
            Ok(d.get_item(k)?.filter(|v| !v.is_none()))
        };
        if let Some(list) = item("sentinels")? {
            kind = Kind::Sentinel(
                hosts(&format!("{name}.sentinels"), &list)?,
                master_name(name, &item("service_name")?, &item("master_name")?)?,
            );
            for (slot, key) in LOGIN_NAMES.iter().enumerate() {
                login[slot] = item(key)?
                    .map(|v| text(&format!("{name}.{key}"), &v))
                    .transpose()?;
            }
        }
        if let Some(list) = item("cluster")? {
            if matches!(kind, Kind::Sentinel(..)) {
                return Err(error::invalid(
                    py,
                    format!(
                        "{name}.cluster: give sentinels (a Sentinel-managed master) or cluster (a Redis Cluster), not both"
                    ),
                ));
            }
            for key in LOGIN_NAMES {
                if item(key)?.is_some() {
                    return Err(error::invalid(
                        py,
                        format!(
                            "{name}.{key}: only a Sentinel-managed master (sentinels) has sentinels"
                        ),
                    ));
                }
            }
            kind = Kind::Cluster(hosts(&format!("{name}.cluster"), &list)?);
        }
        if matches!(kind, Kind::Standalone) {
            for key in ["service_name", "master_name"] {
                if item(key)?.is_some() {
                    return Err(error::invalid(
                        py,
                        format!(
                            "{name}.{key}: names a Sentinel-managed master, which needs its sentinels"
                        ),
                    ));
                }
            }
        }
        (v.clone(), false)
    } else if let Ok(manager) = v.getattr("nodes_manager") {
        // redis.cluster.RedisCluster / redis.asyncio.cluster.RedisCluster: the startup nodes
        // it was given (else its nodes manager's), and the nodes' connection keywords.
        let seeds = match v.getattr("startup_nodes") {
            Ok(list) if list.is_instance_of::<PyList>() && list.len()? > 0 => list,
            _ => manager.getattr("startup_nodes")?.call_method0("values")?,
        };
        let mut list = Vec::new();
        for (k, seed) in seeds.try_iter()?.enumerate() {
            let seed = seed?;
            list.push((
                text(
                    &format!("{name}.startup_nodes[{k}].host"),
                    &seed.getattr("host")?,
                )?,
                Some(port(
                    &format!("{name}.startup_nodes[{k}].port"),
                    &seed.getattr("port")?,
                )?),
            ));
        }
        kind = Kind::Cluster(list);
        let kwargs = match v.getattr("connection_kwargs") {
            Ok(k) if k.is_instance_of::<PyDict>() => k,
            _ => manager.getattr("connection_kwargs")?,
        };
        let tls = ssl_class(&kwargs.cast::<PyDict>()?.get_item("connection_class")?);
        (kwargs, tls)
    } else if let Ok(pool) = v.getattr("connection_pool") {
        // redis-py: the pool's connection_kwargs; TLS shows in the connection class.
        let tls = ssl_class(&pool.getattr("connection_class").ok());
        if let (Ok(service), Ok(sentinel)) = (
            pool.getattr("service_name"),
            pool.getattr("sentinel_manager"),
        ) {
            // Sentinel.master_for(): the sentinels, the service name, and the sentinels' login.
            if !pool
                .getattr("is_master")
                .and_then(|m| m.is_truthy())
                .unwrap_or(true)
            {
                return Err(error::invalid(
                    py,
                    format!(
                        "{name}: a client of a replica (Sentinel.slave_for); a lock needs the master: give sentinel.master_for(name)"
                    ),
                ));
            }
            let mut list = Vec::new();
            for (k, s) in sentinel.getattr("sentinels")?.try_iter()?.enumerate() {
                let kw = s?
                    .getattr("connection_pool")?
                    .getattr("connection_kwargs")?;
                let kw = kw.cast::<PyDict>()?;
                let what = format!("{name}.sentinels[{k}]");
                let host = kw.get_item("host")?.filter(|h| !h.is_none());
                let host = match host {
                    Some(h) => text(&format!("{what}.host"), &h)?,
                    None => "localhost".to_owned(),
                };
                let p = match kw.get_item("port")?.filter(|p| !p.is_none()) {
                    Some(p) => Some(port(&format!("{what}.port"), &p)?),
                    None => None,
                };
                list.push((host, p));
                if k == 0 {
                    for (slot, key) in ["username", "password"].iter().enumerate() {
                        login[slot] = kw
                            .get_item(key)?
                            .filter(|v| !v.is_none())
                            .map(|v| text(&format!("{what}.{key}"), &v))
                            .transpose()?;
                    }
                }
            }
            kind = Kind::Sentinel(list, text(&format!("{name}.service_name"), &service)?);
        }
        (pool.getattr("connection_kwargs")?, tls)
    } else if v.hasattr("sentinels")? && v.hasattr("discover_master")? {
        return Err(error::invalid(
            py,
            format!(
                "{name}: a redis.sentinel.Sentinel does not say which master to lock on: give \
                 sentinel.master_for(\"NAME\") or a mapping {{\"sentinels\": [(host, port), …], \
                 \"service_name\": \"NAME\"}}"
            ),
        ));
    } else {
        return Err(error::wrong_type(
            name,
            "a URL, a mapping (host, port, username, password, db, ssl; or sentinels and \
             service_name; or cluster) or a redis-py client",
            v,
        ));
    };
    let kwargs = kwargs
        .cast_into::<PyDict>()
        .map_err(|e| error::wrong_type(name, "a mapping", &e.into_inner()))?;
    let get = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        Ok(kwargs.get_item(key)?.filter(|v| !v.is_none()))
    };
    let opt_text = |key: &str| -> PyResult<Option<String>> {
        get(key)?
            .map(|v| text(&format!("{name}.{key}"), &v))
            .transpose()
    };
    let flag = |key: &str| -> PyResult<bool> {
        Ok(get(key)?
            .map(|v| v.is_truthy())
            .transpose()?
            .unwrap_or(false))
    };
    let db = match get("db")? {
        Some(d) => Some(i64::from(count(&format!("{name}.db"), &d)?)),
        None => None,
    };
    let mut given = Given::default();
    for (slot, key) in TLS_NAMES.iter().enumerate() {
        given[slot] = opt_text(key)?;
    }
    let mut parts = ironlock::NodeParts {
        username: opt_text("username")?,
        password: opt_text("password")?,
        db,
        tls: client_tls || flag("ssl")? || flag("tls")?,
        ..Default::default()
    };
    let master_key = if kwargs.contains("master_name")? && !kwargs.contains("service_name")? {
        "master_name"
    } else {
        "service_name"
    };
    let multi = match kind {
        Kind::Standalone => None,
        Kind::Sentinel(..) => Some("sentinels"),
        Kind::Cluster(_) => Some("cluster"),
    };
    match kind {
        Kind::Standalone => {
            parts.host = opt_text("host")?;
            parts.port = match get("port")? {
                Some(p) => Some(u16::try_from(count(&format!("{name}.port"), &p)?).map_err(
                    |_| error::invalid(py, format!("{name}.port: must be at most 65535")),
                )?),
                None => None,
            };
            parts.path = match opt_text("unix_socket_path")? {
                Some(p) => Some(p),
                None => opt_text("path")?,
            };
        }
        Kind::Sentinel(list, master) => {
            parts.sentinels = list;
            parts.master_name = Some(master);
        }
        Kind::Cluster(list) => parts.cluster = list,
    }
    // A mapping of a Sentinel or Cluster voter names no host of its own.
    if v.is_instance_of::<PyDict>() && multi.is_some() {
        for key in ["host", "port", "unix_socket_path", "path"] {
            if get(key)?.is_some() {
                return Err(error::invalid(
                    py,
                    format!(
                        "{name}.{key}: the addresses of this voter are in {}",
                        multi.unwrap_or_default()
                    ),
                ));
            }
        }
    }
    if !parts.tls {
        given = Given::default();
    }
    let url = ironlock::node_url(&parts).map_err(|e| {
        let message = e.message();
        let message = match message.strip_prefix("master_name:") {
            Some(rest) => format!("{master_key}:{rest}"),
            None => message.to_owned(),
        };
        error::invalid(py, format!("{name}.{message}"))
    })?;
    Ok((url, given, login))
}

/// What a node object stands for.
enum Kind {
    Standalone,
    /// The sentinels and the master's name.
    Sentinel(Vec<(String, Option<u16>)>, String),
    /// The seed nodes.
    Cluster(Vec<(String, Option<u16>)>),
}

/// True for redis-py's TLS connection classes (`SSLConnection`, `SentinelManagedSSLConnection`).
fn ssl_class(class: &Option<Bound<'_, PyAny>>) -> bool {
    class
        .as_ref()
        .filter(|c| !c.is_none())
        .and_then(|c| c.getattr("__name__").ok())
        .and_then(|n| n.extract::<String>().ok())
        .is_some_and(|n| n.contains("SSL"))
}

/// A port: an int (or a str of digits, as some clients keep it) from 1 to 65535.
fn port(name: &str, v: &Bound<'_, PyAny>) -> PyResult<u16> {
    let py = v.py();
    let n = if v.is_instance_of::<PyString>() {
        text(name, v)?
            .trim()
            .parse::<u32>()
            .map_err(|_| error::invalid(py, format!("{name}: not a port number")))?
    } else {
        count(name, v)?
    };
    u16::try_from(n)
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| error::invalid(py, format!("{name}: must be from 1 to 65535, got {n}")))
}

/// A list of addresses: `(host, port)` pairs or `"host:port"` strings.
fn hosts(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Option<u16>)>> {
    const EXPECTED: &str = "a list of (host, port) pairs or \"host:port\" strings";
    if v.is_instance_of::<PyString>()
        || !(v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>())
    {
        return Err(error::wrong_type(name, EXPECTED, v));
    }
    let mut list = Vec::new();
    for (k, item) in v.try_iter()?.enumerate() {
        let item = item?;
        let what = format!("{name}[{k}]");
        if item.is_instance_of::<PyString>() {
            list.push((text(&what, &item)?, None));
        } else if (item.is_instance_of::<PyTuple>() || item.is_instance_of::<PyList>())
            && item.len()? == 2
        {
            list.push((
                text(&format!("{what}[0]"), &item.get_item(0)?)?,
                Some(port(&format!("{what}[1]"), &item.get_item(1)?)?),
            ));
        } else {
            return Err(error::wrong_type(
                &what,
                "a (host, port) pair or a \"host:port\" str",
                &item,
            ));
        }
    }
    if list.is_empty() {
        return Err(error::invalid(v.py(), format!("{name}: empty list")));
    }
    Ok(list)
}

/// A Sentinel mapping's master name: `service_name` (redis-py's word) or `master_name`.
fn master_name(
    name: &str,
    service: &Option<Bound<'_, PyAny>>,
    master: &Option<Bound<'_, PyAny>>,
) -> PyResult<String> {
    let py = service.as_ref().or(master.as_ref()).map(|v| v.py());
    let service = service
        .as_ref()
        .map(|v| text(&format!("{name}.service_name"), v))
        .transpose()?;
    let master = master
        .as_ref()
        .map(|v| text(&format!("{name}.master_name"), v))
        .transpose()?;
    match (service, master, py) {
        (Some(s), Some(m), Some(py)) if s != m => Err(error::invalid(
            py,
            format!("{name}.master_name: differs from service_name (give one of them)"),
        )),
        (Some(s), _, _) | (None, Some(s), _) => Ok(s),
        // Refused by the core, named after the key redis-py uses.
        _ => Ok(String::new()),
    }
}

/// `acquire`'s keyword arguments: wait, fencing, retry_count, fair, min_hold.
pub(crate) type How<'a, 'py> = (
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
);

/// `acquire`'s keyword arguments → core options.
pub(crate) fn acquire_options(how: How<'_, '_>) -> PyResult<AcquireOptions> {
    let (wait, fencing, retry_count, fair, min_hold) = how;
    Ok(AcquireOptions {
        wait: opt_duration("wait", wait)?,
        retry_count: match retry_count {
            Some(v) if !v.is_none() => Some(count("retry_count", v)?),
            _ => None,
        },
        fencing: match fencing {
            Some(v) if !v.is_none() => boolean("fencing", v)?,
            _ => false,
        },
        fair: match fair {
            Some(v) if !v.is_none() => Some(boolean("fair", v)?),
            _ => None,
        },
        holder: None,
        min_hold: opt_duration("min_hold", min_hold)?,
    })
}
