//! One small tokio runtime per manager. Redis connections and background tasks belong to the
//! runtime that created them, so locks keep a handle to their manager's runtime.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ironlock::{Error, ErrorKind, Result};
use tokio::runtime::{Builder, Handle};
use tokio::task::JoinHandle;

/// A runtime that shuts down without blocking a runtime thread when the last handle goes.
pub(crate) struct Runtime(Option<tokio::runtime::Runtime>);

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
        let rt = Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(2)
            .thread_name("ironlock")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("cannot start the runtime: {e}"),
                )
            })?;
        Ok(Arc::new(Runtime(Some(rt))))
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("the runtime lives until drop")
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

    /// Runs `future` to completion on this runtime, blocking the calling (C) thread.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        self.check_blocking()?;
        Ok(self.rt().block_on(future))
    }

    pub(crate) fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt().spawn(future)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            if Handle::try_current().is_ok() {
                // Last handle dropped on a runtime thread (a callback freed it): cannot join.
                rt.shutdown_background();
            } else {
                // Requests that returned calls stopped waiting for (a release returns once a
                // quorum deleted the keys) are already sent; let them finish, then join the
                // worker threads so nothing of ours outlives the free call.
                ironlock::drain_blocking(Duration::from_secs(1));
                rt.shutdown_timeout(Duration::from_secs(2));
            }
        }
    }
}
