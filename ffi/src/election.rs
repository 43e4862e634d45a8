//! Leader elections (added after the 0.1.0 ABI): `ironlock_campaign` and its
//! `ironlock_leadership`, `ironlock_leader` and its `ironlock_leader_info`, `ironlock_observe` and
//! its `ironlock_observer`. Each call is one core call (`LockManager::election`) on the manager's
//! runtime, under the same boundary rules as locks.

use std::ffi::{CString, c_char};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use ironlock::{Error, ErrorKind, Leader, Leadership, Observer, Result};

use crate::boundary::{c_string, call, guard, invalid};
use crate::error::ironlock_status;
use crate::handles::{arg_out, arg_ref, arg_str, free, into_raw};
use crate::manager::ironlock_manager;
use crate::report;
use crate::runtime::Runtime;

/// The longest value a candidate may advertise, in bytes (without the terminating NUL):
/// `ironlock_campaign` and `ironlock_proclaim` refuse a longer one with
/// IRONLOCK_INVALID_ARGUMENT naming `value`. Added after the 0.1.0 ABI.
pub const IRONLOCK_MAX_ELECTION_VALUE_LEN: usize = 65536;

/// This candidate's leadership of an election, granted by `ironlock_campaign` and kept extended
/// in the background until it is resigned, lost or freed.
///
/// Ownership: created by `ironlock_campaign`, freed with `ironlock_leadership_free`. Freeing
/// does NOT resign: it stops the extensions and sends nothing to Redis, as if the process had
/// died, and the next candidate leads once the key expires (at most a ttl later). Call
/// `ironlock_resign` first to hand over at once. A leadership stays usable after its manager is
/// freed (it keeps the runtime alive). Thread safety: every call may be made from several
/// threads at once, except that `ironlock_leadership_free` needs that no other call on the
/// leadership is running, and a value read with `ironlock_leadership_value` must not be used
/// while another thread proclaims. Added after the 0.1.0 ABI.
pub struct ironlock_leadership {
    leadership: Leadership,
    token: CString,
    /// The value last advertised (handed out by `ironlock_leadership_value`).
    value: Mutex<CString>,
    rt: Arc<Runtime>,
}

impl ironlock_leadership {
    fn value(&self) -> MutexGuard<'_, CString> {
        self.value.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The error of a call on a leadership that ended.
    fn ended(&self) -> Error {
        let name = self
            .leadership
            .lock()
            .resources()
            .first()
            .cloned()
            .unwrap_or_default();
        let how = if self.leadership.lock().is_released() && !self.leadership.is_lost() {
            "was resigned"
        } else {
            "was lost"
        };
        Error::new(
            ErrorKind::Lost,
            format!(
                "leadership of election {:?} (term {}) {how}",
                cut(&name),
                self.leadership.term()
            ),
        )
    }
}

/// Who led an election when it was read (`ironlock_leader`, `ironlock_observer_next`).
///
/// Ownership: created by those calls, freed with `ironlock_leader_info_free`. Thread safety:
/// immutable; any thread may read it, one frees it. Added after the 0.1.0 ABI.
pub struct ironlock_leader_info {
    value: CString,
    token: CString,
    term: u64,
    /// The end of the leader's validity as read (the read's instant plus its validity).
    until: Instant,
}

impl ironlock_leader_info {
    fn new(leader: Leader) -> Self {
        ironlock_leader_info {
            value: c_string(&leader.value),
            token: c_string(&leader.token),
            term: leader.term,
            until: Instant::now()
                .checked_add(leader.validity)
                .unwrap_or_else(Instant::now),
        }
    }
}

/// The changes of leader of one election, in order (`ironlock_observe`).
///
/// Ownership: created by `ironlock_observe`, freed with `ironlock_observer_free` (no Redis
/// traffic). It keeps working after its manager is freed (it keeps the connections and the
/// runtime alive, as a lock does). Thread safety: one `ironlock_observer_next` at a time (a
/// second one on another thread meanwhile fails with IRONLOCK_INVALID_ARGUMENT); it may be
/// used from any thread; `ironlock_observer_free` needs that no call on it is running. Added
/// after the 0.1.0 ABI.
pub struct ironlock_observer {
    observer: Mutex<Observer>,
    rt: Arc<Runtime>,
}

