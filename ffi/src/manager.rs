//! `ironlock_manager`: a core `LockManager` plus the runtime it lives on; blocking acquire.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::sync::Arc;
use std::time::Duration;

use ironlock::{Access, AcquireOptions, LockManager, Result};

use crate::boundary::{c_string, call, guard, invalid};
use crate::config::ironlock_config;
use crate::error::ironlock_status;
use crate::handles::{arg_out, arg_ref, arg_str, free, into_raw, resources as resource_list};
use crate::lock::ironlock_lock;
use crate::options::ironlock_acquire_opts;
use crate::report;
use crate::runtime::Runtime;

/// A lock manager connected to N Redis nodes. It owns a small runtime (2 worker threads) that
/// runs its connections and the background work of its locks.
///
/// Ownership: create with `ironlock_manager_new`, free with `ironlock_manager_free`. Locks it
/// granted stay usable after the manager is freed (they keep the runtime alive).
/// Thread safety: thread-safe. Any number of threads may call `ironlock_acquire` on one
/// manager at once; only `ironlock_manager_free` needs that no other call on it is running.
pub struct ironlock_manager {
    manager: Option<LockManager>,
    pub(crate) rt: Arc<Runtime>,
}

impl ironlock_manager {
    pub(crate) fn manager(&self) -> &LockManager {
        self.manager.as_ref().expect("the manager lives until drop")
    }
}

impl Drop for ironlock_manager {
    fn drop(&mut self) {
        // The core aborts its background tasks through handles; no Redis traffic.
        self.manager.take();
    }
}

/// Options of one acquire. Zero-initialise for the defaults
/// (`ironlock_acquire_options opts = {0};`), or pass NULL.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ironlock_acquire_options {
    /// Keep retrying until this many milliseconds have passed, however many rounds that takes
    /// (no round starts after the deadline). 0 = no deadline: the manager's retry_count rounds.
    pub wait_ms: u64,
    /// Overrides the manager's retry_count for this call when `has_retry_count` is true.
    pub retry_count: u32,
    /// Use `retry_count` instead of the manager's setting.
    pub has_retry_count: bool,
    /// One round only (try-lock); same as `has_retry_count` with `retry_count` 0.
    pub single_attempt: bool,
    /// Compute a fencing token (read it with `ironlock_lock_fence`).
    pub fencing: bool,
}

impl ironlock_acquire_options {
    fn to_core(self) -> Result<AcquireOptions> {
        if self.single_attempt && self.has_retry_count && self.retry_count != 0 {
            return Err(invalid(
                "opts: single_attempt contradicts a non-zero retry_count",
            ));
        }
        let retry_count = if self.single_attempt {
            Some(0)
        } else {
            self.has_retry_count.then_some(self.retry_count)
        };
        Ok(AcquireOptions {
            wait: (self.wait_ms > 0).then(|| Duration::from_millis(self.wait_ms)),
            retry_count,
            fencing: self.fencing,
            fair: None,
            holder: None,
            min_hold: None,
        })
    }
}

/// Validates `config` (naming the first bad setting or node), starts the runtime and connects
/// to every node at once (each bounded by connect_timeout). A node that is down does not stop
/// the manager from starting; it counts as a failing voter until it reconnects. On success
/// writes the new manager to `*out`; on failure leaves `*out` untouched.
///
/// # Safety
/// `config` is NULL or a live config; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_manager_new(
    config: *const ironlock_config,
    out: *mut *mut ironlock_manager,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let config = unsafe { arg_ref(config, "config") }?.build();
        let out = arg_out(out, "out")?;
        // Reject bad settings before starting a runtime for them.
        config.check()?;
        let rt = Runtime::new()?;
        let manager = rt.block_on(LockManager::new(config))??;
        let handle = into_raw(ironlock_manager {
            manager: Some(manager),
            rt,
        });
        // SAFETY: checked non-NULL above; written only on success.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Frees a manager: stops its background tasks and, once no lock it granted is left, its
/// runtime. Does not release any lock and sends nothing to Redis. NULL is a no-op.
///
/// # Safety
/// `manager` is NULL or came from `ironlock_manager_new`, was not freed before, and no other
/// thread is using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_manager_free(manager: *mut ironlock_manager) {
    // SAFETY: forwarded caller contract.
    guard((), || unsafe { free(manager) })
}

