//! Target `config`: an `ironlock::Config` from `node URL` and `SETTING VALUE` lines, then
//! `Config::check()` (all validation, no connection), the config's `Debug` and `redact_url` of
//! every node. Properties: nothing panics; an error is InvalidArgument (or Connection for a
//! node's scheme) and its message starts with the argument's name; no password of any node
//! appears in the error, the `Debug` text or the redacted URLs.

use ironlock::{Config, ErrorKind, redact_url};

use crate::known;
use crate::secrets::{assert_hidden, mask, secrets};
use crate::text::{duration, flag, float, int, lines, text};

/// The names a validation error may start with (`nodes[i]` is checked separately).
const ARGUMENTS: &[&str] = &[
    "nodes",
    "drift_factor",
    "drift_constant",
    "retry_delay",
    "retry_jitter",
    "node_timeout",
    "connect_timeout",
    "max_ttl",
    "min_validity",
    "extension_threshold",
    "key_prefix",
    "tls_ca_cert",
];

/// The config the lines describe: `node URL` lines in order, then each setting line applied in
/// order (durations as `SECS[.NANOS]`, `none` for an optional setting).
pub fn build(data: &[u8]) -> Config {
    let nodes: Vec<String> = lines(data)
        .filter(|(key, _)| *key == b"node")
        .map(|(_, url)| text(url))
        .collect();
    let mut c = Config::new(nodes);
    for (key, v) in lines(data) {
        c = match key {
            b"retry_count" => set(c, int(v), Config::retry_count),
            b"retry_delay" => set(c, duration(v), Config::retry_delay),
            b"retry_jitter" => set(c, duration(v), Config::retry_jitter),
            b"drift_factor" => set(c, float(v), Config::drift_factor),
            b"drift_constant" => set(c, duration(v), Config::drift_constant),
            b"node_timeout" => set(c, duration(v), Config::node_timeout),
            b"connect_timeout" => set(c, duration(v), Config::connect_timeout),
            b"max_ttl" => set(c, duration(v), Config::max_ttl),
            b"restart_quarantine" => set(c, flag(v), Config::restart_quarantine),
            b"key_prefix" => c.key_prefix(text(v)),
            b"min_validity" => set(c, duration(v), Config::min_validity),
            b"max_extensions" => set(c, optional(v, int), Config::max_extensions),
            b"extension_threshold" => set(c, optional(v, duration), Config::extension_threshold),
            b"tls_ca_cert" => c.tls_ca_cert((v != b"none").then(|| v.to_vec())),
            _ => c,
        };
    }
    c
}

fn set<T>(c: Config, value: Option<T>, setter: fn(Config, T) -> Config) -> Config {
    match value {
        Some(v) => setter(c, v),
        None => c,
    }
}

fn optional<T>(v: &[u8], parse: fn(&[u8]) -> Option<T>) -> Option<Option<T>> {
    if v == b"none" {
        Some(None)
    } else {
        parse(v).map(Some)
    }
}

/// Everything the core shows about a config: the check's error (Display and Debug), the
/// config's Debug and each node's redacted URL.
fn shown_by(config: &Config) -> String {
    let mut out = format!("{config:?}\n");
    if let Err(e) = config.check() {
        let message = e.message();
        // While known to print the raw text before `://` (known.rs), only the redacted URL that
        // follows " in " is checked in an unsupported-scheme error.
        let message = match message.split_once("unsupported scheme ") {
            Some((head, rest)) if known::relaxed(known::SCHEME_TEXT) => {
                format!(
                    "{head}{}",
                    rest.rsplit_once(" in ").map_or("", |(_, url)| url)
                )
            }
            _ => format!("{e}\n{e:?}\n{message:?}"),
        };
        out += &message;
        out.push('\n');
    }
    for url in config.nodes() {
        out += &redact_url(url);
        out.push('\n');
    }
    out
}

/// The properties, for one input.
pub fn check(data: &[u8]) {
    let config = build(data);
    if known::relaxed(known::DRIFT_OVERFLOW) && drift_overflows(data) {
        return;
    }
    if let Err(e) = config.check() {
        assert_names_argument(e.kind(), e.message(), config.nodes().len());
    }
    let shown = shown_by(&config);
    let input = String::from_utf8_lossy(data);
    for url in config.nodes() {
        for secret in secrets(url) {
            if input.matches(secret.raw.as_str()).count() != 1 {
                continue; // also written elsewhere (a key prefix, another node): not only a password
            }
            let benign = shown_by(&build(mask(&input, &secret.raw).as_bytes()));
            for form in &secret.forms {
                assert_hidden(form, &shown, &benign, "config check / Debug / redact_url");
            }
        }
    }
}

/// Whether the input sets a `drift_constant` that core's unchecked drift sum overflows on
/// (see known.rs): anything that leaves less than `max_ttl` of headroom below `Duration::MAX`.
fn drift_overflows(data: &[u8]) -> bool {
    lines(data)
        .filter(|(key, _)| *key == b"drift_constant")
        .filter_map(|(_, v)| duration(v))
        .any(|d| {
            d.checked_add(std::time::Duration::from_secs(u32::MAX as u64))
                .is_none()
        })
}

/// An error from validation is InvalidArgument (Connection only for a node's unsupported
/// scheme) and starts with the name of the argument: a setting, `nodes`, or `nodes[i]` for an
/// existing index.
pub fn assert_names_argument(kind: ErrorKind, message: &str, n_nodes: usize) {
    let head = message.split(':').next().unwrap_or_default();
    let node = head
        .strip_prefix("nodes[")
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|i| i.parse::<usize>().ok());
    match node {
        Some(i) => assert!(i < n_nodes, "{message:?} names node {i} of {n_nodes}"),
        None => assert!(
            ARGUMENTS.contains(&head) && message.len() > head.len(),
            "error does not start with an argument name: {message:?}"
        ),
    }
    assert!(
        kind == ErrorKind::InvalidArgument || (kind == ErrorKind::Connection && node.is_some()),
        "unexpected kind {kind:?} for {message:?}"
    );
}
