//! SPEC §4 settings and per-acquire options as JS objects (camelCase, integer milliseconds), and
//! their conversion to the core's types. Range checks are the core's; this file only converts
//! numbers, naming the argument when a number is not a valid count or duration.

use std::time::Duration;

use ironlock::{Config, duration_from_millis_f64};
use napi_derive::napi;

use crate::error::{invalid, to_napi};

/// Manager settings; every field is optional and defaults as in the core.
#[napi(object)]
#[derive(Default)]
pub struct Settings {
    /// Further rounds after the first (0 = try once, -1 = retry until acquired). Default 10.
    pub retry_count: Option<f64>,
    /// Mean pause between rounds, ms. Default 200.
    pub retry_delay: Option<f64>,
    /// Uniform ± spread of the pause, ms. Default 100.
    pub retry_jitter: Option<f64>,
    /// Drift allowance per unit of ttl, in [0, 0.5). Default 0.01.
    pub drift_factor: Option<f64>,
    /// Fixed drift allowance, ms. Default 2.
    pub drift_constant: Option<f64>,
    /// Per-node request timeout, ms. Default 50.
    pub node_timeout: Option<f64>,
    /// Per-node connection timeout, ms. Default 1000.
    pub connect_timeout: Option<f64>,
    /// Largest ttl allowed and the restart quarantine, ms. Default 60000.
    pub max_ttl: Option<f64>,
    /// Keep restarted nodes out of the quorum. Default true.
    pub restart_quarantine: Option<bool>,
    /// Re-seat on extension: write a held lock's keys back on a node that restarted and lost
    /// them (never over another client's key), so the lock survives a rolling restart. Default
    /// true.
    pub reseat: Option<bool>,
    /// Prepended to every resource name to form the Redis key. Default "".
    pub key_prefix: Option<String>,
    /// A grant needs validity above this, ms. Default 0.
    pub min_validity: Option<f64>,
    /// How often one lock may be extended. Default unlimited.
    pub max_extensions: Option<f64>,
    /// Auto-extension extends when remaining validity falls below this, ms. Default ttl / 3.
    pub extension_threshold: Option<f64>,
    /// Acquire fairly (FIFO across the quorum) unless an acquire says otherwise. Default false.
    pub fair: Option<bool>,
    /// How long a fair waiter's queue entry outlives its last heartbeat, ms. Default
    /// 2 × retryDelay.
    pub queue_timeout: Option<f64>,
    /// Trust only this CA (PEM) for `rediss://` nodes instead of the system's roots.
    pub tls_ca_cert: Option<String>,
    /// Client certificate (PEM) for mutual TLS.
    pub tls_client_cert: Option<String>,
    /// Private key (PEM) of the client certificate.
    pub tls_client_key: Option<String>,
    /// The name the nodes' certificates must hold when the URLs name them otherwise (`tls.servername`).
    pub tls_server_name: Option<String>,
    /// Per-node TLS, from node objects that carry their own `tls` options.
    pub node_tls: Option<Vec<NodeTls>>,
}

/// One node's own TLS options (node:tls names), overriding the manager's for that node.
#[napi(object)]
pub struct NodeTls {
    /// The node's index in the node list.
    pub index: u32,
    /// Trusted CA (PEM).
    pub ca: Option<String>,
    /// Client certificate (PEM).
    pub cert: Option<String>,
    /// Private key (PEM) of `cert`.
    pub key: Option<String>,
    /// The name the node's certificate must hold.
    pub servername: Option<String>,
}

/// Options of one acquire.
#[napi(object)]
#[derive(Default)]
pub struct AcquireOptions {
    /// Keep retrying until this many ms have passed (instead of `retryCount` rounds).
    pub wait: Option<f64>,
    /// Compute a fencing token.
    pub fencing: Option<bool>,
    /// Overrides the manager's `retryCount` for this call (0 = one round, -1 = retry until
    /// acquired, as in node-redlock).
    pub retry_count: Option<f64>,
    /// Wait in line (FIFO across the quorum); unset takes the manager's `fair` setting.
    pub fair: Option<bool>,
}

/// A number as a message quotes it: as JavaScript would print it (`1e+300`, not 301 digits),
/// cut to ~80 characters.
pub fn shown(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e21 {
        let e = format!("{v:e}");
        ironlock::cut(&e.replace('e', "e+").replace("e+-", "e-"))
    } else {
        ironlock::cut(&v.to_string())
    }
}

