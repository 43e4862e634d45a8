//! The table of manager settings: one row per setting with its kind, default and
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

/// The TLS settings of [`Config`](crate::Config), which take PEM data (or a name) and so are
/// not rows of [`SETTINGS`]; a binding spells them in its own words ([`respell`]).
pub const TLS_SETTINGS: [&str; 4] = [
    "tls_ca_cert",
    "tls_client_cert",
    "tls_client_key",
    "tls_server_name",
];

/// `text` with every whole-word occurrence (not inside a longer identifier) of each `from`
/// replaced by its `to`: how a binding shows the core's setting names in its own spelling
/// ("set tls_client_cert" → "set ssl_certfile" in Python). Text in double quotes (a resource
/// name, a host: the caller's own words) is left as it is.
pub fn respell(text: &str, names: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quoted = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if quoted && c == '\\' && !escaped {
            escaped = true;
            continue;
        }
        if c == '"' && !escaped {
            let part = &text[start..i];
            if quoted {
                out.push_str(part);
            } else {
                out.push_str(&respell_plain(part, names));
            }
            out.push('"');
            start = i + 1;
            quoted = !quoted;
        }
        escaped = false;
    }
    let rest = &text[start..];
    if quoted {
        out.push_str(rest);
    } else {
        out.push_str(&respell_plain(rest, names));
    }
    out
}

fn respell_plain(text: &str, names: &[(&str, &str)]) -> String {
    let mut out = text.to_owned();
    for (from, to) in names {
        out = replace_word(&out, from, to);
    }
    out
}

fn replace_word(text: &str, word: &str, by: &str) -> String {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(found) = text[i..].find(word) {
        let at = i + found;
        let end = at + word.len();
        out.push_str(&text[i..at]);
        if ident(text[..at].chars().next_back()) || ident(text[end..].chars().next()) {
            out.push_str(word);
        } else {
            out.push_str(by);
        }
        i = end;
    }
    out.push_str(&text[i..]);
    out
}

/// Other Redlock libraries' names for ironlock's arguments (pottery's `masters`, aioredlock's
/// `redis_connections`, redlock-py's `connection_list`, …), compared as [`suggest`] compares.
const OTHER_NAMES: &[(&str, &str)] = &[
    ("masters", "nodes"),
    ("connection_list", "nodes"),
    ("connections", "nodes"),
    ("redis_connections", "nodes"),
    ("servers", "nodes"),
    ("hosts", "nodes"),
    ("clients", "nodes"),
    ("urls", "nodes"),
    ("retries", "retry_count"),
    ("retry_times", "retry_count"),
    ("max_retries", "retry_count"),
    ("prefix", "key_prefix"),
    ("clock_drift_factor", "drift_factor"),
    ("auto_extension_threshold", "extension_threshold"),
    ("automatic_extension_threshold", "extension_threshold"),
];