/// At most 64 characters of `s`, for messages.
fn cut(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The election name argument: not NULL, UTF-8, and a name the core accepts (not empty, not
/// ending in a suffix ironlock keeps for its own keys), naming the argument `name`.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string that lives for `'a`.
unsafe fn election_name<'a>(ptr: *const c_char) -> Result<&'a str> {
    // SAFETY: forwarded caller contract.
    let name = unsafe { arg_str(ptr, "name") }?;
    ironlock::validate_election_name(name)?;
    Ok(name)
}

/// The value argument: not NULL, UTF-8, at most `IRONLOCK_MAX_ELECTION_VALUE_LEN` bytes.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string that lives for `'a`.
unsafe fn election_value<'a>(ptr: *const c_char) -> Result<&'a str> {
    // SAFETY: forwarded caller contract.
    let value = unsafe { arg_str(ptr, "value") }?;
    if value.len() > IRONLOCK_MAX_ELECTION_VALUE_LEN {
        return Err(invalid(format!(
            "value: at most {IRONLOCK_MAX_ELECTION_VALUE_LEN} bytes, got {}",
            value.len()
        )));
    }
    Ok(value)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Records the report of a failed call, passes the error on.
fn failed<T>(e: Error) -> Result<T> {
    report::set(e.report());
    Err(e)
}

/// Waits in line for the election `name` until this candidate leads, then writes its
/// leadership to `*out`, kept extended in the background (until `ironlock_resign`, a loss or
/// `ironlock_leadership_free`). Candidates lead in the order they queued (on every node), and a
/// candidate is told it leads only once a quorum of nodes granted it, with `value` (what it
/// advertises, its address say: UTF-8, at most IRONLOCK_MAX_ELECTION_VALUE_LEN bytes, "" for
/// none) and its term written on them. The term (`ironlock_leadership_term`) is the grant's
/// fencing token: every later leader's is larger.
/// `ttl_ms` bounds how long the election stays with a leader that died without resigning.
/// `wait_ms` gives up after that many milliseconds; 0 waits as long as it takes. A candidate
/// that gives up leaves the line on every node. Blocks the calling thread; writes `*out` only
/// on success; the per-node report of the grant (or of the last round) is readable through
/// `ironlock_last_report_*`.
///
/// The election's key is the lock key of `name`: a plain lock of the same name
/// (`ironlock_acquire`) excludes every candidate.
///
/// Returns IRONLOCK_CONTENDED when `wait_ms` ran out before this candidate led,
/// IRONLOCK_UNAVAILABLE when too few nodes answered, IRONLOCK_INVALID_ARGUMENT for bad input,
/// naming it: a NULL `manager`, `out`, `name` or `value`, an empty or non-UTF-8 `name`, a
/// non-UTF-8 or too long `value`, a ttl of 0 or above max_ttl. Nothing reaches Redis for bad
/// input. Added after the 0.1.0 ABI.
///
/// # Safety
/// `manager` is NULL or a live manager; `name` and `value` are NULL or NUL-terminated strings;
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_campaign(
    manager: *mut ironlock_manager,
    name: *const c_char,
    value: *const c_char,
    ttl_ms: u64,
    wait_ms: u64,
    out: *mut *mut ironlock_leadership,
) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let m = unsafe { arg_ref(manager.cast_const(), "manager") }?;
        // SAFETY: forwarded caller contract.
        let name = unsafe { election_name(name) }?;
        // SAFETY: forwarded caller contract.
        let value = unsafe { election_value(value) }?;
        let out = arg_out(out, "out")?;
        let ttl = Duration::from_millis(ttl_ms);
        let wait = (wait_ms > 0).then(|| Duration::from_millis(wait_ms));
        let election = m.manager().election(name);
        let leadership = match m.rt.block_on(election.campaign_with(value, ttl, wait))? {
            Ok(l) => l,
            Err(e) => return failed(e),
        };
        report::set(Some(&leadership.lock().report()));
        let handle = into_raw(ironlock_leadership {
            token: c_string(leadership.lock().token()),
            value: Mutex::new(c_string(value)),
            leadership,
            rt: m.rt.clone(),
        });
        // SAFETY: checked non-NULL above; written only on success.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Frees a leadership handle. Does NOT resign and sends nothing to Redis: the extensions stop
/// (as if the process had died) and the next candidate leads once the key expires. Call
/// `ironlock_resign` first to hand over at once. NULL is a no-op. Added after the 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or came from `ironlock_campaign`, was not freed before, and no other
/// thread is using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leadership_free(leadership: *mut ironlock_leadership) {
    // SAFETY: forwarded caller contract.
    guard((), || unsafe { free(leadership) })
}

/// The leadership's term: the fencing token of its grant, larger than every earlier leader's
/// of the election. Pass it to what the leader writes to, so that a deposed leader's late
/// writes can be refused. 0 for NULL. Never touches Redis. Added after the 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or a live leadership.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leadership_term(leadership: *const ironlock_leadership) -> u64 {
    guard(0, || {
        // SAFETY: forwarded caller contract.
        unsafe { leadership.as_ref() }.map_or(0, |l| l.leadership.term())
    })
}

/// The leadership's token (40 lowercase hex characters): the value of the election's key on
/// Redis, and the `token` of `ironlock_leader_info` while this candidate leads. NULL for NULL.
///
/// Ownership: owned by the leadership, valid until `ironlock_leadership_free`. Added after the
/// 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or a live leadership.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leadership_token(
    leadership: *const ironlock_leadership,
) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: forwarded caller contract.
        unsafe { leadership.as_ref() }.map_or(ptr::null(), |l| l.token.as_ptr())
    })
}

