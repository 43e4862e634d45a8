//! `NativeLock`: a granted core `Lock`, handed to JS as an external value, with the functions
//! the JS `Lock` calls on it (`lockRelease(lock, id)`, `lockValue(lock)`, …): its per-node
//! report, and the hooks the JS layer uses for `using` (auto-extension and the lost-lock signal).
//!
//! An external rather than a class instance: every acquire creates one, and an instance costs a
//! call of the class's constructor from native code, a wrap and a type tag (5 % of the JS
//! thread in bench (a), N = 3), an external one object with a finalizer.

use std::sync::{Arc, Mutex};

use ironlock::{KeepAlive, Lock};
use napi::bindgen_prelude::{BigInt, External, Object};
use napi::{Env, Result};
use napi_derive::napi;

use crate::complete::{Completer, Done};
use crate::error::{boundary, in_node_words, to_napi};
use crate::runtime::EnvScope;
use crate::settings::millis;

/// A lock granted by a quorum (in JS: an external value, `ExternalObject<NativeLock>`). Dropping
/// it does not release it.
pub struct NativeLock {
    lock: Lock,
    keeper: Mutex<Option<KeepAlive>>,
    completer: Completer,
    scope: Arc<EnvScope>,
}

impl NativeLock {
    pub(crate) fn new(lock: Lock, completer: Completer, scope: Arc<EnvScope>) -> Self {
        NativeLock {
            lock,
            keeper: Mutex::new(None),
            completer,
            scope,
        }
    }

    fn keeper(&self) -> std::sync::MutexGuard<'_, Option<KeepAlive>> {
        self.keeper.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The outcome of a release: `deletedOn * 2 + held` and the report JSON (`complete.rs`).
    pub(crate) fn released(r: ironlock::Released) -> Done {
        Done::Released {
            held: r.held,
            deleted_on: u32::try_from(r.deleted_on).unwrap_or(u32::MAX),
            report: r.report.to_json(),
        }
    }
}

/// The resource names, as given.
#[napi(ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_resources(lock: &External<NativeLock>) -> Vec<String> {
    lock.lock.resources().to_vec()
}

/// The random token stored as the value of every key.
#[napi(ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_value(lock: &External<NativeLock>) -> String {
    lock.lock.token().to_owned()
}

/// The fencing token, when acquired with `fencing: true`.
#[napi(ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_fence(lock: &External<NativeLock>) -> Option<BigInt> {
    lock.lock.fence().map(BigInt::from)
}

/// For a read-write lock: `"read"` or `"write"`; `null` for a lock or a permit.
#[napi(
    ts_return_type = "'read' | 'write' | null",
    ts_args_type = "lock: ExternalObject<'NativeLock'>"
)]
pub fn lock_access(lock: &External<NativeLock>) -> Option<&'static str> {
    lock.lock.access().map(ironlock::Access::as_str)
}

/// End of validity as epoch milliseconds (display only; validity is monotonic).
#[napi(ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_expiration(lock: &External<NativeLock>) -> f64 {
    lock.lock.expiration_unix_ms() as f64
}

/// Remaining validity in whole milliseconds; 0 once lost, released or expired.
#[napi(ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_validity_ms(lock: &External<NativeLock>) -> f64 {
    lock.lock.validity().as_millis() as f64
}

/// True while neither lost nor released and validity remains.
#[napi(ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_is_valid(lock: &External<NativeLock>) -> bool {
    lock.lock.is_valid()
}

/// True once the lock is known lost.
#[napi(ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_is_lost(lock: &External<NativeLock>) -> bool {
    lock.lock.is_lost()
}

/// The per-node report of the last operation on this lock, as the core's JSON
/// (`{"elapsed_ms", "rounds", "nodes": [{url, vote, error}]}`, parsed by the JS layer when
/// `lock.report` is read).
#[napi(ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_report_json(lock: &External<NativeLock>) -> String {
    lock.lock.report().to_json()
}

/// Extends every key to `ttl_ms` from now on a quorum; settles `id` with `undefined`.
/// Throws at once for an invalid `ttl_ms`. Returns whether calls are waiting for
/// `settleStashed` (`Completer::run`).
#[napi(
    catch_unwind,
    ts_args_type = "lock: ExternalObject<'NativeLock'>, id: number, ttlMs: number"
)]
pub fn lock_extend(lock: &External<NativeLock>, id: u32, ttl_ms: f64) -> Result<bool> {
    boundary(|| {
        let ttl = millis("durationMs", ttl_ms)?;
        let core = lock.lock.clone();
        Ok(lock.completer.run(id, async move {
            core.extend(ttl)
                .await
                .map_err(|e| to_napi(in_node_words(e, "durationMs")))?;
            Ok(Done::Unit)
        }))
    })
}

/// Deletes the keys that still hold this lock's token and settles `id` with
/// `deletedOn * 2 + held` and the report JSON; never fails for a lost lock. Returns as
/// `lockExtend` does.
#[napi(
    catch_unwind,
    ts_args_type = "lock: ExternalObject<'NativeLock'>, id: number"
)]
pub fn lock_release(lock: &External<NativeLock>, id: u32) -> Result<bool> {
    boundary(|| {
        lock.keeper().take();
        let core = lock.lock.clone();
        Ok(lock.completer.run(
            id,
            async move { Ok(NativeLock::released(core.release().await)) },
        ))
    })
}

/// Ends a critical section with the core's loss rule (`Lock::finish`): releases, then
/// settles `id` as `lockRelease` does when the lock was held to the end, or with LOST (carrying
/// the release's report) when it was lost, ran out of validity, or the release found its
/// token on fewer than a quorum. Returns as `lockExtend` does.
#[napi(
    catch_unwind,
    ts_args_type = "lock: ExternalObject<'NativeLock'>, id: number"
)]
pub fn lock_finish(lock: &External<NativeLock>, id: u32) -> Result<bool> {
    boundary(|| {
        lock.keeper().take();
        let core = lock.lock.clone();
        Ok(lock.completer.run(id, async move {
            let r = core.finish().await.map_err(to_napi)?;
            Ok(NativeLock::released(r))
        }))
    })
}

/// Starts the core's auto-extension (stopped by `lockStopKeepAlive`, a release, loss, or when
/// the lock is finalized, at the latest when its environment exits). On loss the core
/// releases the lock itself.
#[napi(catch_unwind, ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_keep_alive(lock: &External<NativeLock>) -> Result<()> {
    boundary(|| {
        *lock.keeper() = Some(lock.lock.keep_alive());
        Ok(())
    })
}

/// Stops auto-extension.
#[napi(ts_args_type = "lock: ExternalObject<'NativeLock'>")]
pub fn lock_stop_keep_alive(lock: &External<NativeLock>) {
    if let Some(k) = lock.keeper().take() {
        k.stop();
    }
}

/// Resolves with `true` when the lock is lost (`lockReportJson` then says why), or with
/// `false` once it was released. Stops waiting when the environment exits.
#[napi(
    ts_return_type = "Promise<boolean>",
    catch_unwind,
    ts_args_type = "lock: ExternalObject<'NativeLock'>"
)]
pub fn lock_wait_lost<'env>(env: &'env Env, lock: &External<NativeLock>) -> Result<Object<'env>> {
    boundary(|| {
        let core = lock.lock.clone();
        lock.scope.promise(env, async move {
            core.lost().await;
            Ok(core.is_lost())
        })
    })
}
