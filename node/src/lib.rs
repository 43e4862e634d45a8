//! Node-API bindings for the ironlock Redlock core (npm package `ironlock`).
//!
//! This crate only converts: JS values in, one core call, JS values (or an error) out. Every call
//! that talks to Redis runs on the addon's tokio runtime (one worker thread, process-wide, see
//! `runtime.rs`), which also runs the core's background tasks (reconnection, release
//! notifications, auto-extension). The addon can be loaded by any number of environments (the
//! main thread and worker threads), concurrently or one after another.
//! `acquire`, `release` and `extend` settle through the manager's completion function
//! (`complete.rs`); the rarer calls return napi Promises. The thin JS layer in `lib/` owns the
//! Promises of the hot calls and adds what napi cannot express: error subclasses, `AbortSignal`
//! wiring and `Symbol.asyncDispose`.

#![deny(clippy::all)]

mod complete;
mod error;
mod lock;
mod manager;
mod runtime;
mod settings;

pub use lock::NativeLock;

pub use manager::{CancelToken, NativeManager};
pub use settings::{AcquireOptions, Settings};

/// Resolves once the requests that decided rounds stopped waiting for (the last deletes of a
/// release that returned at a quorum) have been answered or timed out, or after `limit_ms`;
/// `true` when none is left. The JS layer awaits it before the process exits.
#[napi_derive::napi(ts_return_type = "Promise<boolean>", catch_unwind)]
pub fn drain<'env>(
    env: &'env napi::Env,
    limit_ms: f64,
) -> napi::Result<napi::bindgen_prelude::Object<'env>> {
    let limit = settings::millis("limitMs", limit_ms)?;
    runtime::EnvScope::of(env)?.promise(env, async move {
        let until = tokio::time::Instant::now() + limit;
        // `drain_blocking(ZERO)` only checks; the 1 ms sleeps keep the runtime thread free.
        while !ironlock::drain_blocking(std::time::Duration::ZERO) {
            if tokio::time::Instant::now() >= until {
                return Ok(false);
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Ok(true)
    })
}

/// The version of the ironlock core this module was built from.
#[napi_derive::napi]
pub fn core_version() -> String {
    ironlock::VERSION.to_owned()
}