/// The name among `known` that the unknown name `given` most likely meant, for "unknown
/// argument" messages: another Redlock library's name for it (`masters` → `nodes`), the same
/// name in another case (`retry_count` ↔ `retryCount`, `maxTTL`), or one at most a couple of
/// typing slips away (`node_timout`). Names are compared without case and `_`/`-`; `known`
/// is in the caller's own spelling, and the answer is one of its items.
pub fn suggest<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    fn folded(s: &str) -> String {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    }
    let want = folded(given);
    if want.is_empty() {
        return None;
    }
    let find = |target: &str| known.iter().copied().find(|k| folded(k) == target);
    if let Some(k) = find(&want) {
        return Some(k);
    }
    if let Some((_, to)) = OTHER_NAMES.iter().find(|(from, _)| folded(from) == want) {
        if let Some(k) = find(&folded(to)) {
            return Some(k);
        }
    }
    // Close in spelling: an edit distance of at most a third of the name (and at most 3).
    let limit = (want.chars().count() / 3).clamp(1, 3);
    known
        .iter()
        .copied()
        .map(|k| (edit_distance(&want, &folded(k)), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, counting a swap of two neighbours as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // rows[i][j]: distance between a[..i] and b[..j]; only the last three rows are needed.
    let mut before: Vec<usize> = Vec::new();
    let mut last: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut last, row);
    }
    last[b.len()]
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
    row(
        "replica_acks",
        SettingKind::Count,
        "0 (off)",
        "0 to 16 replicas that must acknowledge a vote's write (WAIT); not for redis-cluster:// voters",
    ),
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
    row("fair", SettingKind::Flag, "off", "on or off"),
    row(
        "queue_timeout",
        SettingKind::OptionalDuration,
        "2 × retry_delay",
        "positive, at most a day, or unset",
    ),
    row(
        "sentinel_username",
        SettingKind::Text,
        "none",
        "the ACL user redis-sentinel:// voters log in to their sentinels with",
    ),
    row(
        "sentinel_password",
        SettingKind::Text,
        "none",
        "the password redis-sentinel:// voters log in to their sentinels with (never shown)",
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
        let shown = if name == "sentinel_password" {
            "a value (not shown)".to_owned()
        } else {
            format!("{value:?}")
        };
        let wrong = || {
            Error::invalid(format!(
                "{name}: expected {}, got {shown}",
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
                "replica_acks" => self.replica_acks(count(*n)?),
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
            (SettingKind::OptionalDuration, SettingValue::Duration(d)) => match name {
                "extension_threshold" => self.extension_threshold(Some(*d)),
                "queue_timeout" => self.queue_timeout(Some(*d)),
                _ => unreachable!("every OptionalDuration row is matched"),
            },
            (SettingKind::OptionalDuration, SettingValue::Unset) => match name {
                "extension_threshold" => self.extension_threshold(None),
                "queue_timeout" => self.queue_timeout(None),
                _ => unreachable!("every OptionalDuration row is matched"),
            },
            (SettingKind::Fraction, SettingValue::Fraction(f)) => self.drift_factor(*f),
            (SettingKind::Flag, SettingValue::Flag(b)) => match name {
                "restart_quarantine" => self.restart_quarantine(*b),
                "reseat" => self.reseat(*b),
                "fair" => self.fair(*b),
                _ => unreachable!("every Flag row is matched"),
            },
            (SettingKind::Text, SettingValue::Text(t)) => match name {
                "key_prefix" => self.key_prefix(t.clone()),
                "sentinel_username" => self.sentinel_username(Some(t.clone())),
                "sentinel_password" => self.sentinel_password(Some(t.clone())),
                _ => unreachable!("every Text row is matched"),
            },
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
                SettingKind::Flag => SettingValue::Flag(row.default == "off"),
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

    #[test]
    fn suggest_names_what_an_unknown_argument_most_likely_meant() {
        let py = [
            "nodes",
            "retry_count",
            "node_timeout",
            "max_ttl",
            "key_prefix",
        ];
        assert_eq!(suggest("masters", &py), Some("nodes"));
        assert_eq!(suggest("retryCount", &py), Some("retry_count"));
        assert_eq!(suggest("node_timout", &py), Some("node_timeout"));
        assert_eq!(suggest("maxTTL", &py), Some("max_ttl"));
        assert_eq!(suggest("prefix", &py), Some("key_prefix"));
        assert_eq!(suggest("colour", &py), None);
        assert_eq!(suggest("", &py), None);
        let js = ["retryCount", "maxTtl", "extensionThreshold"];
        assert_eq!(suggest("retry_count", &js), Some("retryCount"));
        assert_eq!(suggest("retries", &js), Some("retryCount"));
        assert_eq!(suggest("maxTlt", &js), Some("maxTtl"));
        // `masters` means the nodes, which this list does not hold: no guess.
        assert_eq!(suggest("masters", &js), None);
        assert_eq!(edit_distance("abcd", "abdc"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn respell_replaces_whole_words_outside_quotes() {
        let names = [
            ("tls_ca_cert", "ssl_ca_certs"),
            ("restart_quarantine", "rq"),
        ];
        assert_eq!(
            crate::respell(
                r#"could not acquire ["tls_ca_cert", "a \"restart_quarantine\""]: set tls_ca_cert; see restart_quarantine, my_tls_ca_cert"#,
                &names
            ),
            r#"could not acquire ["tls_ca_cert", "a \"restart_quarantine\""]: set ssl_ca_certs; see rq, my_tls_ca_cert"#
        );
    }
}
