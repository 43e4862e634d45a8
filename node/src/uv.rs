//! Driving the addon's runtime from each environment's libuv loop.
//!
//! The runtime is a current-thread one (`ironlock::driven::DrivenRuntime`). Its reactor is an
//! epoll instance, which itself polls readable while it has events ready; each environment
//! watches it with a libuv poll handle, so when a Redis reply arrives the JS thread's own event
//! loop wakes and runs the runtime right there ([`DrivenRuntime::drive_now`]): the reply is read,
//! the call's task finishes and its Promise is settled without another thread being woken.
//! A call started from JS writes its requests the same way, on the JS thread. Between events the
//! runtime's driver thread takes over once no JS thread has driven it for a moment, so timers
//! (retry pauses, auto-extension) and background work run while every JS thread is busy or idle.
//!
//! The handle does not keep the event loop alive (the JS layer does, while calls are pending).
//! It is closed by an asynchronous environment cleanup hook, whose end Node awaits before it
//! closes the loop.
//!
//! [`DrivenRuntime::drive_now`]: ironlock::driven::DrivenRuntime::drive_now

use std::ffi::{c_int, c_void};
use std::ptr;

use napi::{Env, Result, sys};

use crate::runtime::runtime;

/// `uv_handle_type`'s `UV_POLL` and `uv_poll_event`'s `UV_READABLE` (libuv's `uv.h`, stable
/// since libuv 1.0).
const UV_POLL: c_int = 8;
const UV_READABLE: c_int = 1;

// libuv, as exported by the Node binary that loads the addon (as the Node-API functions are).
unsafe extern "C" {
    fn uv_handle_size(kind: c_int) -> usize;
    fn uv_poll_init(event_loop: *mut sys::uv_loop_s, handle: *mut c_void, fd: c_int) -> c_int;
    fn uv_poll_start(
        handle: *mut c_void,
        events: c_int,
        cb: unsafe extern "C" fn(*mut c_void, c_int, c_int),
    ) -> c_int;
    fn uv_poll_stop(handle: *mut c_void) -> c_int;
    fn uv_close(handle: *mut c_void, cb: unsafe extern "C" fn(*mut c_void));
    fn uv_unref(handle: *mut c_void);
}

/// One environment's poll handle: its memory (`uv_handle_size(UV_POLL)` bytes, 8-aligned; the
/// handle's first field, `void* data`, points back here) and the cleanup hook that closes it.
struct Watch {
    handle: Box<[u64]>,
    hook: sys::napi_async_cleanup_hook_handle,
}

impl Watch {
    fn handle(&mut self) -> *mut c_void {
        self.handle.as_mut_ptr().cast()
    }
}

/// Starts watching the runtime's reactor from `env`'s event loop. Without the reactor's
/// descriptor (not Linux) or when libuv refuses it, the runtime's own thread drives it instead
/// (see `DrivenRuntime::for_event_loop`); nothing to do here then.
pub fn watch(env: &Env) -> Result<()> {
    let Some(fd) = runtime().reactor_fd() else {
        return Ok(());
    };
    let event_loop = env.get_uv_event_loop()?;
    // SAFETY: a libuv function without preconditions.
    let size = unsafe { uv_handle_size(UV_POLL) };
    let mut watch = Box::new(Watch {
        handle: vec![0u64; size.div_ceil(8)].into_boxed_slice(),
        hook: ptr::null_mut(),
    });
    let handle = watch.handle();
    // SAFETY: `handle` is zeroed memory of the size libuv asked for, initialised here on the
    // loop's own thread; `fd` is a live epoll descriptor owned by the process-wide runtime.
    if unsafe { uv_poll_init(event_loop, handle, fd) } != 0 {
        return Ok(());
    }
    let raw = Box::into_raw(watch);
    // SAFETY: the handle is initialised; its `data` field (the first) points at the `Watch`,
    // which lives until the close callback frees it.
    unsafe {
        *handle.cast::<*mut c_void>() = raw.cast();
        uv_unref(handle);
        if uv_poll_start(handle, UV_READABLE, on_ready) != 0 {
            uv_close(handle, on_closed_unhooked);
            return Ok(());
        }
        let status = sys::napi_add_async_cleanup_hook(
            env.raw(),
            Some(on_env_cleanup),
            raw.cast(),
            &mut (*raw).hook,
        );
        if status != sys::Status::napi_ok {
            uv_poll_stop(handle);
            uv_close(handle, on_closed_unhooked);
        }
    }
    Ok(())
}

/// The reactor has events: run the runtime on this thread until nothing is ready.
unsafe extern "C" fn on_ready(_handle: *mut c_void, _status: c_int, _events: c_int) {
    // A panic must not unwind into libuv; the tasks catch their own.
    let _ = std::panic::catch_unwind(|| runtime().drive_now(|| ()));
}

/// The environment exits: stop watching and close the handle.
unsafe extern "C" fn on_env_cleanup(_hook: sys::napi_async_cleanup_hook_handle, data: *mut c_void) {
    let watch = data.cast::<Watch>();
    // SAFETY: `data` is the `Watch` registered with this hook, alive until closed.
    unsafe {
        let handle = (*watch).handle();
        uv_poll_stop(handle);
        uv_close(handle, on_closed);
    }
}

/// The handle is closed: tell Node the cleanup is over, then free it.
unsafe extern "C" fn on_closed(handle: *mut c_void) {
    // SAFETY: the `data` field points at the `Watch` leaked by `watch`; libuv no longer uses
    // the handle after its close callback.
    unsafe {
        let watch = Box::from_raw(*handle.cast::<*mut Watch>());
        sys::napi_remove_async_cleanup_hook(watch.hook);
    }
}

/// As `on_closed`, for a handle whose cleanup hook was never registered.
unsafe extern "C" fn on_closed_unhooked(handle: *mut c_void) {
    // SAFETY: as in `on_closed`.
    drop(unsafe { Box::from_raw(*handle.cast::<*mut Watch>()) });
}