/// Acquires all of `resources` (n_resources NUL-terminated UTF-8 names), or none, for
/// `ttl_ms` milliseconds, retrying as the manager's settings and `opts` (NULL = defaults) say.
/// Blocks the calling thread. Every argument is checked before any Redis traffic. On success
/// writes the new lock to `*out`; on failure leaves it untouched. Either way the per-node
/// report of the last round is readable through `ironlock_last_report_*`.
///
/// Returns IRONLOCK_CONTENDED when the lock is held elsewhere, IRONLOCK_UNAVAILABLE when no
/// quorum answered in time, IRONLOCK_INVALID_ARGUMENT for bad input.
///
/// # Safety
/// `manager` is NULL or a live manager; `resources` is NULL or points to `n_resources`
/// pointers, each NULL or a NUL-terminated string; `opts` is NULL or readable; `out` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire(
    manager: *mut ironlock_manager,
    resources: *const *const c_char,
    n_resources: usize,
    ttl_ms: u64,
    opts: *const ironlock_acquire_options,
    out: *mut *mut ironlock_lock,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        acquire(
            manager,
            resources,
            n_resources,
            ttl_ms,
            out,
            || match opts.as_ref() {
                Some(o) => o.to_core(),
                None => Ok(AcquireOptions::default()),
            },
        )
    }
}

/// `ironlock_acquire` with extensible options (`ironlock_acquire_opts`, NULL = defaults): the
/// form every later per-acquire option is added to. Added after the 0.1.0 ABI.
///
/// # Safety
/// As `ironlock_acquire`; `opts` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_with(
    manager: *mut ironlock_manager,
    resources: *const *const c_char,
    n_resources: usize,
    ttl_ms: u64,
    opts: *const ironlock_acquire_opts,
    out: *mut *mut ironlock_lock,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        acquire(manager, resources, n_resources, ttl_ms, out, || {
            Ok(opts.as_ref().map(|o| o.options.clone()).unwrap_or_default())
        })
    }
}

/// The body of both acquire forms; `options` reads the caller's options (after the other
/// arguments are checked, in the order the 0.1.0 library checked them).
///
/// # Safety
/// As `ironlock_acquire`.
unsafe fn acquire(
    manager: *mut ironlock_manager,
    resources: *const *const c_char,
    n_resources: usize,
    ttl_ms: u64,
    out: *mut *mut ironlock_lock,
    options: impl FnOnce() -> Result<AcquireOptions>,
) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let m = unsafe { arg_ref(manager.cast_const(), "manager") }?;
        let names = unsafe { resource_list(resources, n_resources) }?;
        let options = options()?;
        let out = arg_out(out, "out")?;
        let ttl = Duration::from_millis(ttl_ms);
        let result =
            m.rt.block_on(m.manager().acquire_with(&names, ttl, options))?;
        // SAFETY: `out` checked non-NULL above.
        unsafe { hand_out(m, result, out) }
    })
}

/// Writes a granted lock to `*out` (only on success) and records the report of the last round
/// for `ironlock_last_report_*`.
///
/// # Safety
/// `out` is non-NULL and writable.
unsafe fn hand_out(
    m: &ironlock_manager,
    result: Result<ironlock::Lock>,
    out: *mut *mut ironlock_lock,
) -> Result<()> {
    match result {
        Ok(lock) => {
            report::set(Some(&lock.report()));
            let handle = into_raw(ironlock_lock::new(lock, m.rt.clone()));
            // SAFETY: the caller's contract; written only on success.
            unsafe { out.write(handle) };
            Ok(())
        }
        Err(e) => {
            report::set(e.report());
            Err(e)
        }
    }
}

/// Acquires one of `limit` permits of the counting semaphore `resource` for `ttl_ms`
/// milliseconds, retrying as the manager's settings and `opts` (NULL = defaults) say. A permit
/// is an `ironlock_lock`: extend, release, finish, auto-extension, fencing and the report work as
/// for a lock. It needs floor(limit × N / (limit + 1)) + 1 admitting nodes, more than a majority
/// for a limit of 2 or more. `limit` is 1 to 10000. Blocks the calling thread; writes `*out`
/// only on success. IRONLOCK_CONTENDED when every permit is held, IRONLOCK_UNAVAILABLE when too
/// few nodes could admit it (the message says how many it needs). Added after the 0.1.0 ABI.
///
/// # Safety
/// `manager` is NULL or a live manager; `resource` is NULL or a NUL-terminated string; `opts`
/// is NULL or live; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_permit(
    manager: *mut ironlock_manager,
    resource: *const c_char,
    limit: u32,
    ttl_ms: u64,
    opts: *const ironlock_acquire_opts,
    out: *mut *mut ironlock_lock,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        acquire_one(
            manager,
            resource,
            ttl_ms,
            opts,
            out,
            |m, name, ttl, options| {
                let semaphore = m.manager().semaphore(name, limit);
                m.rt.block_on(semaphore.acquire_with(ttl, options))
            },
        )
    }
}

