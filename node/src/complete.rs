//! Settling the Promises of the hot calls (`acquire`, `release`, `extend`, and an election's
//! `campaign`, `proclaim` and `resign`) through ONE threadsafe function per manager.
//!
//! napi's `spawn_future` creates a threadsafe function (a libuv async handle) for every Promise
//! and closes it after settling; for a lock+unlock cycle that is two handles opened and closed.
//! Here the JS layer keeps the Promise: it passes a numeric id, the task runs on the addon's
//! runtime (started by `runtime::start`, usually on the JS thread itself), and its outcome goes
//! to the JS function `complete(id, error, value, report)` on the JS thread. When the task finished in a
//! drive that the environment's own event loop ran (`uv.rs`: the usual case, a reply read on the
//! JS thread), the poll callback calls `complete` directly as it returns, for every call that
//! finished in that drive, in one callback scope. When it finished in the drive that a JS call
//! started (its own or a later call's: the replies came in while that call wrote its requests),
//! the call returns `true` and the JS layer settles it in a microtask (`uv::collecting`,
//! `settleStashed`). Otherwise (the runtime's thread finished it while JS was busy, or another
//! environment's loop did) the outcome is queued to the manager's threadsafe function, which
//! Node drains in one go on the JS thread. The function is weak: the JS layer keeps the event
//! loop alive while ids are pending.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use napi::bindgen_prelude::{External, FnArgs, Function, Null, ToNapiValue, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Result, Status, sys};

use crate::election::NativeLeadership;
use crate::error::{panicked, to_napi};
use crate::lock::NativeLock;
use crate::runtime::start;

/// A successful outcome, converted to a JS value on the JS thread.
pub enum Done {
    /// `acquire`: a `NativeLock`, as an external value.
    Lock(NativeLock),
    /// `release` and `finish`: `deletedOn * 2 + held` as the value (a number: no array to
    /// build), and `reportJson` (`ironlock::Report::to_json`) as `complete`'s fourth argument.
    Released {
        held: bool,
        deleted_on: u32,
        report: String,
    },
    /// `extend` and `proclaim`: `undefined`.
    Unit,
    /// `campaign`: a `NativeLeadership` instance.
    Leadership(NativeLeadership),
}

impl Done {
    /// The value passed to `complete`, and its fourth argument (a release's report JSON).
    fn split(self) -> (Value, Option<String>) {
        match self {
            Done::Lock(lock) => (Value::Lock(lock), None),
            Done::Released {
                held,
                deleted_on,
                report,
            } => (
                Value::Number(f64::from(deleted_on) * 2.0 + f64::from(u8::from(held))),
                Some(report),
            ),
            Done::Unit => (Value::Unit, None),
            Done::Leadership(l) => (Value::Leadership(l), None),
        }
    }
}

/// `complete`'s third argument.
pub enum Value {
    Lock(NativeLock),
    Leadership(NativeLeadership),
    Number(f64),
    Unit,
}

impl ToNapiValue for Value {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        // SAFETY: called by napi on the JS thread with a live `env`, as the trait requires.
        unsafe {
            match val {
                Value::Lock(lock) => External::to_napi_value(env, External::new(lock)),
                Value::Leadership(l) => NativeLeadership::to_napi_value(env, l),
                Value::Number(n) => f64::to_napi_value(env, n),
                Value::Unit => <()>::to_napi_value(env, ()),
            }
        }
    }
}

/// One settled call: its id and either the value or the encoded error envelope.
pub struct Completion {
    id: u32,
    result: std::result::Result<Done, String>,
}

impl Completion {
    /// The JS arguments `(id, error, value, report)` of `complete` (`error` null or `value`
    /// undefined; `report` a release's report JSON, else undefined).
    ///
    /// # Safety
    /// On `env`'s JS thread, inside a handle scope.
    /// A value that cannot be converted settles the call with the core's INTERNAL error
    /// instead, so that its Promise does not stay pending.
    pub unsafe fn into_args(self, env: sys::napi_env) -> Result<[sys::napi_value; 4]> {
        let Completion { id, result } = self;
        // SAFETY: the caller's contract.
        unsafe {
            let id = u32::to_napi_value(env, id)?;
            let undefined = <()>::to_napi_value(env, ())?;
            let failed = |envelope: String| -> Result<[sys::napi_value; 4]> {
                Ok([
                    id,
                    String::to_napi_value(env, envelope)?,
                    undefined,
                    undefined,
                ])
            };
            match result {
                Ok(done) => {
                    let (value, report) = done.split();
                    let converted = Value::to_napi_value(env, value).and_then(|value| {
                        let report = match report {
                            Some(r) => String::to_napi_value(env, r)?,
                            None => undefined,
                        };
                        Ok((value, report))
                    });
                    match converted {
                        Ok((value, report)) => {
                            Ok([id, Null::to_napi_value(env, Null)?, value, report])
                        }
                        Err(e) => failed(
                            to_napi(ironlock::Error::new(
                                ironlock::ErrorKind::Internal,
                                format!("the call's result could not be converted: {}", e.status),
                            ))
                            .reason,
                        ),
                    }
                }
                Err(envelope) => failed(envelope),
            }
        }
    }
}

