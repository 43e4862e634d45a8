//! The panic boundary and the thread-local last error: every exported function runs its body
//! through [`call`] (fallible calls) or [`guard`] (accessors), so a Rust panic becomes
//! `IRONLOCK_INTERNAL` (or the accessor's neutral value) and never unwinds into C.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use ironlock::{Error, ErrorKind, Result};

use crate::error::{IRONLOCK_INTERNAL, IRONLOCK_OK, ironlock_status, status_of};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs a fallible body: clears this thread's last error, then maps the outcome to a status and
/// records the error message (which names the argument or node) for `ironlock_last_error()`.
pub(crate) fn call(body: impl FnOnce() -> Result<()>) -> ironlock_status {
    set_last_error("");
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => IRONLOCK_OK,
        Ok(Err(e)) => {
            set_last_error(&e.to_string());
            status_of(e.kind())
        }
        Err(panic) => {
            set_last_error(ironlock::Error::from_panic(&*panic).message());
            IRONLOCK_INTERNAL
        }
    }
}

/// Runs an infallible body (accessors, `_free`); a panic yields `fallback`.
pub(crate) fn guard<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

fn set_last_error(message: &str) {
    let text = c_string(message);
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// The message of the last failed `ironlock_status` call on this thread.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// A C string from Rust text; a NUL byte (never expected) becomes `\0` spelled out.
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s)
        .unwrap_or_else(|_| CString::new(s.replace('\0', "\\0")).expect("NUL bytes were replaced"))
}

/// An `InvalidArgument` error naming `what`.
pub(crate) fn invalid(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidArgument, what)
}

/// Deliberately panics inside the panic boundary and returns what the boundary made of it:
/// always `IRONLOCK_INTERNAL`, with `ironlock_last_error()` describing the panic. Lets a C
/// program (and ironlock's own tests) verify that a panic never crosses into C.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_debug_panic() -> ironlock_status {
    call(|| panic!("ironlock_debug_panic was called"))
}