/// Acquires the read (shared) side of the read-write lock `resource` for `ttl_ms`
/// milliseconds, retrying as the manager's settings and `opts` (NULL = defaults) say. Readers
/// share the lock with one another; a writer (`ironlock_acquire_write`) or a plain lock
/// (`ironlock_acquire`) of the same name excludes them, and so does a writer that is waiting
/// for it, so that writers are never starved by a stream of readers. A read is an
/// `ironlock_lock` granted by the same majority as a lock: extend, release, finish,
/// auto-extension, fencing and the report work as for a lock, and `ironlock_lock_access` gives
/// IRONLOCK_ACCESS_READ. Blocks the calling thread; writes `*out` only on success.
///
/// Returns IRONLOCK_CONTENDED while a writer or a plain lock of the name holds it or a writer
/// waits for it, IRONLOCK_UNAVAILABLE when no quorum answered in time,
/// IRONLOCK_INVALID_ARGUMENT for bad input, naming it: a NULL, empty or non-UTF-8 `resource`,
/// a bad ttl, and a non-zero minimum hold, which read-write locks refuse
/// (`ironlock_acquire_opts_set_min_hold`; the message starts with `min_hold:`). Nothing reaches
/// Redis for bad input. With fair (`ironlock_acquire_opts_set_fair`, or the manager's setting)
/// the reader waits in the lock's line: admitted when no writer or plain lock of the name holds
/// it or waits ahead of it. Added after the 0.1.0 ABI.
///
/// # Safety
/// `manager` is NULL or a live manager; `resource` is NULL or a NUL-terminated string; `opts`
/// is NULL or live; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_read(
    manager: *mut ironlock_manager,
    resource: *const c_char,
    ttl_ms: u64,
    opts: *const ironlock_acquire_opts,
    out: *mut *mut ironlock_lock,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { acquire_rw(manager, resource, Access::Read, ttl_ms, opts, out) }
}

/// Acquires the write (exclusive) side of the read-write lock `resource` for `ttl_ms`
/// milliseconds, retrying as the manager's settings and `opts` (NULL = defaults) say. A writer
/// excludes readers (`ironlock_acquire_read`), other writers and plain locks
/// (`ironlock_acquire`) of the same name, and a plain lock of the name excludes it. While it
/// waits for readers to leave, new readers are refused. A write is an `ironlock_lock` granted
/// by the same majority as a lock: extend, release, finish, auto-extension, fencing and the
/// report work as for a lock, and `ironlock_lock_access` gives IRONLOCK_ACCESS_WRITE. Blocks
/// the calling thread; writes `*out` only on success.
///
/// Returns IRONLOCK_CONTENDED while readers, another writer or a plain lock of the name hold
/// it, IRONLOCK_UNAVAILABLE when no quorum answered in time, IRONLOCK_INVALID_ARGUMENT for bad
/// input as `ironlock_acquire_read` (a non-zero minimum hold is refused the same way). With
/// fair the writer waits in the lock's line: granted when nobody holds it and it heads the
/// line. Added after the 0.1.0 ABI.
///
/// # Safety
/// As `ironlock_acquire_read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_acquire_write(
    manager: *mut ironlock_manager,
    resource: *const c_char,
    ttl_ms: u64,
    opts: *const ironlock_acquire_opts,
    out: *mut *mut ironlock_lock,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { acquire_rw(manager, resource, Access::Write, ttl_ms, opts, out) }
}

