//! `ironlock_lock`: a granted lock, its blocking extend / release, accessors, and
//! auto-extension with a loss callback.

use std::cell::Cell;
use std::ffi::{CString, c_char, c_void};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ironlock::{Access, Error, ErrorKind, KeepAlive, Lock};
use tokio::task::JoinHandle;

use crate::boundary::{c_string, call, guard, invalid};
use crate::error::ironlock_status;
use crate::handles::{arg_out, arg_ref, free};
use crate::report;
use crate::runtime::Runtime;

/// Called once, from an internal runtime thread, when an auto-extended lock is lost.
pub type ironlock_lost_callback = Option<unsafe extern "C" fn(userdata: *mut c_void)>;

/// Which side of a read-write lock an `ironlock_lock` holds (`ironlock_lock_access`). A plain
/// integer (not a C enum), as `ironlock_status`: the numbers are stable and never reused.
/// Added after the 0.1.0 ABI.
pub type ironlock_access = i32;

/// Not a side of a read-write lock: a plain lock (`ironlock_acquire`), a semaphore permit
/// (`ironlock_acquire_permit`), or NULL. Added after the 0.1.0 ABI.
pub const IRONLOCK_ACCESS_NONE: ironlock_access = 0;
/// A read (`ironlock_acquire_read`): shared with other readers. Added after the 0.1.0 ABI.
pub const IRONLOCK_ACCESS_READ: ironlock_access = 1;
/// A write (`ironlock_acquire_write`): excludes readers, other writers and plain locks of the
/// same name. Added after the 0.1.0 ABI.
pub const IRONLOCK_ACCESS_WRITE: ironlock_access = 2;

/// A lock granted by a quorum.
///
/// Ownership: created by `ironlock_acquire`, freed with `ironlock_lock_free`. Freeing does NOT
/// release the lock on Redis (it expires at its ttl): call `ironlock_release` first.
/// Thread safety: extend, release and the accessors may be called from several threads at
/// once; only `ironlock_lock_free` needs that no other call on the lock is running.
pub struct ironlock_lock {
    lock: Lock,
    token: CString,
    auto: Mutex<Option<AutoExtend>>,
    rt: Arc<Runtime>,
}

/// The background extension of one lock and the task waiting for its loss.
struct AutoExtend {
    keep: KeepAlive,
    watcher: JoinHandle<()>,
    /// True once the callback may no longer run; held while it runs, so stopping waits for a
    /// callback in progress and never returns while it can still start.
    gate: Arc<Mutex<bool>>,
}

thread_local! {
    /// The gate of the callback running on this thread, if any (stopping that auto-extension
    /// from inside its own callback must not wait for itself).
    static RUNNING_GATE: Cell<*const Mutex<bool>> = const { Cell::new(ptr::null()) };
}

fn lock_gate(gate: &Mutex<bool>) -> MutexGuard<'_, bool> {
    gate.lock().unwrap_or_else(|p| p.into_inner())
}

impl AutoExtend {
    /// Stops extending and disarms the callback. No Redis traffic.
    fn stop(self) {
        let inside_own_callback = RUNNING_GATE.with(|g| ptr::eq(g.get(), Arc::as_ptr(&self.gate)));
        if !inside_own_callback {
            *lock_gate(&self.gate) = true;
        }
        self.keep.stop();
        self.watcher.abort();
    }
}

struct Callback {
    f: unsafe extern "C" fn(*mut c_void),
    userdata: *mut c_void,
}

// SAFETY: the header tells callers that the callback runs on an internal thread with the
// userdata they gave; making that safe is their side of the contract.
unsafe impl Send for Callback {}

impl Callback {
    fn fire_once(&self, gate: &Mutex<bool>) {
        let mut done = lock_gate(gate);
        if *done {
            return;
        }
        *done = true;
        RUNNING_GATE.with(|g| g.set(gate));
        // SAFETY: a C function pointer given by the caller, with the caller's userdata.
        unsafe { (self.f)(self.userdata) };
        RUNNING_GATE.with(|g| g.set(ptr::null()));
    }
}

