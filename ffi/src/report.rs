//! The per-node report of the last Redis operation on this thread, readable from C.
//!
//! `ironlock_acquire`, `ironlock_extend`, `ironlock_release*` and `ironlock_lock_report` replace
//! it; the strings it hands out stay valid until then (on the same thread).

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::ptr;

use ironlock::Report;

use crate::boundary::{c_string, guard};

struct NodeLine {
    url: CString,
    vote: CString,
    error: Option<CString>,
}

#[derive(Default)]
struct LastReport {
    nodes: Vec<NodeLine>,
    elapsed_us: u64,
    rounds: u32,
}

thread_local! {
    static LAST_REPORT: RefCell<LastReport> = RefCell::new(LastReport::default());
}

/// Replaces this thread's last report (`None`: an empty report, e.g. after a bad argument).
pub(crate) fn set(report: Option<&Report>) {
    let next = match report {
        None => LastReport::default(),
        Some(r) => LastReport {
            nodes: r
                .nodes
                .iter()
                .map(|n| NodeLine {
                    url: c_string(&n.url),
                    vote: c_string(n.vote.as_str()),
                    error: n.error.as_deref().map(c_string),
                })
                .collect(),
            elapsed_us: u64::try_from(r.elapsed.as_micros()).unwrap_or(u64::MAX),
            rounds: r.rounds,
        },
    };
    LAST_REPORT.with(|last| *last.borrow_mut() = next);
}

fn with<T>(fallback: T, f: impl FnOnce(&LastReport) -> T) -> T {
    guard(fallback, || LAST_REPORT.with(|last| f(&last.borrow())))
}

fn node_str(index: usize, pick: impl FnOnce(&NodeLine) -> Option<&CString>) -> *const c_char {
    with(ptr::null(), |r| {
        r.nodes
            .get(index)
            .and_then(pick)
            .map_or(ptr::null(), |s| s.as_ptr())
    })
}

/// Number of nodes in this thread's last report: one per configured node after an operation
/// that reached Redis, 0 after a call rejected before any Redis traffic (or before any call).
///
/// Thread safety: reads this thread's report only.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_last_report_node_count() -> usize {
    with(0, |r| r.nodes.len())
}

/// URL of node `index` (configuration order) in this thread's last report, with any password
/// replaced by `***`; NULL when `index` is out of range.
///
/// Ownership: owned by the library, valid until the next `ironlock_acquire`, `ironlock_extend`,
/// `ironlock_release`, `ironlock_release_held` or `ironlock_lock_report` call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_last_report_node_url(index: usize) -> *const c_char {
    node_str(index, |n| Some(&n.url))
}

/// Vote of node `index` in this thread's last report: `"for"`, `"against"`, `"error"`,
/// `"timeout"`, `"not_eligible"`, `"pending"` (decided before this node answered) or, for an
/// extension (added after 0.1.0), `"reseated"` (the node had restarted and the keys were written back);
/// NULL when `index` is out of range.
///
/// Ownership: as `ironlock_last_report_node_url`.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_last_report_node_vote(index: usize) -> *const c_char {
    node_str(index, |n| Some(&n.vote))
}

/// Error text of node `index` in this thread's last report (votes `"error"` and `"timeout"`,
/// passwords removed); NULL when the node had no error or `index` is out of range.
///
/// Ownership: as `ironlock_last_report_node_url`.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_last_report_node_error(index: usize) -> *const c_char {
    node_str(index, |n| n.error.as_ref())
}

/// Monotonic duration of the last round of this thread's last report, in microseconds.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_last_report_elapsed_us() -> u64 {
    with(0, |r| r.elapsed_us)
}

/// Rounds run by the operation of this thread's last report (acquire retries; 1 for extend,
/// 0 for release and for an empty report).
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_last_report_rounds() -> u32 {
    with(0, |r| r.rounds)
}
