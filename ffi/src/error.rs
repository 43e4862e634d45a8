//! Status codes of the C API and the one place the core's `ErrorKind` is mapped to them.

use std::ffi::c_char;

use ironlock::ErrorKind;

/// The result of every fallible ironlock call. The numbers are stable and never reused: new
/// codes are only ever appended. A plain integer (not a C enum) so that any value is safe to
/// pass around, store and compare, in C and in C++.
pub type ironlock_status = i32;

/// Success.
pub const IRONLOCK_OK: ironlock_status = 0;
/// No quorum, and at least one node answered that another token holds a key: the lock is held
/// elsewhere.
pub const IRONLOCK_CONTENDED: ironlock_status = 1;
/// No quorum, and no node said the lock is held: nodes down, timed out or not eligible, or the
/// round took longer than the ttl.
pub const IRONLOCK_UNAVAILABLE: ironlock_status = 2;
/// Extend or check on a lock that expired, was released or was taken over.
pub const IRONLOCK_LOST: ironlock_status = 3;
/// Bad input: a NULL pointer, a zero length, a non-UTF-8 string, a setting out of range, ...
/// `ironlock_last_error()` names the argument.
pub const IRONLOCK_INVALID_ARGUMENT: ironlock_status = 4;
/// A node URL cannot be used at all at start (bad scheme, unresolvable host).
pub const IRONLOCK_CONNECTION: ironlock_status = 5;
/// A bug in ironlock, including a caught Rust panic. Never an abort.
pub const IRONLOCK_INTERNAL: ironlock_status = 6;

/// Maps a core error kind to its status (SPEC §5). The wildcard covers kinds a future core may
/// add (`ErrorKind` is non-exhaustive) until this table learns them.
pub(crate) fn status_of(kind: ErrorKind) -> ironlock_status {
    match kind {
        ErrorKind::Contended => IRONLOCK_CONTENDED,
        ErrorKind::Unavailable => IRONLOCK_UNAVAILABLE,
        ErrorKind::Lost => IRONLOCK_LOST,
        ErrorKind::InvalidArgument => IRONLOCK_INVALID_ARGUMENT,
        ErrorKind::Connection => IRONLOCK_CONNECTION,
        ErrorKind::Internal => IRONLOCK_INTERNAL,
        _ => IRONLOCK_INTERNAL,
    }
}

/// The name of a status, e.g. `"CONTENDED"` for `IRONLOCK_CONTENDED` (`"OK"` for
/// `IRONLOCK_OK`, `"UNKNOWN"` for a number this library does not know).
///
/// Ownership: a static string; never free it. Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_status_str(status: ironlock_status) -> *const c_char {
    let s: &'static std::ffi::CStr = match status {
        IRONLOCK_OK => c"OK",
        IRONLOCK_CONTENDED => c"CONTENDED",
        IRONLOCK_UNAVAILABLE => c"UNAVAILABLE",
        IRONLOCK_LOST => c"LOST",
        IRONLOCK_INVALID_ARGUMENT => c"INVALID_ARGUMENT",
        IRONLOCK_CONNECTION => c"CONNECTION",
        IRONLOCK_INTERNAL => c"INTERNAL",
        _ => c"UNKNOWN",
    };
    s.as_ptr()
}

/// The message of the last failed call on this thread that returned an `ironlock_status`: it
/// names the failing argument (`"resources[1]: not valid UTF-8"`) or carries the per-node
/// report. `""` when that call succeeded (every such call clears it first). Never NULL.
///
/// Ownership: owned by the library, valid until the next call on this thread that returns an
/// `ironlock_status`. Thread safety: each thread has its own.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_last_error() -> *const c_char {
    static EMPTY: &std::ffi::CStr = c"";
    crate::boundary::guard(EMPTY.as_ptr(), crate::boundary::last_error_ptr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn every_kind_maps_to_the_status_of_the_same_name() {
        for kind in [
            ErrorKind::Contended,
            ErrorKind::Unavailable,
            ErrorKind::Lost,
            ErrorKind::InvalidArgument,
            ErrorKind::Connection,
            ErrorKind::Internal,
        ] {
            let name = unsafe { CStr::from_ptr(ironlock_status_str(status_of(kind))) };
            assert_eq!(name.to_str().unwrap(), kind.code());
        }
    }
}
