//! The one place where core errors become JS errors.
//!
//! A rejected napi Promise can carry only a status and a message, so the message is a JSON
//! envelope `ironlock:{"code", "message", "report"}` that `lib/errors.js` turns into the matching
//! Error subclass (`ResourceLockedError`, `ExecutionError`, `LockLostError`, …) with `code` and
//! the per-node `report` attached.

use ironlock::{ErrorKind, Report};

/// Prefix of every encoded error message (recognised by `lib/errors.js`).
pub const ENVELOPE: &str = "ironlock:";

/// Binding-only code for an acquire cancelled through its `AbortSignal`; the JS layer rejects
/// with `signal.reason` instead.
pub const ABORTED: &str = "ABORTED";

/// The SPEC §5 code of a core error kind.
pub fn code(kind: ErrorKind) -> &'static str {
    kind.code()
}

/// Converts a core error into the encoded napi error.
pub fn to_napi(e: ironlock::Error) -> napi::Error {
    encode(code(e.kind()), e.message(), e.report())
}

/// An INVALID_ARGUMENT error raised by the binding's own conversions.
pub fn invalid(message: impl AsRef<str>) -> napi::Error {
    encode(code(ErrorKind::InvalidArgument), message.as_ref(), None)
}

/// Encodes `code`, `message` and an optional report as the JSON envelope.
pub fn encode(code: &str, message: &str, report: Option<&Report>) -> napi::Error {
    let report: Vec<serde_json::Value> = report
        .map(|r| r.nodes.iter().map(node_json).collect())
        .unwrap_or_default();
    let body = serde_json::json!({ "code": code, "message": message, "report": report });
    napi::Error::new(napi::Status::GenericFailure, format!("{ENVELOPE}{body}"))
}

fn node_json(n: &ironlock::NodeReport) -> serde_json::Value {
    serde_json::json!({ "url": n.url, "vote": n.vote.as_str(), "error": n.error })
}

/// A report as the JSON array `[{"url", "vote", "error"}, …]`, keys in that order (the JS layer
/// parses it only when `report` is read).
pub fn report_json(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(2 + r.nodes.len() * 64);
    out.push('[');
    for (i, n) in r.nodes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let error = n
            .error
            .as_deref()
            .map_or(serde_json::Value::Null, serde_json::Value::from);
        let _ = write!(
            out,
            "{{\"url\":{},\"vote\":\"{}\",\"error\":{error}}}",
            serde_json::Value::from(n.url.as_str()),
            n.vote.as_str(),
        );
    }
    out.push(']');
    out
}
