//! Exit codes (sysexits.h where one fits) and the one mapping from the core's error kinds.

use ironlock::ErrorKind;

/// `check`: a quorum counts, but not every node does (down, or in quarantine): one node fewer
/// may leave no quorum.
pub const DEGRADED: u8 = 1;
/// Bad command line or argument (EX_USAGE).
pub const USAGE: u8 = 64;
/// No quorum of eligible nodes answered, or a node URL cannot be used (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// A bug in ironlock (EX_SOFTWARE).
pub const INTERNAL: u8 = 70;
/// The lock was lost while the command ran (EX_TEMPFAIL: running it again may succeed).
pub const LOST: u8 = 75;
/// The command could not be executed (as the shell reports it).
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found (as the shell reports it).
pub const NOT_FOUND: u8 = 127;

/// The exit code for a core error; `conflict` is the `-E` value of `run`.
pub fn for_kind(kind: ErrorKind, conflict: u8) -> u8 {
    match kind {
        ErrorKind::Contended => conflict,
        ErrorKind::Unavailable | ErrorKind::Connection => UNAVAILABLE,
        ErrorKind::InvalidArgument => USAGE,
        ErrorKind::Lost => LOST,
        ErrorKind::Internal => INTERNAL,
        // ErrorKind is non-exhaustive: a kind added later is a bug until it is mapped here.
        _ => INTERNAL,
    }
}

/// The exit code of a child that ended with `code` or was killed by `signal` (128 + signal, as
/// the shell reports it).
pub fn for_child(code: Option<i32>, signal: Option<i32>) -> u8 {
    match (code, signal) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(s)) => (128 + (s & 0x7f)) as u8,
        (None, None) => INTERNAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_documented_codes() {
        assert_eq!(for_kind(ErrorKind::Contended, 9), 9);
        assert_eq!(for_kind(ErrorKind::Unavailable, 9), 69);
        assert_eq!(for_kind(ErrorKind::Connection, 9), 69);
        assert_eq!(for_kind(ErrorKind::InvalidArgument, 9), 64);
        assert_eq!(for_kind(ErrorKind::Lost, 9), 75);
        assert_eq!(for_kind(ErrorKind::Internal, 9), 70);
    }

    #[test]
    fn child_status_maps_like_the_shell() {
        assert_eq!(for_child(Some(3), None), 3);
        assert_eq!(for_child(Some(256 + 4), None), 4);
        assert_eq!(for_child(None, Some(15)), 143);
        assert_eq!(for_child(None, Some(9)), 137);
    }
}
