//! The one place where core errors become JS errors.
//!
//! A rejected napi Promise can carry only a status and a message, so the message is the core's
//! own JSON encoding of the error ([`ironlock::Error::to_json`]) behind a prefix:
//! `ironlock:{"code","message","report"}`. `lib/errors.js` turns it into the matching Error
//! subclass with `code`, `report`, `elapsed` and `rounds`. Panics caught at the boundary become
//! the core's INTERNAL error ([`ironlock::Error::from_panic`]), in the same words as in every
//! other language.

use std::panic::{AssertUnwindSafe, catch_unwind};

use ironlock::{Error, ErrorKind};

/// Prefix of every encoded error message (recognised by `lib/errors.js`).
pub const ENVELOPE: &str = "ironlock:";

/// The envelope of an acquire cancelled through its `AbortSignal`: a binding-only code (the JS
/// layer rejects with `signal.reason` instead), so not a core error.
const ABORTED: &str =
    r#"ironlock:{"code":"ABORTED","message":"the acquire was aborted","report":null}"#;

/// The core's setting names in its hints as a Node caller gives them (`settings.tls` with
/// node:tls names; camelCase): "set tls.cert and tls.key", "see restartQuarantine".
const WORDS: [(&str, &str); 5] = [
    ("tls_ca_cert", "tls.ca"),
    ("tls_client_cert", "tls.cert"),
    ("tls_client_key", "tls.key"),
    ("tls_server_name", "tls.servername"),
    ("restart_quarantine", "restartQuarantine"),
];

/// The encoded error message of a core error.
pub fn envelope(e: &Error) -> String {
    format!("{ENVELOPE}{}", e.to_json())
}

/// Converts a core error into the encoded napi error, in a Node caller's words.
pub fn to_napi(e: Error) -> napi::Error {
    napi::Error::new(napi::Status::GenericFailure, envelope(&e.respelled(&WORDS)))
}

/// An INVALID_ARGUMENT error raised by the binding's own conversions.
pub fn invalid(message: impl Into<String>) -> napi::Error {
    to_napi(Error::new(ErrorKind::InvalidArgument, message))
}

/// The error of an acquire cancelled through its `AbortSignal`.
pub fn aborted() -> napi::Error {
    napi::Error::new(napi::Status::GenericFailure, ABORTED.to_owned())
}

/// The INTERNAL error for a caught panic's payload.
pub fn panicked(payload: &(dyn std::any::Any + Send)) -> napi::Error {
    to_napi(Error::from_panic(payload))
}

/// Runs the body of a synchronous exported function; a panic becomes the INTERNAL error instead
/// of unwinding into Node.
pub fn boundary<T>(body: impl FnOnce() -> napi::Result<T>) -> napi::Result<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|p| Err(panicked(&*p)))
}

/// A core error about a duration or a setting, in the words of a Node caller: `ttl` is named
/// `ttl_name` (the JS argument, e.g. `durationMs`), settings are named as in JS
/// (`settings.maxTtl`), and durations are given in milliseconds, the unit the caller used.
pub fn in_node_words(e: Error, ttl_name: &str) -> Error {
    if e.kind() != ErrorKind::InvalidArgument {
        return e;
    }
    Error::new(e.kind(), node_words(e.message(), ttl_name))
}

/// The per-call acquire options that share a name with a manager setting (`fair`): in an
/// error of a call, such a head names the call's option, not the setting.
const CALL_OPTIONS: [&str; 1] = ["fair"];

/// [`in_node_words`] for an error of an acquire: a head naming one of its
/// options is kept as the core gives it (`fair: …`, as `min_hold: …`), not turned into the
/// manager setting of the same name.
pub fn in_call_words(e: Error, ttl_name: &str) -> Error {
    if e.kind() != ErrorKind::InvalidArgument {
        return e;
    }
    Error::new(
        e.kind(),
        node_words_keeping(e.message(), ttl_name, &CALL_OPTIONS),
    )
}

/// Every core setting name with its Node spelling (from the core's table).
fn setting_names() -> impl Iterator<Item = (&'static str, String)> {
    ironlock::SETTINGS
        .iter()
        .map(|s| (s.name, s.camel_name()))
        .chain(
            ironlock::TLS_SETTINGS
                .iter()
                .map(|&name| (name, ironlock::camel_case(name))),
        )
}

fn node_words(message: &str, ttl_name: &str) -> String {
    node_words_keeping(message, ttl_name, &[])
}

/// [`node_words`], leaving a head in `kept` as it is.
fn node_words_keeping(message: &str, ttl_name: &str, kept: &[&str]) -> String {
    // The argument the message starts with ("max_ttl: …", "ttl: …").
    let (head, rest) = match message.split_once(": ") {
        Some((head, rest)) if head.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') => {
            let named = if head == "ttl" {
                ttl_name.to_owned()
            } else if kept.contains(&head) {
                head.to_owned()
            } else {
                match setting_names().find(|(core, _)| *core == head) {
                    Some((_, js)) => format!("settings.{js}"),
                    None => head.to_owned(),
                }
            };
            (format!("{named}: "), rest)
        }
        _ => (String::new(), message),
    };
    let names: Vec<(&str, String)> = setting_names().collect();
    let pairs: Vec<(&str, &str)> = names.iter().map(|(c, js)| (*c, js.as_str())).collect();
    let rest = ironlock::respell(rest, &pairs);
    format!("{head}{}", durations_in_ms(&rest))
}

