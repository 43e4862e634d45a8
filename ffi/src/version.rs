//! The library's version, as a string at run time (the header's `IRONLOCK_VERSION_*` macros
//! give the version compiled against).

use std::ffi::c_char;

use crate::boundary::guard;

/// The library version, e.g. `"0.1.0"` (equal to `IRONLOCK_VERSION_MAJOR.MINOR.PATCH` of the
/// header it was built with).
///
/// Ownership: a static string; never free it. Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_version() -> *const c_char {
    const VERSION: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
    ) {
        Ok(v) => v,
        Err(_) => panic!("the crate version contains a NUL byte"),
    };
    guard(VERSION.as_ptr(), || VERSION.as_ptr())
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_the_crate_version() {
        let v = unsafe { std::ffi::CStr::from_ptr(super::ironlock_version()) };
        assert_eq!(v.to_str().unwrap(), ironlock::VERSION);
    }
}