/// A non-negative integer count that fits in u32.
pub fn count(name: &str, v: f64) -> napi::Result<u32> {
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= u32::MAX as f64 {
        Ok(v as u32)
    } else {
        Err(invalid(format!(
            "{name}: must be a non-negative integer below 2^32, got {}",
            shown(v)
        )))
    }
}

/// A retry count: a count, or -1 for node-redlock's "retry until acquired" (as many rounds as
/// the core counts, 2^32 - 1: years of retries at any delay).
pub fn retries(name: &str, v: f64) -> napi::Result<u32> {
    if v == -1.0 {
        return Ok(u32::MAX);
    }
    count(name, v).map_err(|_| {
        invalid(format!(
            "{name}: must be a non-negative integer below 2^32, or -1 to retry until acquired, got {}",
            shown(v)
        ))
    })
}

/// Integer milliseconds → `Duration`, through the core's shared check.
pub fn millis(name: &str, v: f64) -> napi::Result<Duration> {
    duration_from_millis_f64(name, v).map_err(to_napi)
}

impl Settings {
    /// Builds the core configuration; the core validates ranges when the manager starts.
    pub fn into_config(self, nodes: Vec<String>) -> napi::Result<Config> {
        let mut c = Config::new(nodes);
        if let Some(v) = self.retry_count {
            c = c.retry_count(retries("settings.retryCount", v)?);
        }
        if let Some(v) = self.retry_delay {
            c = c.retry_delay(millis("settings.retryDelay", v)?);
        }
        if let Some(v) = self.retry_jitter {
            c = c.retry_jitter(millis("settings.retryJitter", v)?);
        }
        if let Some(v) = self.drift_factor {
            c = c.drift_factor(v);
        }
        if let Some(v) = self.drift_constant {
            c = c.drift_constant(millis("settings.driftConstant", v)?);
        }
        if let Some(v) = self.node_timeout {
            c = c.node_timeout(millis("settings.nodeTimeout", v)?);
        }
        if let Some(v) = self.connect_timeout {
            c = c.connect_timeout(millis("settings.connectTimeout", v)?);
        }
        if let Some(v) = self.max_ttl {
            c = c.max_ttl(millis("settings.maxTtl", v)?);
        }
        if let Some(v) = self.restart_quarantine {
            c = c.restart_quarantine(v);
        }
        if let Some(v) = self.reseat {
            c = c.reseat(v);
        }
        if let Some(v) = self.key_prefix {
            c = c.key_prefix(v);
        }
        if let Some(v) = self.min_validity {
            c = c.min_validity(millis("settings.minValidity", v)?);
        }
        if let Some(v) = self.max_extensions {
            c = c.max_extensions(Some(count("settings.maxExtensions", v)?));
        }
        if let Some(v) = self.extension_threshold {
            c = c.extension_threshold(Some(millis("settings.extensionThreshold", v)?));
        }
        if let Some(v) = self.fair {
            c = c.fair(v);
        }
        if let Some(v) = self.queue_timeout {
            c = c.queue_timeout(Some(millis("settings.queueTimeout", v)?));
        }
        if let Some(pem) = self.tls_ca_cert {
            c = c.tls_ca_cert(Some(pem.into_bytes()));
        }
        c = c
            .tls_client_cert(self.tls_client_cert.map(String::into_bytes))
            .tls_client_key(self.tls_client_key.map(String::into_bytes))
            .tls_server_name(self.tls_server_name);
        for t in self.node_tls.unwrap_or_default() {
            let tls = ironlock::NodeTls {
                ca_cert: t.ca.map(String::into_bytes),
                client_cert: t.cert.map(String::into_bytes),
                client_key: t.key.map(String::into_bytes),
                server_name: t.servername,
            };
            c = c.node_tls(t.index as usize, tls);
        }
        Ok(c)
    }
}

impl AcquireOptions {
    /// The core's options.
    pub fn into_core(self) -> napi::Result<ironlock::AcquireOptions> {
        Ok(ironlock::AcquireOptions {
            wait: self.wait.map(|v| millis("options.wait", v)).transpose()?,
            retry_count: self
                .retry_count
                .map(|v| retries("options.retryCount", v))
                .transpose()?,
            fencing: self.fencing.unwrap_or(false),
            fair: self.fair,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_quoted_as_javascript_prints_them() {
        assert_eq!(shown(1e300), "1e+300");
        assert_eq!(shown(-2.5e21), "-2.5e+21");
        assert_eq!(shown(1.5), "1.5");
        assert_eq!(shown(f64::NAN), "NaN");
        assert_eq!(retries("r", -1.0).unwrap(), u32::MAX);
        assert!(retries("r", -2.0).is_err());
    }
}