/// The value this leader advertises: the campaign's, or the last one `ironlock_proclaim`
/// wrote. NULL for NULL. Never touches Redis.
///
/// Ownership: owned by the leadership, valid until the next successful `ironlock_proclaim` on
/// it (which replaces it) or `ironlock_leadership_free`; do not use it while another thread
/// proclaims. Added after the 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or a live leadership.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leadership_value(
    leadership: *const ironlock_leadership,
) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: forwarded caller contract.
        unsafe { leadership.as_ref() }.map_or(ptr::null(), |l| l.value().as_ptr())
    })
}

/// How long the leadership is still valid, in milliseconds from the monotonic clock (rounded
/// down). It ends a margin (a tenth of the ttl, at most a second) before the key's own
/// validity, so that a leader hears of its loss before another candidate can lead. 0 once lost,
/// resigned or run out, and for NULL. Never touches Redis. Added after the 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or a live leadership.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leadership_validity_ms(
    leadership: *const ironlock_leadership,
) -> u64 {
    guard(0, || {
        // SAFETY: forwarded caller contract.
        unsafe { leadership.as_ref() }.map_or(0, |l| millis(l.leadership.validity()))
    })
}

/// True while this candidate leads: neither lost nor resigned, and its validity has not run
/// out. False for NULL. Never touches Redis. Added after the 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or a live leadership.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leadership_is_leader(
    leadership: *const ironlock_leadership,
) -> bool {
    guard(false, || {
        // SAFETY: forwarded caller contract.
        unsafe { leadership.as_ref() }.is_some_and(|l| l.leadership.is_leader())
    })
}

/// True once the leadership is known lost: an extension found no quorum holding it, or its
/// validity ran out before one succeeded (false after a resignation). False for NULL. Never
/// touches Redis. Added after the 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or a live leadership.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leadership_is_lost(
    leadership: *const ironlock_leadership,
) -> bool {
    guard(false, || {
        // SAFETY: forwarded caller contract.
        unsafe { leadership.as_ref() }.is_some_and(|l| l.leadership.is_lost())
    })
}

