//! Core bugs the fuzzers found (reported to the lead in issue 6) that are not fixed in core/ yet.
//! While a bug is listed as open, its property is relaxed exactly as far as that bug needs, so
//! `run.sh` stays useful for finding new ones; `tests/known_core_bugs.rs` checks, with every
//! relaxation off, that each listed bug still reproduces from its input in `regressions/`. Once
//! core is fixed that test fails: set the bug's flag to `false` and the full property is back.
//! `run.sh` does the same check with the fuzz binaries, through `IRONLOCK_FUZZ_STRICT=1`.

use std::cell::Cell;
use std::sync::OnceLock;

/// `Config::check()` panics ("overflow when adding durations") when `drift_constant` is near
/// `Duration::MAX`: `Config::drift` adds it to `max_ttl × drift_factor` unchecked. Reachable
/// from Rust and from Python (`duration_from_secs_f64` accepts up to 2^64 s); not from C or Node
/// (milliseconds). Fix in core/src/config.rs: `saturating_add` in `drift`, or reject a
/// `drift_constant` of `max_ttl` or more before computing the drift.
/// Input: `regressions/config/core-bug-drift-overflow`.
pub const DRIFT_OVERFLOW: bool = false;

/// `redact_url` hides only what the URL parser takes for a password, so text that reads as one
/// is shown (and ends up in `InvalidArgument` / `Connection` messages and in `Debug`) when the
/// URL does not parse or parses differently:
/// - its fallback for unparsable text keeps what follows the FIRST '@', though a userinfo ends
///   at the LAST one: `redis://u:abc@defghi@[::` shows `defghi`, and `x@y redis://u:pw@[::`
///   shows all of `pw`;
/// - it keeps a `pass=` / `password=` query of unparsable text verbatim
///   (`redis://[::1?pass=secret`);
/// - when the parser puts the text in a path (`redis:;/x http://user:pw@h`, or a later `://` after
///   a special scheme written without slashes, `https:h/x://user:pw@h`), nothing is hidden.
///
/// Fix in core/src/config.rs `redact_url`: in the fallback use `rsplit_once('@')` and drop
/// everything after a '?'; and when the parser finds no password but the text after a `://`
/// holds `:…@`, mask from that ':' to the last '@' as the fallback does.
/// Inputs: `regressions/*/core-bug-redact-text-*`.
pub const REDACT_TEXT: bool = false;

/// `Config::check()`'s "nodes[i]: unsupported scheme {scheme:?} in {url}" prints the raw text
/// before the first `://` as the scheme, and that text can hold a password the redacted `{url}`
/// hides: a `pass=` query (`redis:/x?pass=secret&y=://z`) or a userinfo
/// (`https:/h:secret@x/://y`). Fix in core/src/config.rs `parse_node`: print the scheme only
/// when it is a plausible one (ASCII letters, digits, `+`, `-`, `.`), else report the URL as
/// unparsable (with the redacted URL only).
/// Inputs: `regressions/*/core-bug-scheme-text-*`.
pub const SCHEME_TEXT: bool = false;

thread_local! {
    static STRICT: Cell<bool> = const { Cell::new(false) };
}

/// Whether the relaxation for an open bug applies: not inside [`strict`], nor in a process
/// started with `IRONLOCK_FUZZ_STRICT=1`.
pub(crate) fn relaxed(open: bool) -> bool {
    static STRICT_ENV: OnceLock<bool> = OnceLock::new();
    let env = *STRICT_ENV
        .get_or_init(|| std::env::var_os("IRONLOCK_FUZZ_STRICT").is_some_and(|v| v == "1"));
    open && !env && !STRICT.with(Cell::get)
}

/// Runs `f` with every relaxation off, as if every known bug were fixed.
pub fn strict<T>(f: impl FnOnce() -> T) -> T {
    let before = STRICT.with(|s| s.replace(true));
    let out = f();
    STRICT.with(|s| s.set(before));
    out
}