/// The decimal `number` (digits with at most one '.') times 10^`shift`, exactly (no float
/// rounding: `9007199254740.991` s is `9007199254740991` ms), without leading or trailing zeros.
fn shift_decimal(number: &str, shift: i32) -> String {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits: String = format!("{int}{frac}");
    let point = int.len() as i32 + shift;
    let (int, frac) = if point <= 0 {
        (
            "0".to_owned(),
            format!("{}{digits}", "0".repeat(point.unsigned_abs() as usize)),
        )
    } else if point as usize >= digits.len() {
        (
            format!("{digits}{}", "0".repeat(point as usize - digits.len())),
            String::new(),
        )
    } else {
        (
            digits[..point as usize].to_owned(),
            digits[point as usize..].to_owned(),
        )
    };
    let int = int.trim_start_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        int.to_owned()
    } else {
        format!("{int}.{frac}")
    }
}

/// Rewrites the durations of a core message (`60s`, `1.5s`, `86400 s`, `250ms`, `10µs`: Rust's
/// `Duration` debug form and the core's own `N s`) as milliseconds (`60000 ms`).
fn durations_in_ms(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        // A number that is part of a word or of a longer number ("2^53", "x1") is left alone.
        let before = rest[..start].chars().next_back();
        let len = rest[start..]
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len() - start);
        let number = &rest[start..start + len];
        let after = &rest[start + len..];
        let unit_text = after.strip_prefix(' ').unwrap_or(after);
        let unit = ["ms", "µs", "ns", "s"].into_iter().find(|u| {
            unit_text.starts_with(u)
                && !unit_text[u.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric())
        });
        let standalone = !before.is_some_and(|c| c.is_alphanumeric() || c == '^' || c == '.');
        out.push_str(&rest[..start]);
        match unit {
            Some(unit) if standalone && number.bytes().filter(|&b| b == b'.').count() <= 1 => {
                let shift = match unit {
                    "s" => 3,
                    "ms" => 0,
                    "µs" => -3,
                    _ => -6,
                };
                out.push_str(&shift_decimal(number, shift));
                out.push_str(" ms");
                rest = &unit_text[unit.len()..];
            }
            _ => {
                out.push_str(number);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_messages_in_node_words() {
        assert_eq!(
            node_words("ttl: must be at most max_ttl (60s)", "durationMs"),
            "durationMs: must be at most maxTtl (60000 ms)"
        );
        assert_eq!(
            node_words(
                "ttl: 2ms leaves no validity after the drift allowance (2.02ms) and min_validity",
                "durationMs"
            ),
            "durationMs: 2 ms leaves no validity after the drift allowance (2.02 ms) and minValidity"
        );
        assert_eq!(
            node_words("retry_delay: must be at most a day (86400 s)", "x"),
            "settings.retryDelay: must be at most a day (86400000 ms)"
        );
        assert_eq!(
            node_words(
                "max_ttl: must be at most 2^53 - 1 ms (9007199254740991 ms, JavaScript's largest exact integer)",
                "x"
            ),
            "settings.maxTtl: must be at most 2^53 - 1 ms (9007199254740991 ms, JavaScript's largest exact integer)"
        );
        assert_eq!(
            node_words("drift_factor: must be in [0, 0.5), got 0.5", "x"),
            "settings.driftFactor: must be in [0, 0.5), got 0.5"
        );
        assert_eq!(
            node_words("nodes[1]: duplicate node redis://h:1", "x"),
            "nodes[1]: duplicate node redis://h:1"
        );
        assert_eq!(
            node_words("ttl: must be at most max_ttl (1.5s) for 10µs", "t"),
            "t: must be at most maxTtl (1500 ms) for 0.01 ms"
        );
        assert_eq!(
            node_words("resources[0]: x1s 3 sets", "t"),
            "resources[0]: x1s 3 sets"
        );
    }

    #[test]
    fn a_call_option_named_like_a_setting_stays_the_call_option() {
        let e = Error::new(
            ErrorKind::InvalidArgument,
            "fair: not here; see max_ttl (2s)",
        );
        assert_eq!(
            in_call_words(e.clone(), "durationMs").message(),
            "fair: not here; see maxTtl (2000 ms)"
        );
        assert_eq!(
            in_node_words(e, "ttl").message(),
            "settings.fair: not here; see maxTtl (2000 ms)"
        );
        let e = Error::new(
            ErrorKind::InvalidArgument,
            "ttl: must be at most max_ttl (60s)",
        );
        assert_eq!(
            in_call_words(e, "durationMs").message(),
            "durationMs: must be at most maxTtl (60000 ms)"
        );
    }

    #[test]
    fn panics_become_the_core_internal_error() {
        let e = boundary::<()>(|| panic!("boom")).unwrap_err();
        assert!(e.reason.starts_with(ENVELOPE), "{}", e.reason);
        assert!(e.reason.contains(r#""code":"INTERNAL""#), "{}", e.reason);
        assert!(e.reason.contains("boom"), "{}", e.reason);
    }
}