impl ironlock_lock {
    pub(crate) fn new(lock: Lock, rt: Arc<Runtime>) -> Self {
        ironlock_lock {
            token: c_string(lock.token()),
            lock,
            auto: Mutex::new(None),
            rt,
        }
    }

    fn auto(&self) -> MutexGuard<'_, Option<AutoExtend>> {
        self.auto.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stop_auto(&self) {
        let running = self.auto().take();
        if let Some(a) = running {
            a.stop();
        }
    }
}

impl Drop for ironlock_lock {
    fn drop(&mut self) {
        self.stop_auto();
    }
}

/// Frees a lock handle. Does NOT release the lock and sends nothing to Redis: the keys stay
/// until `ironlock_release` or their ttl. Stops auto-extension first (waiting for an on_lost
/// callback in progress). NULL is a no-op.
///
/// # Safety
/// `lock` is NULL or came from `ironlock_acquire`, was not freed before, and no other thread
/// is using it. Must not be called from the lock's own on_lost callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_free(lock: *mut ironlock_lock) {
    // SAFETY: forwarded caller contract.
    guard((), || unsafe { free(lock) })
}

/// Extends every key of the lock to `ttl_ms` from now, on a quorum (never re-creating a
/// missing key). Blocks. IRONLOCK_LOST when the lock expired, was released or was taken over
/// (the lock is then marked lost); IRONLOCK_UNAVAILABLE when too few nodes answered (the
/// lock stays valid until its previous deadline). The per-node report is readable through
/// `ironlock_last_report_*`.
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_extend(lock: *mut ironlock_lock, ttl_ms: u64) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(lock.cast_const(), "lock") }?;
        match l
            .rt
            .block_on(l.lock.extend(Duration::from_millis(ttl_ms)))?
        {
            Ok(()) => {
                report::set(Some(&l.lock.report()));
                Ok(())
            }
            Err(e) => {
                report::set(e.report());
                Err(e)
            }
        }
    })
}

/// Releases the lock: deletes its keys on every node where they still hold its token, and
/// stops auto-extension. Blocks until a quorum deleted them (at most node_timeout); the deletes
/// still on their way to the other nodes finish in the background, and the library waits for
/// them (up to a second) when the last handle is freed and at process exit. Returns IRONLOCK_OK
/// also when the lock had already expired or been taken over (nothing foreign is deleted); use
/// `ironlock_release_held` to learn whether a quorum still held it. The handle stays valid
/// (free it with `ironlock_lock_free`).
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_release(lock: *mut ironlock_lock) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { release(lock, ptr::null_mut()) }
}

/// `ironlock_release`, and writes to `*held` whether a quorum of nodes still held the lock
/// (false: it had been lost before the release).
///
/// # Safety
/// `lock` is NULL or a live lock; `held` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_release_held(
    lock: *mut ironlock_lock,
    held: *mut bool,
) -> ironlock_status {
    if held.is_null() {
        return call(|| Err(invalid("held: NULL pointer")));
    }
    // SAFETY: forwarded caller contract.
    unsafe { release(lock, held) }
}

/// Ends a critical section with the loss rule that every language shares: stops
/// auto-extension, releases the lock (as `ironlock_release`) and returns IRONLOCK_OK only if the
/// work held the lock to its end: it was neither lost nor past its validity when this was
/// called, AND the release still found its token on a quorum of nodes. Otherwise IRONLOCK_LOST,
/// with `ironlock_last_error()` saying which and the release's per-node report. The keys are
/// deleted wherever they still hold the token either way. Blocks like `ironlock_release`.
/// Added after the 0.1.0 ABI.
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_finish(lock: *mut ironlock_lock) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(lock.cast_const(), "lock") }?;
        l.rt.check_blocking()?;
        l.stop_auto();
        match l.rt.block_on(l.lock.finish())? {
            Ok(released) => {
                report::set(Some(&released.report));
                Ok(())
            }
            Err(e) => {
                report::set(e.report());
                Err(e)
            }
        }
    })
}