/// Waits up to `timeout_ms` milliseconds (0: as long as it takes) for the leadership to end.
/// Returns IRONLOCK_LOST as soon as it has ended (lost: told a tenth of the ttl, at most a
/// second, before its validity would end; or resigned, from any thread; or run out), with
/// `ironlock_last_error()` saying which, and at once if it had already; IRONLOCK_OK when the
/// timeout passed and this candidate still leads. Blocks the calling thread; sends nothing to
/// Redis (the background extensions decide). Added after the 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or a live leadership.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leadership_wait_lost(
    leadership: *const ironlock_leadership,
    timeout_ms: u64,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(leadership, "leadership") }?;
        let ended = l.rt.block_on(async {
            if timeout_ms == 0 {
                l.leadership.lost().await;
                true
            } else {
                let timeout = Duration::from_millis(timeout_ms);
                tokio::time::timeout(timeout, l.leadership.lost())
                    .await
                    .is_ok()
            }
        })?;
        if ended { Err(l.ended()) } else { Ok(()) }
    })
}

/// Advertises a new value (a UTF-8 string of at most IRONLOCK_MAX_ELECTION_VALUE_LEN bytes),
/// only while still leader: it is written on a quorum of nodes where the election's key still
/// holds this leadership, and observers are woken. Blocks the calling thread.
///
/// Returns IRONLOCK_LOST when this candidate no longer leads (nothing is written),
/// IRONLOCK_UNAVAILABLE when too few nodes wrote it (the advertised value stays the old one),
/// IRONLOCK_INVALID_ARGUMENT for a NULL `leadership` or `value`, a non-UTF-8 or too long
/// `value`. Added after the 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or a live leadership; `value` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_proclaim(
    leadership: *mut ironlock_leadership,
    value: *const c_char,
) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(leadership.cast_const(), "leadership") }?;
        // SAFETY: forwarded caller contract.
        let value = unsafe { election_value(value) }?;
        if let Err(e) = l.rt.block_on(l.leadership.proclaim(value))? {
            return failed(e);
        }
        *l.value() = c_string(value);
        Ok(())
    })
}

/// Steps down: stops the extensions and deletes the election's key and leader record on every
/// node where they still hold this leadership (the next candidate in line is woken at once).
/// Blocks until a quorum deleted them (at most node_timeout), as `ironlock_release`; the per-node
/// report is readable through `ironlock_last_report_*`. IRONLOCK_OK also when the leadership had
/// already been lost or resigned (nothing foreign is deleted). The handle stays valid (free it
/// with `ironlock_leadership_free`). Added after the 0.1.0 ABI.
///
/// # Safety
/// `leadership` is NULL or a live leadership.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_resign(leadership: *mut ironlock_leadership) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(leadership.cast_const(), "leadership") }?;
        let released = l.rt.block_on(l.leadership.resign())?;
        report::set(Some(&released.report));
        Ok(())
    })
}

/// Reads who leads the election `name` from every node (a quorum must answer): writes a new
/// `ironlock_leader_info` to `*out`, or NULL when nobody leads (or a candidate was granted and
/// its record is not written yet), with IRONLOCK_OK either way. Blocks the calling thread;
/// writes `*out` only on success.
///
/// Returns IRONLOCK_UNAVAILABLE when fewer than a quorum of nodes answered (with the per-node
/// report), IRONLOCK_INVALID_ARGUMENT for a NULL `manager`, `name` or `out`, or an empty or
/// non-UTF-8 `name`. Added after the 0.1.0 ABI.
///
/// # Safety
/// `manager` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `out` is
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leader(
    manager: *mut ironlock_manager,
    name: *const c_char,
    out: *mut *mut ironlock_leader_info,
) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let m = unsafe { arg_ref(manager.cast_const(), "manager") }?;
        // SAFETY: forwarded caller contract.
        let name = unsafe { election_name(name) }?;
        let out = arg_out(out, "out")?;
        let leader = match m.rt.block_on(m.manager().election(name).leader())? {
            Ok(l) => l,
            Err(e) => return failed(e),
        };
        let handle = leader.map_or(ptr::null_mut(), |l| into_raw(ironlock_leader_info::new(l)));
        // SAFETY: checked non-NULL above; written only on success.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Frees a leader info. NULL is a no-op. Added after the 0.1.0 ABI.