/// The JS arguments of `complete(id, error, value, report)`.
pub type CompleteArgs = FnArgs<(u32, Option<String>, Option<Value>, Option<String>)>;

type Tsfn = ThreadsafeFunction<Completion, Unknown<'static>, CompleteArgs, Status, false, true>;

/// A call finished in a drive of its environment's event loop, waiting for the poll callback
/// to settle it (`uv::settle_here`): the index of its manager's `complete` there, and the
/// manager's threadsafe function should that fail.
pub struct Finished {
    pub complete: u32,
    pub done: Completion,
    tsfn: Arc<Tsfn>,
}

impl Finished {
    /// Settles through the manager's threadsafe function instead.
    pub fn fall_back(self) {
        // Fails only while the environment shuts down: nobody is left to settle then.
        let _ = self
            .tsfn
            .call(self.done, ThreadsafeFunctionCallMode::NonBlocking);
    }
}

/// The manager's completion function, shared by its locks, its environment (by address) and
/// the function's index for settling from that environment's event loop (`None`: never).
#[derive(Clone)]
pub struct Completer {
    tsfn: Arc<Tsfn>,
    env: usize,
    complete: Option<u32>,
}

impl Completer {
    /// Wraps the JS function `complete(id, error, value, report)` of `env`.
    pub fn new(env: &Env, complete: &Function<'_, CompleteArgs, Unknown<'static>>) -> Result<Self> {
        let index = crate::uv::register_complete(env, complete)?;
        let tsfn = complete
            .build_threadsafe_function::<Completion>()
            .callee_handled::<false>()
            .weak::<true>()
            .build_callback(|ctx| {
                let Completion { id, result } = ctx.value;
                Ok(match result {
                    Ok(done) => {
                        let (value, report) = done.split();
                        (id, None, Some(value), report)
                    }
                    Err(envelope) => (id, Some(envelope), None, None),
                }
                .into())
            })?;
        Ok(Completer {
            tsfn: Arc::new(tsfn),
            env: env.raw() as usize,
            complete: index,
        })
    }

    /// Runs `fut` on the addon's runtime (see `runtime::start`) and settles JS id `id` with its
    /// outcome. A panic in `fut` settles it with the core's INTERNAL error instead of leaving the
    /// Promise pending. Returns true when calls finished while this one started (on the JS
    /// thread, in the drive that wrote its requests): they wait for `settleStashed`, which the
    /// JS layer calls in a microtask (`uv::collecting`).
    pub fn run<F>(&self, id: u32, fut: F) -> bool
    where
        F: Future<Output = Result<Done>> + Send + 'static,
    {
        // Boxed first: a call's future (the whole acquire, say) is large, and each wrapper
        // below and the task that runs it would otherwise copy it again (memmove was 4.5 % of
        // the Node driver's samples in bench (a)).
        let fut = Box::pin(fut);
        let tsfn = Arc::clone(&self.tsfn);
        let (env, complete) = (self.env, self.complete);
        let call = async move {
            let result = match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(Ok(done)) => Ok(done),
                Ok(Err(e)) => Err(e.reason.clone()),
                Err(p) => Err(panicked(&*p).reason.clone()),
            };
            // Settled by the event loop's poll callback that is driving, when it is this
            // environment's (`uv::settle_here`); otherwise through the threadsafe function.
            let done = Completion { id, result };
            match complete {
                Some(complete) => {
                    let finished = Finished {
                        complete,
                        done,
                        tsfn,
                    };
                    if let Err(finished) = crate::uv::settle_here(env, finished) {
                        finished.fall_back();
                    }
                }
                None => Finished {
                    complete: 0,
                    done,
                    tsfn,
                }
                .fall_back(),
            }
        };
        if complete.is_none() {
            start(call);
            return false;
        }
        crate::uv::collecting(env, || start(call))
    }
}
