//! Node-API bindings for the ironlock Redlock core (npm package `ironlock`).
//!
//! This crate only converts: JS values in, one core call, JS values (or an error) out. Every call
//! that talks to Redis runs on the addon's tokio runtime (one worker thread, see `init`), which
//! also runs the core's background tasks (reconnection, release notifications, auto-extension).
//! `acquire`, `release` and `extend` settle through the manager's completion function
//! (`complete.rs`); the rarer calls return napi Promises. The thin JS layer in `lib/` owns the
//! Promises of the hot calls and adds what napi cannot express: error subclasses, `AbortSignal`
//! wiring and `Symbol.asyncDispose`.

#![deny(clippy::all)]

mod complete;
mod error;
mod lock;
mod manager;
mod settings;

pub use lock::NativeLock;

pub use manager::{CancelToken, NativeManager};
pub use settings::{AcquireOptions, Settings};

/// Gives the addon its own Tokio runtime with ONE worker thread, registered before napi's
/// default (one worker per core) is built. Every Promise-returning call crosses from the JS
/// thread to a worker and back; with one worker the Redis connection tasks, the request and the
/// completion all run on the same thread, so a round costs two cross-thread wake-ups instead of
/// up to four, and workers no longer steal work from each other (measured in bench/RESULTS.md).
/// If the runtime cannot be built, napi's default runtime is used.
#[napi_derive::module_init]
fn init() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("ironlock-rt")
        .enable_all()
        .build();
    if let Ok(rt) = rt {
        napi::bindgen_prelude::create_custom_tokio_runtime(rt);
    }
}

/// Resolves once the requests that decided rounds stopped waiting for (the last deletes of a
/// release that returned at a quorum) have been answered or timed out, or after `limit_ms`;
/// `true` when none is left. The JS layer awaits it before the process exits.
#[napi_derive::napi(ts_return_type = "Promise<boolean>", catch_unwind)]
pub fn drain<'env>(
    env: &'env napi::Env,
    limit_ms: f64,
) -> napi::Result<napi::bindgen_prelude::PromiseRaw<'env, bool>> {
    let limit = settings::millis("limitMs", limit_ms)?;
    env.spawn_future(async move {
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