///
/// # Safety
/// `info` is NULL or came from `ironlock_leader` or `ironlock_observer_next` and was not freed
/// before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leader_info_free(info: *mut ironlock_leader_info) {
    // SAFETY: forwarded caller contract.
    guard((), || unsafe { free(info) })
}

/// The value the leader advertises, as last proclaimed. NULL for NULL.
///
/// Ownership: owned by the info, valid until `ironlock_leader_info_free`. Added after the 0.1.0
/// ABI.
///
/// # Safety
/// `info` is NULL or a live leader info.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leader_info_value(
    info: *const ironlock_leader_info,
) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: forwarded caller contract.
        unsafe { info.as_ref() }.map_or(ptr::null(), |i| i.value.as_ptr())
    })
}

/// The leader's token (its leadership's `ironlock_leadership_token`). NULL for NULL.
///
/// Ownership: owned by the info, valid until `ironlock_leader_info_free`. Added after the 0.1.0
/// ABI.
///
/// # Safety
/// `info` is NULL or a live leader info.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leader_info_token(
    info: *const ironlock_leader_info,
) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: forwarded caller contract.
        unsafe { info.as_ref() }.map_or(ptr::null(), |i| i.token.as_ptr())
    })
}

/// The leader's term (the fencing token of its grant; every later leader's is larger). 0 for
/// NULL. Added after the 0.1.0 ABI.
///
/// # Safety
/// `info` is NULL or a live leader info.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leader_info_term(info: *const ironlock_leader_info) -> u64 {
    guard(0, || {
        // SAFETY: forwarded caller contract.
        unsafe { info.as_ref() }.map_or(0, |i| i.term)
    })
}

/// How long the leadership stays valid at most, in milliseconds: what the nodes that hold it
/// said when it was read (the quorum-th longest remaining time to live, less the read's
/// duration), less the time since, from the monotonic clock. 0 once past, and for NULL. Added
/// after the 0.1.0 ABI.
///
/// # Safety
/// `info` is NULL or a live leader info.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_leader_info_validity_ms(
    info: *const ironlock_leader_info,
) -> u64 {
    guard(0, || {
        // SAFETY: forwarded caller contract.
        unsafe { info.as_ref() }.map_or(0, |i| {
            millis(i.until.saturating_duration_since(Instant::now()))
        })
    })
}

/// Starts following the changes of leader of the election `name`: writes a new observer to
/// `*out` (only on success); `ironlock_observer_next` gives the changes. Sends nothing to Redis
/// itself (it subscribes to the election's announcements in the background).
///
/// Returns IRONLOCK_INVALID_ARGUMENT for a NULL `manager`, `name` or `out`, or an empty or
/// non-UTF-8 `name`. Added after the 0.1.0 ABI.
///
/// # Safety
/// `manager` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `out` is
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_observe(
    manager: *mut ironlock_manager,
    name: *const c_char,
    out: *mut *mut ironlock_observer,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let m = unsafe { arg_ref(manager.cast_const(), "manager") }?;
        // SAFETY: forwarded caller contract.
        let name = unsafe { election_name(name) }?;
        let out = arg_out(out, "out")?;
        let observer = m.manager().election(name).observe()?;
        let handle = into_raw(ironlock_observer {
            observer: Mutex::new(observer),
            rt: m.rt.clone(),
        });
        // SAFETY: checked non-NULL above; written only on success.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Frees an observer. Sends nothing to Redis (its subscriptions are dropped in the
/// background). NULL is a no-op. Added after the 0.1.0 ABI.
///
/// # Safety
/// `observer` is NULL or came from `ironlock_observe`, was not freed before, and no other
/// thread is using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_observer_free(observer: *mut ironlock_observer) {
    // SAFETY: forwarded caller contract.
    guard((), || unsafe { free(observer) })
}

