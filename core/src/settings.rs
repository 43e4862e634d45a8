//! The table of manager settings (SPEC §4): one row per setting with its kind, default and
//! range. Bindings convert their language's values by the row's kind and apply them with
//! [`Config::set`], so adding a setting is one row here, one field in [`Config`], and its docs.

use std::time::Duration;

use crate::config::{Config, cut};
use crate::error::{Error, Result};

/// What kind of value a setting takes (and so how a binding converts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingKind {
    /// A whole number of at most 2^32 − 1.
    Count,
    /// A whole number, or unset (`None` / `null`) for "unlimited".
    OptionalCount,
    /// A duration: Rust `Duration`, C milliseconds, Python seconds, Node milliseconds.
    Duration,
    /// A duration, or unset (`None` / `null`) for the default rule.
    OptionalDuration,
    /// A fraction (a float).
    Fraction,
    /// On or off.
    Flag,
    /// Text.
    Text,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The name in snake_case (Node uses [`Setting::camel_name`]).
    pub name: &'static str,
    /// How its values are written.
    pub kind: SettingKind,
    /// The default, as documentation.
    pub default: &'static str,
    /// The allowed range, as documentation (validated by [`Config::check`]).
    pub range: &'static str,
}

impl Setting {
    /// The name in camelCase (`retry_count` → `retryCount`).
    pub fn camel_name(&self) -> String {
        camel_case(self.name)
    }
}

/// A snake_case setting name in camelCase (`tls_ca_cert` → `tlsCaCert`), as Node spells it.
pub fn camel_case(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// A setting's value, converted by a binding according to the row's [`SettingKind`].
#[derive(Debug, Clone, PartialEq)]
pub enum SettingValue {
    /// For `Count` and `OptionalCount`.
    Count(u64),
    /// For `Duration` and `OptionalDuration`.
    Duration(Duration),
    /// For `Fraction`.
    Fraction(f64),
    /// For `Flag`.
    Flag(bool),
    /// For `Text`.
    Text(String),
    /// For `OptionalCount` and `OptionalDuration`: back to the default rule.
    Unset,
}

/// Every manager setting except `nodes` (and the TLS material, set through its own calls).
pub static SETTINGS: &[Setting] = &[
    row(
        "retry_count",
        SettingKind::Count,
        "10",
        "0 to 2^32 - 1 (further rounds after the first)",
    ),
    row(
        "retry_delay",
        SettingKind::Duration,
        "200 ms",
        "at most a day",
    ),
    row(
        "retry_jitter",
        SettingKind::Duration,
        "100 ms",
        "at most a day",
    ),
    row("drift_factor", SettingKind::Fraction, "0.01", "[0, 0.5)"),
    row(
        "drift_constant",
        SettingKind::Duration,
        "2 ms",
        "at most a day",
    ),
    row(
        "node_timeout",
        SettingKind::Duration,
        "50 ms",
        "positive, at most a day",
    ),
    row(
        "connect_timeout",
        SettingKind::Duration,
        "1 s",
        "positive, at most a day",
    ),
    row(
        "max_ttl",
        SettingKind::Duration,
        "60 s",
        "positive, at most 2^53 - 1 ms",
    ),
    row("restart_quarantine", SettingKind::Flag, "on", "on or off"),
    row("reseat", SettingKind::Flag, "on", "on or off"),
    row("key_prefix", SettingKind::Text, "empty", "no NUL character"),
    row("min_validity", SettingKind::Duration, "0", "below max_ttl"),
    row(
        "max_extensions",
        SettingKind::OptionalCount,
        "unlimited",
        "0 to 2^32 - 1, or unset",
    ),
    row(
        "extension_threshold",
        SettingKind::OptionalDuration,
        "ttl / 3",
        "positive, below max_ttl, or unset",
    ),
];

const fn row(
    name: &'static str,
    kind: SettingKind,
    default: &'static str,
    range: &'static str,
) -> Setting {
    Setting {
        name,
        kind,
        default,
        range,
    }
}

/// The row named `name` (snake_case or camelCase), or an `InvalidArgument` error that names the
/// unknown setting and lists the known ones.
pub fn setting(name: &str) -> Result<&'static Setting> {
    SETTINGS
        .iter()
        .find(|s| s.name == name || s.camel_name() == name)
        .ok_or_else(|| {
            let known: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
            Error::invalid(format!(
                "{}: unknown setting (known: {})",
                cut(name),
                known.join(", ")
            ))
        })
}