/// # Safety
/// `lock` is NULL or a live lock; `held` is NULL (not wanted) or writable.
unsafe fn release(lock: *mut ironlock_lock, held: *mut bool) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(lock.cast_const(), "lock") }?;
        l.rt.check_blocking()?;
        l.stop_auto();
        let released = l.rt.block_on(l.lock.release())?;
        report::set(Some(&released.report));
        if !held.is_null() {
            // SAFETY: non-NULL, writable by the caller's contract.
            unsafe { held.write(released.held) };
        }
        Ok(())
    })
}

/// Remaining validity in milliseconds from the monotonic clock (rounded down); 0 once lost,
/// released or expired, and for NULL. Never touches Redis.
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_validity_ms(lock: *const ironlock_lock) -> u64 {
    guard(0, || {
        // SAFETY: forwarded caller contract.
        unsafe { lock.as_ref() }.map_or(0, |l| {
            u64::try_from(l.lock.validity().as_millis()).unwrap_or(u64::MAX)
        })
    })
}

/// True while the lock is neither lost nor released and its validity has not run out; false
/// for NULL. Never touches Redis.
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_is_valid(lock: *const ironlock_lock) -> bool {
    // SAFETY: forwarded caller contract.
    guard(false, || {
        unsafe { lock.as_ref() }.is_some_and(|l| l.lock.is_valid())
    })
}

/// True once the lock is known lost: an extension found its token gone, or its validity ran out
/// while auto-extension watched it. The polled twin of the on_lost callback. False for NULL.
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_is_lost(lock: *const ironlock_lock) -> bool {
    // SAFETY: forwarded caller contract.
    guard(false, || {
        unsafe { lock.as_ref() }.is_some_and(|l| l.lock.is_lost())
    })
}

/// Writes the lock's fencing token to `*fence`. IRONLOCK_INVALID_ARGUMENT (and `*fence`
/// untouched) when the lock was acquired without `fencing`.
///
/// # Safety
/// `lock` is NULL or a live lock; `fence` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_fence(
    lock: *const ironlock_lock,
    fence: *mut u64,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(lock, "lock") }?;
        let out = arg_out(fence, "fence")?;
        let value = l
            .lock
            .fence()
            .ok_or_else(|| invalid("lock: acquired without fencing, it has no fencing token"))?;
        // SAFETY: checked non-NULL above.
        unsafe { out.write(value) };
        Ok(())
    })
}

/// Which side of a read-write lock the lock holds: IRONLOCK_ACCESS_READ for a lock from
/// `ironlock_acquire_read`, IRONLOCK_ACCESS_WRITE for one from `ironlock_acquire_write`, and
/// IRONLOCK_ACCESS_NONE for a plain lock, a semaphore permit and NULL. Fixed at the grant (a
/// released or lost lock keeps it). Never touches Redis. Added after the 0.1.0 ABI.
///
/// Thread safety: any thread, concurrently with any call on the lock but `ironlock_lock_free`.
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_access(lock: *const ironlock_lock) -> ironlock_access {
    guard(IRONLOCK_ACCESS_NONE, || {
        // SAFETY: forwarded caller contract.
        match unsafe { lock.as_ref() }.and_then(|l| l.lock.access()) {
            Some(Access::Read) => IRONLOCK_ACCESS_READ,
            Some(Access::Write) => IRONLOCK_ACCESS_WRITE,
            None => IRONLOCK_ACCESS_NONE,
        }
    })
}

/// The lock's random token (40 lowercase hex characters), the value of its keys on Redis.
/// NULL for NULL.
///
/// Ownership: owned by the lock, valid until `ironlock_lock_free`.
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_token(lock: *const ironlock_lock) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: forwarded caller contract.
        unsafe { lock.as_ref() }.map_or(ptr::null(), |l| l.token.as_ptr())
    })
}