/// Waits up to `timeout_ms` milliseconds (0: as long as it takes) for the next change of
/// leader, and returns IRONLOCK_OK with one of two outcomes:
/// - a change (`*changed` = true): `*out` is who leads now, a new `ironlock_leader_info` to free
///   with `ironlock_leader_info_free`, or NULL when nobody leads. The first call gives the
///   current state at once. Leaders follow one another in increasing terms; a proclaim is a
///   change too (same term, new value); a change undone before a read sees it (a candidate
///   that led and resigned between two reads) is not delivered.
/// - no change before the timeout (`*changed` = false, `*out` = NULL).
///
/// Woken by the grants, proclaims and resignations as they are announced, and polling as the
/// fallback (a leader that expired); reads that fail meanwhile (too few nodes) are retried, not
/// returned. So the stream has no end of its own: freeing the manager does not end it (the C
/// API has no close; IRONLOCK_UNAVAILABLE would mean the core's manager was closed). Stop
/// calling and free the observer instead; a finite timeout lets a thread check a stop flag.
/// Returns IRONLOCK_INVALID_ARGUMENT for a NULL `observer`, `changed` or `out`, or while another
/// thread is inside `ironlock_observer_next` on the same observer. Blocks the calling thread;
/// writes `*changed` and `*out` only on success. Added after the 0.1.0 ABI.
///
/// # Safety
/// `observer` is NULL or a live observer; `changed` and `out` are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_observer_next(
    observer: *mut ironlock_observer,
    timeout_ms: u64,
    changed: *mut bool,
    out: *mut *mut ironlock_leader_info,
) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let o = unsafe { arg_ref(observer.cast_const(), "observer") }?;
        let changed = arg_out(changed, "changed")?;
        let out = arg_out(out, "out")?;
        let mut observer = match o.observer.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(invalid(
                    "observer: another thread is inside ironlock_observer_next on it",
                ));
            }
        };
        let next = o.rt.block_on(async {
            if timeout_ms == 0 {
                Some(observer.next().await)
            } else {
                let timeout = Duration::from_millis(timeout_ms);
                tokio::time::timeout(timeout, observer.next()).await.ok()
            }
        })?;
        let (is_change, handle) = match next {
            None => (false, ptr::null_mut()),
            Some(Ok(leader)) => (
                true,
                leader.map_or(ptr::null_mut(), |l| into_raw(ironlock_leader_info::new(l))),
            ),
            Some(Err(e)) => return failed(e),
        };
        // SAFETY: both checked non-NULL above; written only on success.
        unsafe {
            changed.write(is_change);
            out.write(handle);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn the_longest_value_is_the_core_s() {
        assert_eq!(
            IRONLOCK_MAX_ELECTION_VALUE_LEN,
            ironlock::MAX_ELECTION_VALUE_LEN
        );
    }

    fn last_error() -> String {
        // SAFETY: never NULL, valid until the next call on this thread.
        unsafe { CStr::from_ptr(crate::error::ironlock_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn bad_arguments_are_named_before_anything_else() {
        use crate::error::IRONLOCK_INVALID_ARGUMENT;
        let mut out = ptr::null_mut();
        // SAFETY: NULL pointers and static strings only.
        unsafe {
            let s = ironlock_campaign(ptr::null_mut(), c"x".as_ptr(), c"".as_ptr(), 1, 0, &mut out);
            assert_eq!(
                (s, last_error().as_str()),
                (IRONLOCK_INVALID_ARGUMENT, "manager: NULL pointer")
            );
            assert!(out.is_null());
            let s = ironlock_leadership_wait_lost(ptr::null(), 1);
            assert_eq!(
                (s, last_error().as_str()),
                (IRONLOCK_INVALID_ARGUMENT, "leadership: NULL pointer")
            );
            assert_eq!(ironlock_leadership_term(ptr::null()), 0);
            assert!(ironlock_leadership_value(ptr::null()).is_null());
            assert!(ironlock_leader_info_token(ptr::null()).is_null());
        }
        assert!(unsafe { election_name(c"".as_ptr()) }.is_err());
        assert_eq!(
            last_error_of(unsafe { election_name(c"".as_ptr()) }),
            "name: empty election name"
        );
        assert!(
            last_error_of(unsafe { election_name(c"x:ironlock:fence".as_ptr()) })
                .starts_with("name: a name ending in \":ironlock:fence\"")
        );
    }

    fn last_error_of<T>(r: Result<T>) -> String {
        r.err().map(|e| e.message().to_owned()).unwrap_or_default()
    }
}
