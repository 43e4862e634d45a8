//! `ironlock._native`: the PyO3 module behind the `ironlock` Python package. Thin: arguments are
//! converted (`convert`), one core call runs on the process's runtime (`runtime`), and results
//! or errors (`error`) are converted back.

mod convert;
mod election;
mod error;
mod lock;
mod manager;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    runtime::watch_forks();
    m.add("__version__", ironlock::VERSION)?;
    m.add("SETTINGS", convert::setting_names())?;
    m.add_class::<manager::ManagerBase>()?;
    m.add_class::<manager::LockManager>()?;
    m.add_class::<manager::AsyncLockManager>()?;
    m.add_class::<lock::LockBase>()?;
    m.add_class::<lock::Lock>()?;
    m.add_class::<lock::AsyncLock>()?;
    m.add_class::<lock::LostFlag>()?;
    m.add_class::<lock::AsyncLostFlag>()?;
    m.add_class::<lock::KeepAlive>()?;
    m.add_class::<election::ElectionBase>()?;
    m.add_class::<election::Election>()?;
    m.add_class::<election::AsyncElection>()?;
    m.add_class::<election::AsyncCampaign>()?;
    m.add_class::<election::LeadershipBase>()?;
    m.add_class::<election::Leadership>()?;
    m.add_class::<election::AsyncLeadership>()?;
    m.add_class::<election::Leader>()?;
    m.add_class::<election::Observer>()?;
    m.add_class::<election::AsyncObserver>()?;
    m.add("MAX_ELECTION_VALUE_LEN", ironlock::MAX_ELECTION_VALUE_LEN)?;
    m.add_function(wrap_pyfunction!(runtime::drain_requests, m)?)?;
    // Not a module attribute: only `atexit` holds it.
    let drain = wrap_pyfunction!(runtime::drain_at_exit, m)?;
    m.py()
        .import("atexit")?
        .call_method1("register", (drain,))?;
    Ok(())
}
