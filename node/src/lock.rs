//! `NativeLock`: a granted core `Lock` as a JS class, its per-node report, and the hooks the JS
//! layer uses for `using` (auto-extension and the lost-lock signal).

use std::sync::{Arc, Mutex};

use ironlock::{KeepAlive, Lock};
use napi::bindgen_prelude::{BigInt, Object};
use napi::{Env, Result};
use napi_derive::napi;

use crate::complete::{Completer, Done};
use crate::error::{boundary, in_node_words, to_napi};
use crate::runtime::EnvScope;
use crate::settings::millis;

/// A lock granted by a quorum. Dropping it does not release it.
#[napi]
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

#[napi]
impl NativeLock {
    /// The resource names, as given.
    #[napi(getter)]
    pub fn resources(&self) -> Vec<String> {
        self.lock.resources().to_vec()
    }

    /// The random token stored as the value of every key.
    #[napi(getter)]
    pub fn value(&self) -> String {
        self.lock.token().to_owned()
    }

    /// The fencing token, when acquired with `fencing: true`.
    #[napi(getter)]
    pub fn fence(&self) -> Option<BigInt> {
        self.lock.fence().map(BigInt::from)
    }

    /// For a read-write lock: `"read"` or `"write"`; `null` for a lock or a permit.
    #[napi(getter, ts_return_type = "'read' | 'write' | null")]
    pub fn access(&self) -> Option<&'static str> {
        self.lock.access().map(ironlock::Access::as_str)
    }

    /// End of validity as epoch milliseconds (display only; validity is monotonic).
    #[napi(getter)]
    pub fn expiration(&self) -> f64 {
        self.lock.expiration_unix_ms() as f64
    }

    /// Remaining validity in whole milliseconds; 0 once lost, released or expired.
    #[napi(getter)]
    pub fn validity_ms(&self) -> f64 {
        self.lock.validity().as_millis() as f64
    }

    /// True while neither lost nor released and validity remains.
    #[napi]
    pub fn is_valid(&self) -> bool {
        self.lock.is_valid()
    }

    /// True once the lock is known lost.
    #[napi]
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// The per-node report of the last operation on this lock, as the core's JSON
    /// (`{"elapsed_ms", "rounds", "nodes": [{url, vote, error}]}`, parsed by the JS layer when
    /// `lock.report` is read).
    #[napi(getter)]
    pub fn report_json(&self) -> String {
        self.lock.report().to_json()
    }

    /// Extends every key to `ttl_ms` from now on a quorum; settles `id` with `undefined`.
    /// Throws at once for an invalid `ttl_ms`.
    #[napi(catch_unwind)]
    pub fn extend(&self, id: u32, ttl_ms: f64) -> Result<()> {
        boundary(|| {
            let ttl = millis("durationMs", ttl_ms)?;
            let lock = self.lock.clone();
            self.completer.run(id, async move {
                lock.extend(ttl)
                    .await
                    .map_err(|e| to_napi(in_node_words(e, "durationMs")))?;
                Ok(Done::Unit)
            });
            Ok(())
        })
    }

    /// Deletes the keys that still hold this lock's token and settles `id` with
    /// `deletedOn * 2 + held` and the report JSON; never fails for a lost lock.
    #[napi(catch_unwind)]
    pub fn release(&self, id: u32) -> Result<()> {
        boundary(|| {
            self.keeper().take();
            let lock = self.lock.clone();
            self.completer
                .run(id, async move { Ok(Self::released(lock.release().await)) });
            Ok(())
        })
    }

    /// Ends a critical section with the core's loss rule (`Lock::finish`): releases, then
    /// settles `id` as `release` does when the lock was held to the end, or with LOST (carrying
    /// the release's report) when it was lost, ran out of validity, or the release found its
    /// token on fewer than a quorum.
    #[napi(catch_unwind)]
    pub fn finish(&self, id: u32) -> Result<()> {
        boundary(|| {
            self.keeper().take();
            let lock = self.lock.clone();
            self.completer.run(id, async move {
                let r = lock.finish().await.map_err(to_napi)?;
                Ok(Self::released(r))
            });
            Ok(())
        })
    }

    /// Starts the core's auto-extension (stopped by `stopKeepAlive`, `release`, loss, or when
    /// this object is finalized, at the latest when its environment exits). On loss the core
    /// releases the lock itself.
    #[napi(catch_unwind)]
    pub fn keep_alive(&self) -> Result<()> {
        boundary(|| {
            *self.keeper() = Some(self.lock.keep_alive());
            Ok(())
        })
    }

    /// Stops auto-extension.
    #[napi]
    pub fn stop_keep_alive(&self) {
        if let Some(k) = self.keeper().take() {
            k.stop();
        }
    }

    /// Resolves with `true` when the lock is lost (`reportJson` then says why), or with `false`
    /// once it was released. Stops waiting when the environment exits.
    #[napi(ts_return_type = "Promise<boolean>", catch_unwind)]
    pub fn wait_lost<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        boundary(|| {
            let lock = self.lock.clone();
            self.scope.promise(env, async move {
                lock.lost().await;
                Ok(lock.is_lost())
            })
        })
    }
}
