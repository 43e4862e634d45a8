//! One runtime per manager, driven by the thread that calls ([`ironlock::driven`]). Redis
//! connections and background tasks belong to the runtime that created them, so locks keep a
//! handle to their manager's runtime.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ironlock::driven::DrivenRuntime;
use ironlock::{Error, ErrorKind, Result};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// A manager's runtime: the calling thread drives it during a blocking call, a thread of its
/// own between calls.
pub(crate) struct Runtime(DrivenRuntime);

unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

/// At process exit: requests that returned calls stopped waiting for (a release returns once a
/// quorum deleted the keys) get up to a second to reach their nodes, for programs that exit
/// without freeing their handles.
extern "C" fn drain_at_exit() {
    let _ = std::panic::catch_unwind(|| ironlock::drain_blocking(Duration::from_secs(1)));
}

impl Runtime {
    pub(crate) fn new() -> Result<Arc<Runtime>> {
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: `drain_at_exit` is a plain function of this library that never unwinds.
        AT_EXIT.call_once(|| unsafe {
            atexit(drain_at_exit);
        });
        Ok(Arc::new(Runtime(DrivenRuntime::new("ironlock", 2)?)))
    }

    /// Fails when called on a runtime thread (from an ironlock callback): blocking there would
    /// deadlock or panic.
    pub(crate) fn check_blocking(&self) -> Result<()> {
        if Handle::try_current().is_ok() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "blocking ironlock calls are not allowed on an ironlock runtime thread \
                 (inside an on_lost callback)",
            ));
        }
        Ok(())
    }

    /// Runs `future` to completion on this runtime, blocking the calling (C) thread, which
    /// drives the runtime meanwhile.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        self.check_blocking()?;
        Ok(self.0.block_on(future))
    }

    pub(crate) fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.0.handle().spawn(future)
    }
}