impl Config {
    /// Sets the setting named `name` (snake_case or camelCase) from a binding's converted value.
    /// A value of the wrong kind, or a count above 2^32 − 1, is an `InvalidArgument` naming the
    /// setting; ranges are checked with the rest by [`Config::check`].
    pub fn set(self, name: &str, value: SettingValue) -> Result<Config> {
        let row = setting(name)?;
        let name = row.name;
        let wrong = || {
            Error::invalid(format!(
                "{name}: expected {}, got {value:?}",
                match row.kind {
                    SettingKind::Count => "a whole number",
                    SettingKind::OptionalCount => "a whole number or nothing",
                    SettingKind::Duration => "a duration",
                    SettingKind::OptionalDuration => "a duration or nothing",
                    SettingKind::Fraction => "a number",
                    SettingKind::Flag => "a boolean",
                    SettingKind::Text => "text",
                }
            ))
        };
        let count = |n: u64| {
            u32::try_from(n)
                .map_err(|_| Error::invalid(format!("{name}: must be at most 4294967295")))
        };
        Ok(match (row.kind, &value) {
            (SettingKind::Count, SettingValue::Count(n)) => match name {
                "retry_count" => self.retry_count(count(*n)?),
                _ => unreachable!("every Count row is matched"),
            },
            (SettingKind::OptionalCount, SettingValue::Count(n)) => {
                self.max_extensions(Some(count(*n)?))
            }
            (SettingKind::OptionalCount, SettingValue::Unset) => self.max_extensions(None),
            (SettingKind::Duration, SettingValue::Duration(d)) => match name {
                "retry_delay" => self.retry_delay(*d),
                "retry_jitter" => self.retry_jitter(*d),
                "drift_constant" => self.drift_constant(*d),
                "node_timeout" => self.node_timeout(*d),
                "connect_timeout" => self.connect_timeout(*d),
                "max_ttl" => self.max_ttl(*d),
                "min_validity" => self.min_validity(*d),
                _ => unreachable!("every Duration row is matched"),
            },
            (SettingKind::OptionalDuration, SettingValue::Duration(d)) => {
                self.extension_threshold(Some(*d))
            }
            (SettingKind::OptionalDuration, SettingValue::Unset) => self.extension_threshold(None),
            (SettingKind::Fraction, SettingValue::Fraction(f)) => self.drift_factor(*f),
            (SettingKind::Flag, SettingValue::Flag(b)) => match name {
                "restart_quarantine" => self.restart_quarantine(*b),
                "reseat" => self.reseat(*b),
                _ => unreachable!("every Flag row is matched"),
            },
            (SettingKind::Text, SettingValue::Text(t)) => self.key_prefix(t.clone()),
            _ => return Err(wrong()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_can_be_set_and_names_itself_when_wrong() {
        let base = Config::new(["redis://127.0.0.1:1"]);
        for row in SETTINGS {
            let good = match row.kind {
                SettingKind::Count | SettingKind::OptionalCount => SettingValue::Count(3),
                SettingKind::Duration | SettingKind::OptionalDuration => {
                    SettingValue::Duration(Duration::from_millis(5))
                }
                SettingKind::Fraction => SettingValue::Fraction(0.1),
                SettingKind::Flag => SettingValue::Flag(false),
                SettingKind::Text => SettingValue::Text("p:".into()),
            };
            let set = base.clone().set(row.name, good.clone()).unwrap();
            assert_ne!(set, base, "{} changed nothing", row.name);
            assert_eq!(
                base.clone().set(&row.camel_name(), good).unwrap(),
                set,
                "{}",
                row.name
            );
            let e = base
                .clone()
                .set(row.name, SettingValue::Text(String::new()))
                .err()
                .filter(|_| row.kind != SettingKind::Text)
                .or_else(|| base.clone().set(row.name, SettingValue::Flag(true)).err())
                .unwrap();
            assert!(e.message().starts_with(row.name), "{e}");
        }
        let e = base
            .clone()
            .set("retryCount", SettingValue::Count(1 << 40))
            .unwrap_err();
        assert!(
            e.message().starts_with("retry_count: must be at most"),
            "{e}"
        );
        let e = base.set("bogus", SettingValue::Flag(true)).unwrap_err();
        assert!(
            e.message()
                .starts_with("bogus: unknown setting (known: retry_count,"),
            "{e}"
        );
        assert_eq!(setting("maxExtensions").unwrap().name, "max_extensions");
    }
}
