//! Node-API bindings for the ironlock Redlock core (npm package `ironlock`).
//!
//! This crate only converts: JS values in, one core call, JS values (or a rejected Promise) out.
//! Every call that talks to Redis returns a Promise settled from napi's tokio runtime — the one
//! runtime of the addon, which also runs the core's background tasks (reconnection, release
//! notifications, auto-extension). The thin JS layer in `lib/` adds what napi cannot express:
//! error subclasses, `AbortSignal` wiring and `Symbol.asyncDispose`.

#![deny(clippy::all)]

mod error;
mod lock;
mod manager;
mod settings;

pub use lock::{NativeLock, NodeReportObject, ReleaseResult};
pub use manager::{CancelToken, NativeManager};
pub use settings::{AcquireOptions, Settings};

/// The version of the ironlock core this module was built from.
#[napi_derive::napi]
pub fn core_version() -> String {
    ironlock::VERSION.to_owned()
}
