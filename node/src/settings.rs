//! SPEC §4 settings and per-acquire options as JS objects (camelCase, integer milliseconds), and
//! their conversion to the core's types by the core's settings table. Range checks are the
//! core's; this file only converts values, naming the argument when one is not a valid count,
//! duration or type.

use std::time::Duration;

use ironlock::{Config, SettingKind, SettingValue, duration_from_millis_f64};
use napi::ValueType;
use napi::bindgen_prelude::{FromNapiValue, Object, Unknown};
use napi_derive::napi;

use crate::error::{in_node_words, invalid, to_napi};

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
    /// Hold the lock at least this many ms after the grant: a release before then leaves it
    /// taken until then. At most the duration; locks only.
    pub min_hold: Option<f64>,
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

/// The manager's nodes and settings (an object of camelCase names; `lib/args.js` has checked
/// the names and types already) → a core `Config`. Every setting of the core's table is
/// converted by the kind its row gives and applied by name (`Config::set`), so a new setting
/// needs no edit here; the TLS material and the per-node TLS of node objects are set apart.
pub fn config(nodes: Vec<String>, settings: Option<Object<'_>>) -> napi::Result<Config> {
    let mut c = Config::new(nodes);
    let Some(settings) = settings else {
        return Ok(c);
    };
    for key in Object::keys(&settings)? {
        let Some(v) = settings.get::<Unknown>(&key)? else {
            continue;
        };
        let name = format!("settings.{}", ironlock::cut(&key));
        if key == "nodeTls" {
            let list: Vec<NodeTls> = typed(&v, &name, ValueType::Object, "an array")?;
            for t in list {
                let tls = ironlock::NodeTls {
                    ca_cert: t.ca.map(String::into_bytes),
                    client_cert: t.cert.map(String::into_bytes),
                    client_key: t.key.map(String::into_bytes),
                    server_name: t.servername,
                };
                c = c.node_tls(t.index as usize, tls);
            }
            continue;
        }
        if let Some(tls) = ironlock::TLS_SETTINGS
            .iter()
            .find(|t| ironlock::camel_case(t) == key)
        {
            let text: String = typed(&v, &name, ValueType::String, "a string")?;
            c = match *tls {
                "tls_ca_cert" => c.tls_ca_cert(Some(text.into_bytes())),
                "tls_client_cert" => c.tls_client_cert(Some(text.into_bytes())),
                "tls_client_key" => c.tls_client_key(Some(text.into_bytes())),
                _ => c.tls_server_name(Some(text)),
            };
            continue;
        }
        let row =
            ironlock::setting(&key).map_err(|_| invalid(format!("{name}: unknown setting")))?;
        let number = || typed::<f64>(&v, &name, ValueType::Number, "a number");
        let optional = matches!(
            row.kind,
            SettingKind::OptionalCount | SettingKind::OptionalDuration
        );
        let value = if optional && v.get_type()? == ValueType::Null {
            SettingValue::Unset
        } else {
            match row.kind {
                // node-redlock's -1: retry until acquired.
                SettingKind::Count if row.name == "retry_count" => {
                    SettingValue::Count(retries(&name, number()?)?.into())
                }
                SettingKind::Count | SettingKind::OptionalCount => {
                    SettingValue::Count(count(&name, number()?)?.into())
                }
                SettingKind::Duration | SettingKind::OptionalDuration => {
                    SettingValue::Duration(millis(&name, number()?)?)
                }
                SettingKind::Fraction => SettingValue::Fraction(number()?),
                SettingKind::Flag => {
                    SettingValue::Flag(typed(&v, &name, ValueType::Boolean, "a boolean")?)
                }
                SettingKind::Text => {
                    SettingValue::Text(typed(&v, &name, ValueType::String, "a string")?)
                }
            }
        };
        c = c
            .set(row.name, value)
            .map_err(|e| to_napi(in_node_words(e, "ttl")))?;
    }
    Ok(c)
}

/// `v` as a `T` when it is of JS type `want`, else INVALID_ARGUMENT naming the argument.
fn typed<T: FromNapiValue>(
    v: &Unknown<'_>,
    name: &str,
    want: ValueType,
    what: &str,
) -> napi::Result<T> {
    let got = v.get_type()?;
    if got != want {
        return Err(invalid(format!(
            "{name}: expected {what}, got {}",
            format!("{got:?}").to_lowercase()
        )));
    }
    // SAFETY: the value's type was checked above.
    unsafe { v.cast() }
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
            holder: None,
            min_hold: self
                .min_hold
                .map(|v| millis("options.minHold", v))
                .transpose()?,
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
