//! Node-API bindings for the ironlock Redlock core (npm package `ironlock`).
//!
//! This crate only converts: JS values in, one core call, JS values (or an error) out. Every call
//! that talks to Redis runs on the addon's tokio runtime (process-wide, driven from the JS
//! threads' event loops and a thread of its own, see `runtime.rs` and `uv.rs`), which also runs
//! the core's background tasks (reconnection, release notifications, auto-extension). The addon
//! can be loaded by any number of environments (the main thread and worker threads),
//! concurrently or one after another.
//! `acquire`, `release` and `extend` (and an election's `campaign`, `proclaim` and `resign`)
//! settle through the manager's completion function
//! (`complete.rs`); the rarer calls return napi Promises. The thin JS layer in `lib/` owns the
//! Promises of the hot calls and adds what napi cannot express: error subclasses, `AbortSignal`
//! wiring and `Symbol.asyncDispose`.

#![deny(clippy::all)]

mod complete;
mod election;
mod error;
mod lock;
mod manager;
mod nodes;
mod runtime;
mod settings;
mod uv;

pub use election::{LeaderChange, NativeElection, NativeLeader, NativeLeadership, NativeObserver};
pub use lock::{
    NativeLock, lock_access, lock_expiration, lock_extend, lock_fence, lock_finish, lock_is_lost,
    lock_is_valid, lock_keep_alive, lock_release, lock_report_json, lock_resources,
    lock_stop_keep_alive, lock_validity_ms, lock_value, lock_wait_lost,
};

pub use manager::{CancelToken, NativeManager, NodeHolder, NodePermit};
pub use nodes::{NodeParts, node_url, nodes_from_env, split_node_list};
pub use settings::AcquireOptions;

/// Resolves once the requests that decided rounds stopped waiting for (the last deletes of a
/// release that returned at a quorum) have been answered or timed out, or after `limit_ms`;
/// `true` when none is left. The JS layer awaits it before the process exits. The core's wait
/// sleeps until the last request ends: nothing polls.
#[napi_derive::napi(ts_return_type = "Promise<boolean>", catch_unwind)]
pub fn drain<'env>(
    env: &'env napi::Env,
    limit_ms: f64,
) -> napi::Result<napi::bindgen_prelude::Object<'env>> {
    error::boundary(|| {
        let limit = settings::millis("limitMs", limit_ms)?;
        runtime::EnvScope::of(env)?.promise(env, async move { Ok(ironlock::drain(limit).await) })
    })
}

/// Settles the calls that finished while a JS call of this environment was starting (see
/// `uv::collecting`): the JS layer calls it in a microtask when a hot call returned `true`.
#[napi_derive::napi]
pub fn settle_stashed(env: &napi::Env) -> napi::Result<()> {
    uv::settle_stashed(env)
}

/// Deliberately panics inside the panic boundary (on the JS thread, or in a task on the
/// addon's runtime when `in_task`) and throws or rejects with what the boundary made of it:
/// always INTERNAL, with the core's panic message. Lets tests verify that a Rust panic never
/// reaches Node as a crash (as `ironlock_debug_panic` does for C).
#[napi_derive::napi(ts_return_type = "Promise<void>")]
pub fn debug_panic<'env>(
    env: &'env napi::Env,
    in_task: bool,
) -> napi::Result<napi::bindgen_prelude::Object<'env>> {
    error::boundary(|| {
        if !in_task {
            panic!("debugPanic was called");
        }
        runtime::EnvScope::of(env)?.promise(env, async move {
            if in_task {
                panic!("debugPanic was called (in a task)");
            }
            Ok(())
        })
    })
}

/// Q = floor(N / 2) + 1: the quorum of `n` nodes, as the core computes it.
#[napi_derive::napi]
pub fn quorum(n: u32) -> u32 {
    u32::try_from(ironlock::quorum(n as usize)).unwrap_or(u32::MAX)
}

/// The version of the ironlock core this module was built from.
#[napi_derive::napi]
pub fn core_version() -> String {
    ironlock::VERSION.to_owned()
}

/// The name among `known` that the unknown option name `given` most likely meant (the core's
/// `suggest`: another library's name for it, another case, or a typing slip), else null.
#[napi_derive::napi]
pub fn suggest_name(given: String, known: Vec<String>) -> Option<String> {
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    ironlock::suggest(&given, &known).map(str::to_owned)
}

/// Every manager setting as `[name, kind]`, from the core's table (plus the TLS settings, kind
/// `pem`): the JS layer builds its type checks from it, so no setting is listed twice. Kinds:
/// `count`, `optionalCount`, `duration`, `optionalDuration`, `fraction`, `flag`, `text`, `pem`.
#[napi_derive::napi]
pub fn setting_kinds() -> Vec<Vec<String>> {
    use ironlock::SettingKind;
    ironlock::SETTINGS
        .iter()
        .map(|s| {
            let kind = match s.kind {
                SettingKind::Count => "count",
                SettingKind::OptionalCount => "optionalCount",
                SettingKind::Duration => "duration",
                SettingKind::OptionalDuration => "optionalDuration",
                SettingKind::Fraction => "fraction",
                SettingKind::Flag => "flag",
                SettingKind::Text => "text",
            };
            vec![s.camel_name(), kind.to_owned()]
        })
        .chain(ironlock::TLS_SETTINGS.iter().map(|name| {
            // Certificates and keys are PEM (text or bytes); the server name is text.
            let kind = if *name == "tls_server_name" {
                "text"
            } else {
                "pem"
            };
            vec![ironlock::camel_case(name), kind.to_owned()]
        }))
        .collect()
}
