//! The one place where core errors become Python exceptions. The exception classes are plain
//! Python classes (`ironlock/exceptions.py`, picklable); this module only imports them.

use ironlock::{Error, ErrorKind, Report};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyModule};

static EXCEPTIONS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn exceptions(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    EXCEPTIONS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("ironlock.exceptions")?.unbind())
        })
        .map(|m| m.bind(py))
}

/// The Python class name for a core error kind (SPEC §5).
fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Contended => "LockContendedError",
        ErrorKind::Unavailable => "QuorumUnavailableError",
        ErrorKind::Lost => "LockLostError",
        ErrorKind::InvalidArgument => "InvalidArgumentError",
        ErrorKind::Connection => "IronlockConnectionError",
        ErrorKind::Internal => "InternalError",
        // A kind added to the core later is a bug until it is mapped here.
        _ => "InternalError",
    }
}

/// A report's per-node entries as a list of `ironlock.NodeReport`.
pub(crate) fn report_list<'py>(py: Python<'py>, report: &Report) -> PyResult<Bound<'py, PyList>> {
    let cls = exceptions(py)?.getattr("NodeReport")?;
    let items = report
        .nodes
        .iter()
        .map(|n| cls.call1((&*n.url, n.vote.as_str(), n.error.as_deref())))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

fn build(py: Python<'_>, class: &str, e: &Error) -> PyResult<PyErr> {
    let cls = exceptions(py)?.getattr(class)?;
    let kwargs = PyDict::new(py);
    if let Some(r) = e.report() {
        kwargs.set_item("report", report_list(py, r)?)?;
        kwargs.set_item("elapsed", r.elapsed.as_secs_f64())?;
        kwargs.set_item("rounds", r.rounds)?;
    }
    Ok(PyErr::from_value(cls.call((e.message(),), Some(&kwargs))?))
}

/// The core's TLS setting names as a Python caller gives them (redis-py's `ssl_*` keywords), for
/// the hints of handshake errors ("set ssl_certfile and ssl_keyfile").
const TLS_WORDS: [(&str, &str); 4] = [
    ("tls_ca_cert", "ssl_ca_certs"),
    ("tls_client_cert", "ssl_certfile"),
    ("tls_client_key", "ssl_keyfile"),
    ("tls_server_name", "ssl_server_hostname"),
];

/// Maps a core error to its Python exception, carrying message and per-node report.
pub(crate) fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    let e = e.respelled(&TLS_WORDS);
    build(py, class_name(e.kind()), &e).unwrap_or_else(|import_failed| import_failed)
}

/// A binding-level `InvalidArgument` (bad input only Python can produce), mapped like the core's.
pub(crate) fn invalid(py: Python<'_>, message: String) -> PyErr {
    to_pyerr(py, Error::new(ErrorKind::InvalidArgument, message))
}

/// A wrong type for argument `name`: `ArgumentTypeError`, both a `TypeError` and an
/// `InvalidArgumentError` (SPEC §6 counts wrong types as bad input).
pub(crate) fn wrong_type(name: &str, expected: &str, got: &Bound<'_, PyAny>) -> PyErr {
    let py = got.py();
    let got = got
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let message = format!("{name}: expected {expected}, got {got}");
    exceptions(py)
        .and_then(|m| m.getattr("ArgumentTypeError"))
        .and_then(|cls| cls.call1((message,)))
        .map(PyErr::from_value)
        .unwrap_or_else(|import_failed| import_failed)
}

/// A lock from another process (inherited through `fork`) was asked to do I/O.
pub(crate) fn forked(py: Python<'_>, what: &str, owner: u32) -> PyErr {
    let message = format!(
        "cannot {what} this lock in process {}: it was acquired by process {owner} (inherited \
         through fork); a child must acquire its own lock",
        crate::runtime::pid()
    );
    forked_with(py, message)
}

/// `ForkedLockError` with `message` (an object other than a lock, inherited through `fork`).
pub(crate) fn forked_with(py: Python<'_>, message: String) -> PyErr {
    exceptions(py)
        .and_then(|m| m.getattr("ForkedLockError"))
        .and_then(|cls| cls.call1((message,)))
        .map(PyErr::from_value)
        .unwrap_or_else(|import_failed| import_failed)
}
