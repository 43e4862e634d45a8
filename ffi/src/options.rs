//! `ironlock_acquire_opts`: the extensible options of one acquire (added after the 0.1.0 ABI).
//!
//! The 0.1.0 `ironlock_acquire_options` is a public struct: it can never grow without breaking
//! programs compiled against the old header, so it stays as it is. New per-acquire options (the
//! fair-lock flag, a semaphore's limit, …) arrive only as new setters on this opaque object,
//! which a program allocates through the library and therefore always has the library's size.

use std::time::Duration;

use ironlock::AcquireOptions;

use crate::boundary::{call, guard};
use crate::error::ironlock_status;
use crate::handles::{arg_mut, free, into_raw};

/// Options of one acquire, built with setters (every option starts at its default: the
/// manager's retry settings, no wait deadline, no fencing).
///
/// Ownership: `ironlock_acquire_opts_new` / `ironlock_acquire_opts_free`; it may be reused for
/// any number of `ironlock_acquire_with` calls. Thread safety: a set of options may be read by
/// several acquires at once, but not changed while one of them runs.
pub struct ironlock_acquire_opts {
    pub(crate) options: AcquireOptions,
}

/// New acquire options, all at their defaults. NULL only if the library failed internally.
/// Added after the 0.1.0 ABI.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_acquire_opts_new() -> *mut ironlock_acquire_opts {
    guard(std::ptr::null_mut(), || {
        into_raw(ironlock_acquire_opts {
            options: AcquireOptions::default(),
        })
    })
}

/// Frees acquire options. NULL is a no-op. Added after the 0.1.0 ABI.
///
/// # Safety
/// `opts` is NULL or came from `ironlock_acquire_opts_new` and was not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_opts_free(opts: *mut ironlock_acquire_opts) {
    // SAFETY: forwarded caller contract.
    guard((), || unsafe { free(opts) })
}

/// Changes one option.
///
/// # Safety
/// `opts` is NULL or live.
unsafe fn edit(
    opts: *mut ironlock_acquire_opts,
    change: impl FnOnce(&mut AcquireOptions),
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let o = unsafe { arg_mut(opts, "opts") }?;
        change(&mut o.options);
        Ok(())
    })
}

/// Keep retrying until `wait_ms` milliseconds have passed, however many rounds that takes (no
/// round starts after the deadline); 0 = no deadline (the manager's retry_count rounds).
/// Added after the 0.1.0 ABI.
///
/// # Safety
/// `opts` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_opts_set_wait_ms(
    opts: *mut ironlock_acquire_opts,
    wait_ms: u64,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        edit(opts, |o| {
            o.wait = (wait_ms > 0).then(|| Duration::from_millis(wait_ms))
        })
    }
}

/// Further rounds after the first for this call, instead of the manager's retry_count (0 = one
/// round only: try-lock). Added after the 0.1.0 ABI.
///
/// # Safety
/// `opts` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_opts_set_retry_count(
    opts: *mut ironlock_acquire_opts,
    retry_count: u32,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { edit(opts, |o| o.retry_count = Some(retry_count)) }
}

/// Compute a fencing token (read it with `ironlock_lock_fence`). Added after the 0.1.0 ABI.
///
/// # Safety
/// `opts` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_opts_set_fencing(
    opts: *mut ironlock_acquire_opts,
    fencing: bool,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { edit(opts, |o| o.fencing = fencing) }
}

/// Wait in line (FIFO across the quorum), whatever the manager's `fair` setting says;
/// `fair` false makes this acquire plain. Options never given this take the manager's setting.
/// `ironlock_acquire_read` / `_write` with `fair` wait in the same line as fair locks of the
/// name, readers and writers in the order they queued. Added after the 0.1.0 ABI.
///
/// # Safety
/// `opts` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_opts_set_fair(
    opts: *mut ironlock_acquire_opts,
    fair: bool,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { edit(opts, |o| o.fair = Some(fair)) }
}

/// Hold the lock at least `min_hold_ms` after the grant: a release before then leaves the lock
/// taken (its keys set to expire when the hold is over) instead of freeing it, so that a job
/// that finished early is not run again meanwhile by a machine whose schedule is a little
/// behind. 0 (the default) releases at once. At most the lock's ttl (`ironlock_acquire_with`
/// fails with IRONLOCK_INVALID_ARGUMENT naming `min_hold` otherwise); locks only: a non-zero
/// hold is refused the same way for semaphore permits and read-write locks. Added after the
/// 0.1.0 ABI.
///
/// # Safety
/// `opts` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_opts_set_min_hold(
    opts: *mut ironlock_acquire_opts,
    min_hold_ms: u64,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        edit(opts, |o| {
            o.min_hold = Some(Duration::from_millis(min_hold_ms))
        })
    }
}