/// The body of `ironlock_acquire_read` and `ironlock_acquire_write`: one acquire of that side.
///
/// # Safety
/// As `ironlock_acquire_read`.
unsafe fn acquire_rw(
    manager: *mut ironlock_manager,
    resource: *const c_char,
    access: Access,
    ttl_ms: u64,
    opts: *const ironlock_acquire_opts,
    out: *mut *mut ironlock_lock,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        acquire_one(
            manager,
            resource,
            ttl_ms,
            opts,
            out,
            |m, name, ttl, options| {
                let rw = m.manager().rw_lock(name);
                match access {
                    Access::Read => m.rt.block_on(rw.read_with(ttl, options)),
                    Access::Write => m.rt.block_on(rw.write_with(ttl, options)),
                }
            },
        )
    }
}

/// The body of the acquires of one named resource (a permit, a read, a write): the arguments
/// checked in one order (manager, resource, out), then `acquire` (blocking on the manager's
/// runtime) and its outcome handed out.
///
/// # Safety
/// `manager` is NULL or a live manager; `resource` is NULL or a NUL-terminated string; `opts`
/// is NULL or live; `out` is NULL or writable.
unsafe fn acquire_one(
    manager: *mut ironlock_manager,
    resource: *const c_char,
    ttl_ms: u64,
    opts: *const ironlock_acquire_opts,
    out: *mut *mut ironlock_lock,
    acquire: impl FnOnce(
        &ironlock_manager,
        &str,
        Duration,
        ironlock::AcquireOptions,
    ) -> ironlock::Result<ironlock::Result<ironlock::Lock>>,
) -> ironlock_status {
    call(|| {
        report::set(None);
        // SAFETY: forwarded caller contract.
        let m = unsafe { arg_ref(manager.cast_const(), "manager") }?;
        // SAFETY: forwarded caller contract.
        let name = unsafe { arg_str(resource, "resource") }?;
        // SAFETY: forwarded caller contract.
        let options = unsafe { opts.as_ref() }
            .map(|o| o.options.clone())
            .unwrap_or_default();
        let out = arg_out(out, "out")?;
        let result = acquire(m, name, Duration::from_millis(ttl_ms), options)?;
        // SAFETY: `out` checked non-NULL above.
        unsafe { hand_out(m, result, out) }
    })
}

/// Reads one of the manager's counters by its name — the field names of the stats
/// snapshot in every language: `granted`, `contended`, `unavailable`, `rounds`, `retries`,
/// `wakeups`, `extensions`, `extension_failures`, `releases`, `lost`, `reseats`,
/// `quarantines`, `reconnects`, `votes_for`, `votes_against`, `votes_error`, `votes_timeout`,
/// `votes_not_eligible`. Counts since the manager was created, over all its nodes. Writes the
/// value to `*out`; an unknown name is IRONLOCK_INVALID_ARGUMENT naming `name`.
///
/// Thread safety: any thread, concurrently with any call on the manager.
///
/// # Safety
/// `manager` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `out` is
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_manager_stat(
    manager: *const ironlock_manager,
    name: *const c_char,
    out: *mut u64,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let manager = unsafe { arg_ref(manager, "manager") }?;
        // SAFETY: forwarded caller contract.
        let name = unsafe { arg_str(name, "name") }?;
        let out = arg_out(out, "out")?;
        let value = manager.manager().stats().counter_named("name", name)?;
        // SAFETY: checked non-NULL above.
        unsafe { out.write(value) };
        Ok(())
    })
}

thread_local! {
    static STATS_JSON: RefCell<CString> = RefCell::new(CString::default());
}

/// The manager's whole stats snapshot as one JSON object: every counter of
/// `ironlock_manager_stat` by name, and the latency histograms `acquire_latency` and
/// `round_latency` as `{"buckets": [upper bounds, s], "counts": [per bucket, the last above
/// the last bound], "count": n, "sum_seconds": x}`. NULL for NULL.
///
/// Ownership: owned by the library, valid until the next `ironlock_manager_stats_json` on
/// this thread. Thread safety: any thread; each thread has its own string.
///
/// # Safety
/// `manager` is NULL or a live manager.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_manager_stats_json(
    manager: *const ironlock_manager,
) -> *const c_char {
    guard(std::ptr::null(), || {
        // SAFETY: forwarded caller contract.
        let Some(manager) = (unsafe { manager.as_ref() }) else {
            return std::ptr::null();
        };
        let text = c_string(&manager.manager().stats().to_json());
        STATS_JSON.with(|s| {
            *s.borrow_mut() = text;
            s.borrow().as_ptr()
        })
    })
}
