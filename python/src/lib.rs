//! `ironlock._native`: the PyO3 module behind the `ironlock` Python package. Thin: arguments are
//! converted (`convert`), one core call runs on the process's runtime (`runtime`), and results
//! or errors (`error`) are converted back.

mod convert;
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
    m.add_function(wrap_pyfunction!(runtime::drain_requests, m)?)?;
    // Not a module attribute: only `atexit` holds it.
    let drain = wrap_pyfunction!(runtime::drain_at_exit, m)?;
    m.py()
        .import("atexit")?
        .call_method1("register", (drain,))?;
    Ok(())
}
