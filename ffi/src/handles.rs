//! Argument conversion for the C boundary: NULL checks that name the argument, UTF-8 checks,
//! and the Box ownership helpers behind every `_new` / `_free` pair.

use std::ffi::{CStr, c_char};

use ironlock::{Result, resource_from_bytes};

use crate::boundary::invalid;

/// Borrows `*ptr`, or fails naming `name` when it is NULL.
///
/// # Safety
/// `ptr` is NULL or points to a live `T` for `'a`.
pub(crate) unsafe fn arg_ref<'a, T>(ptr: *const T, name: &str) -> Result<&'a T> {
    // SAFETY: the caller promises a NULL or live pointer; NULL is rejected here.
    unsafe { ptr.as_ref() }.ok_or_else(|| invalid(format!("{name}: NULL pointer")))
}

/// Mutably borrows `*ptr`, or fails naming `name` when it is NULL.
///
/// # Safety
/// `ptr` is NULL or points to a live `T` for `'a`, used by no one else meanwhile.
pub(crate) unsafe fn arg_mut<'a, T>(ptr: *mut T, name: &str) -> Result<&'a mut T> {
    // SAFETY: as above.
    unsafe { ptr.as_mut() }.ok_or_else(|| invalid(format!("{name}: NULL pointer")))
}

/// Checks an out-parameter; it is written only once the call has succeeded.
pub(crate) fn arg_out<T>(ptr: *mut T, name: &str) -> Result<*mut T> {
    if ptr.is_null() {
        return Err(invalid(format!("{name}: NULL pointer")));
    }
    Ok(ptr)
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn arg_str<'a>(ptr: *const c_char, name: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(invalid(format!("{name}: NULL pointer")));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    std::str::from_utf8(bytes).map_err(|_| invalid(format!("{name}: not valid UTF-8")))
}

/// The resource list of an acquire: `n` NUL-terminated UTF-8 names. Emptiness, empty names
/// and duplicates are checked by the core, before any Redis traffic.
///
/// # Safety
/// `list` is NULL or points to `n` pointers, each NULL or a NUL-terminated string.
pub(crate) unsafe fn resources(list: *const *const c_char, n: usize) -> Result<Vec<String>> {
    if n == 0 {
        return Err(invalid("n_resources: the resource list is empty (0)"));
    }
    if list.is_null() {
        return Err(invalid("resources: NULL pointer"));
    }
    // SAFETY: the caller promises `n` readable pointers at `list`.
    let ptrs = unsafe { std::slice::from_raw_parts(list, n) };
    ptrs.iter()
        .enumerate()
        .map(|(i, &p)| {
            if p.is_null() {
                return Err(invalid(format!("resources[{i}]: NULL pointer")));
            }
            // SAFETY: non-NULL and NUL-terminated by the caller's contract.
            resource_from_bytes(i, unsafe { CStr::from_ptr(p) }.to_bytes())
        })
        .collect()
}

/// Moves `value` to the heap and hands its ownership to C.
pub(crate) fn into_raw<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// Takes back and drops a handle made by [`into_raw`]; NULL is a no-op.
///
/// # Safety
/// `ptr` is NULL or came from [`into_raw`] and was not freed before.
pub(crate) unsafe fn free<T>(ptr: *mut T) {
    if !ptr.is_null() {
        // SAFETY: the caller promises the pointer came from `Box::into_raw`, once.
        drop(unsafe { Box::from_raw(ptr) });
    }
}