/// Makes the per-node report of the lock's last operation (its acquire, or its latest
/// extension or release, including background extensions) this thread's last report, readable
/// through `ironlock_last_report_*`.
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_report(lock: *const ironlock_lock) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(lock, "lock") }?;
        report::set(Some(&l.lock.report()));
        Ok(())
    })
}

/// Keeps the lock extended in the background (when its remaining validity falls below the
/// manager's extension_threshold, default ttl / 3) until `ironlock_release`,
/// `ironlock_lock_stop_auto_extend` or `ironlock_lock_free`.
///
/// If the lock is lost (an extension finds its token gone, or the validity deadline passes
/// without a successful extension), `ironlock_lock_is_lost` turns true, `on_lost` (if not
/// NULL) is called ONCE with `userdata`, and the lock is released on every node where it still
/// holds its token (by the library's auto-extension, the same in every language; the release
/// may come before or after the callback).
///
/// The callback contract: it runs on an internal runtime thread, not the caller's; it must
/// return quickly (it holds up that thread) and may only call non-blocking functions
/// (`ironlock_lock_is_lost`, `_is_valid`, `_validity_ms`, `_token`, `_fence`, set a flag,
/// signal a condition variable); blocking calls (`ironlock_acquire`, `ironlock_extend`,
/// `ironlock_release*`) fail there with IRONLOCK_INVALID_ARGUMENT; it must not call
/// `ironlock_lock_free` on this lock, and must not throw (C++). `userdata` must stay valid until auto-extension is
/// stopped or the lock freed; once those return, the callback is not running and never will.
///
/// IRONLOCK_LOST if the lock is already lost or released; IRONLOCK_INVALID_ARGUMENT if
/// auto-extension is already running on it.
///
/// # Safety
/// `lock` is NULL or a live lock; `on_lost` is NULL or a function safe to call from another
/// thread with `userdata`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_auto_extend(
    lock: *mut ironlock_lock,
    on_lost: ironlock_lost_callback,
    userdata: *mut c_void,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(lock.cast_const(), "lock") }?;
        let mut auto = l.auto();
        if auto.is_some() {
            return Err(invalid("lock: auto-extension is already running"));
        }
        if l.lock.is_lost() || l.lock.is_released() {
            return Err(Error::new(
                ErrorKind::Lost,
                "lock: already lost or released, nothing to keep alive",
            ));
        }
        let gate = Arc::new(Mutex::new(false));
        let callback = on_lost.map(|f| Callback { f, userdata });
        // The core's keep-alive releases the lock on loss (the same policy in every language);
        // this task only tells the C caller.
        let keep = l.lock.keep_alive();
        let watched = l.lock.clone();
        let watcher_gate = gate.clone();
        let watcher = l.rt.spawn(async move {
            watched.lost().await;
            if !watched.is_lost() {
                return; // released, not lost
            }
            // On a thread of its own: the runtime is driven by whichever thread is inside a
            // blocking call, and the callback must not run inside the caller's next call.
            if let Some(cb) = callback {
                let _ = tokio::task::spawn_blocking(move || cb.fire_once(&watcher_gate)).await;
            }
        });
        *auto = Some(AutoExtend {
            keep,
            watcher,
            gate,
        });
        Ok(())
    })
}

/// Stops auto-extension (the lock stays held until it expires or is released). Waits for an
/// on_lost callback in progress; afterwards the callback never runs. No Redis traffic.
/// IRONLOCK_OK also when auto-extension was not running.
///
/// # Safety
/// `lock` is NULL or a live lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_lock_stop_auto_extend(
    lock: *mut ironlock_lock,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let l = unsafe { arg_ref(lock.cast_const(), "lock") }?;
        l.stop_auto();
        Ok(())
    })
}
