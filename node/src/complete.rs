//! Settling the Promises of the hot calls (`acquire`, `release`, `extend`) through ONE
//! threadsafe function per manager.
//!
//! napi's `spawn_future` creates a threadsafe function (a libuv async handle) for every Promise
//! and closes it after settling; for a lock+unlock cycle that is two handles opened and closed.
//! Here the JS layer keeps the Promise: it passes a numeric id, the task runs on the addon's
//! runtime (started by `runtime::start`, usually on the JS thread itself), and its outcome is
//! queued to the manager's completion function `complete(id, error, value)`, which Node calls on
//! the JS thread whichever thread finished the task (the JS thread's own drive, or the runtime's
//! thread while JS was busy). Node drains that queue in one go, so completions that finish
//! together (64 acquires in flight) settle together. The function is weak: the JS layer keeps
//! the event loop alive while ids are pending.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use napi::bindgen_prelude::{FnArgs, Function, ToNapiValue, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Result, Status, sys};

use crate::error::panicked;
use crate::lock::NativeLock;
use crate::runtime::start;

/// A successful outcome, converted to a JS value on the JS thread.
pub enum Done {
    /// `acquire`: a `NativeLock` instance.
    Lock(NativeLock),
    /// `release` and `finish`: `[held, deletedOn, reportJson]` (`reportJson` as
    /// `ironlock::Report::to_json`).
    Released {
        held: bool,
        deleted_on: u32,
        report: String,
    },
    /// `extend`: `undefined`.
    Unit,
}

impl ToNapiValue for Done {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        // SAFETY: called by napi on the JS thread with a live `env`, as the trait requires.
        unsafe {
            match val {
                Done::Lock(lock) => NativeLock::to_napi_value(env, lock),
                Done::Released {
                    held,
                    deleted_on,
                    report,
                } => <(bool, u32, String)>::to_napi_value(env, (held, deleted_on, report)),
                Done::Unit => <()>::to_napi_value(env, ()),
            }
        }
    }
}

/// One settled call: its id and either the value or the encoded error envelope.
pub struct Completion {
    id: u32,
    result: std::result::Result<Done, String>,
}

/// The JS arguments of `complete(id, error, value)`.
pub type CompleteArgs = FnArgs<(u32, Option<String>, Option<Done>)>;

type Tsfn = ThreadsafeFunction<Completion, Unknown<'static>, CompleteArgs, Status, false, true>;

/// The manager's completion function, shared by its locks.
#[derive(Clone)]
pub struct Completer(Arc<Tsfn>);

impl Completer {
    /// Wraps the JS function `complete(id, error, value)`.
    pub fn new(complete: &Function<'_, CompleteArgs, Unknown<'static>>) -> Result<Self> {
        let tsfn = complete
            .build_threadsafe_function::<Completion>()
            .callee_handled::<false>()
            .weak::<true>()
            .build_callback(|ctx| {
                let Completion { id, result } = ctx.value;
                Ok(match result {
                    Ok(done) => (id, None, Some(done)),
                    Err(envelope) => (id, Some(envelope), None),
                }
                .into())
            })?;
        Ok(Completer(Arc::new(tsfn)))
    }

    /// Runs `fut` on the addon's runtime (see `runtime::start`) and settles JS id `id` with its
    /// outcome. A panic in `fut` settles it with the core's INTERNAL error instead of leaving the
    /// Promise pending.
    pub fn run<F>(&self, id: u32, fut: F)
    where
        F: Future<Output = Result<Done>> + Send + 'static,
    {
        let tsfn = Arc::clone(&self.0);
        start(async move {
            let result = match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(Ok(done)) => Ok(done),
                Ok(Err(e)) => Err(e.reason.clone()),
                Err(p) => Err(panicked(&*p).reason.clone()),
            };
            // Fails only while the JS environment shuts down; nobody is left to settle then.
            let _ = tsfn.call(
                Completion { id, result },
                ThreadsafeFunctionCallMode::NonBlocking,
            );
        });
    }
}
