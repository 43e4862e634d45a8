//! Node lists in Node's forms, through the core's rules: a comma-separated string, the
//! environment (`IRONLOCK_NODES`, then `REDIS_URL`), and a node given as parts (read by the JS
//! layer from an options object or an ioredis / node-redis client; a Sentinel-managed master's
//! sentinels and name, a Redis Cluster's seed nodes) turned into a URL with its credentials
//! percent-encoded.

use ironlock::NodeParts as CoreParts;
use napi_derive::napi;

use crate::error::{boundary, invalid, to_napi};
use crate::settings::shown;

/// A node as parts, as the JS layer read them from an options object or a client.
#[napi(object)]
pub struct NodeParts {
    /// Host name or address (default `127.0.0.1`); ignored when `path` is set.
    pub host: Option<String>,
    /// TCP port (default 6379).
    pub port: Option<f64>,
    /// Unix socket path.
    pub path: Option<String>,
    /// ACL user name.
    pub username: Option<String>,
    /// Password.
    pub password: Option<String>,
    /// Database number.
    pub db: Option<f64>,
    /// TLS (`rediss://`, `rediss-sentinel://`, `rediss-cluster://`).
    pub tls: Option<bool>,
    /// The sentinels of a Sentinel-managed master (ioredis's `sentinels`).
    pub sentinels: Option<Vec<NodeAddress>>,
    /// The master's name among the sentinels (ioredis's `name`).
    pub name: Option<String>,
    /// The seed nodes of a Redis Cluster.
    pub cluster: Option<Vec<NodeAddress>>,
}

/// One sentinel or seed node: a host (or `host:port` without `port`) and a port.
#[napi(object)]
pub struct NodeAddress {
    /// Host name or address (`host:port` when `port` is not given).
    pub host: String,
    /// TCP port (26379 for a sentinel, 6379 for a seed node when not given).
    pub port: Option<f64>,
}

/// The URL of node `what` (e.g. `nodes[2]`, named in errors) given as parts.
#[napi]
pub fn node_url(what: String, parts: NodeParts) -> napi::Result<String> {
    boundary(|| {
        let port = match parts.port {
            None => None,
            Some(p) if p.fract() == 0.0 && (1.0..=65535.0).contains(&p) => Some(p as u16),
            Some(p) => {
                return Err(invalid(format!(
                    "{what}.port: must be an integer from 1 to 65535, got {}",
                    shown(p)
                )));
            }
        };
        let db = match parts.db {
            None => None,
            Some(d) if d.fract() == 0.0 && (0.0..=i64::MAX as f64).contains(&d) => Some(d as i64),
            Some(d) => {
                return Err(invalid(format!(
                    "{what}.db: must be a non-negative integer, got {}",
                    shown(d)
                )));
            }
        };
        let addresses = |field: &str, list: Option<Vec<NodeAddress>>| {
            list.unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(|(k, a)| {
                    let port = match a.port {
                        None => None,
                        Some(p) if p.fract() == 0.0 && (1.0..=65535.0).contains(&p) => {
                            Some(p as u16)
                        }
                        Some(p) => {
                            return Err(invalid(format!(
                                "{what}.{field}[{k}].port: must be an integer from 1 to 65535, got {}",
                                shown(p)
                            )));
                        }
                    };
                    Ok((a.host, port))
                })
                .collect::<napi::Result<Vec<_>>>()
        };
        let core = CoreParts {
            host: parts.host,
            port,
            path: parts.path,
            username: parts.username,
            password: parts.password,
            db,
            tls: parts.tls.unwrap_or(false),
            sentinels: addresses("sentinels", parts.sentinels)?,
            master_name: parts.name,
            cluster: addresses("cluster", parts.cluster)?,
        };
        ironlock::node_url(&core).map_err(|e| {
            // The core names the master `master_name`; ioredis calls it `name`.
            let message = e.message();
            let message = match message.strip_prefix("master_name:") {
                Some(rest) => format!("name:{rest}"),
                None => message.to_owned(),
            };
            to_napi(ironlock::Error::new(e.kind(), format!("{what}.{message}")))
        })
    })
}

/// The URLs of a comma-separated list given as argument `what`.
#[napi]
pub fn split_node_list(what: String, text: String) -> napi::Result<Vec<String>> {
    boundary(|| ironlock::split_node_list(&what, &text).map_err(to_napi))
}

/// The nodes named by `IRONLOCK_NODES`, else `REDIS_URL`; `null` when neither is set.
#[napi]
pub fn nodes_from_env() -> napi::Result<Option<Vec<String>>> {
    boundary(|| ironlock::nodes_from_env().map_err(to_napi))
}

/// The one sentinel login (`key`: `sentinelUsername` or `sentinelPassword`) a manager uses: the
/// setting (`setting`, labelled `settingLabel`) and every node's (`given`: `[label, value]`
/// pairs) must agree (the core's `agree_sentinel_login`). Returns the value to use, or `null`.
#[napi]
pub fn agree_sentinel_login(
    key: String,
    setting_label: String,
    setting: Option<String>,
    given: Vec<Vec<String>>,
) -> napi::Result<Option<String>> {
    boundary(|| {
        let pairs: Vec<(&str, &str)> = given
            .iter()
            .filter_map(|p| match p.as_slice() {
                [label, value] => Some((label.as_str(), value.as_str())),
                _ => None,
            })
            .collect();
        ironlock::agree_sentinel_login(
            &key,
            setting.as_deref().map(|v| (setting_label.as_str(), v)),
            &pairs,
        )
        .map_err(to_napi)
    })
}

#[cfg(test)]
mod tests {
    use super::agree_sentinel_login;

    fn pair(label: &str, value: &str) -> Vec<String> {
        vec![label.to_owned(), value.to_owned()]
    }

    #[test]
    fn the_setting_and_the_nodes_agree_or_the_first_that_differs_is_named() {
        let key = "sentinelPassword".to_owned();
        let label = "settings.sentinelPassword".to_owned();
        let got = agree_sentinel_login(
            key.clone(),
            label.clone(),
            None,
            vec![pair("nodes[0].sentinelPassword", "pw")],
        )
        .unwrap();
        assert_eq!(got.as_deref(), Some("pw"));
        let e = agree_sentinel_login(
            key,
            label,
            Some("pw".to_owned()),
            vec![pair("nodes[1].sentinelPassword", "other")],
        )
        .unwrap_err();
        assert!(
            e.reason.contains(
                "nodes[1].sentinelPassword: differs from settings.sentinelPassword; a manager logs in to every sentinel with one sentinelPassword"
            ),
            "{}",
            e.reason
        );
        assert!(!e.reason.contains("other") && !e.reason.contains("\"pw\""));
    }
}
