//! Driving the addon's runtime from each environment's libuv loop.
//!
//! The runtime is a current-thread one (`ironlock::driven::DrivenRuntime`). Its reactor is an
//! epoll instance, which itself polls readable while it has events ready; each environment
//! watches it with a libuv poll handle, so when a Redis reply arrives the JS thread's own event
//! loop wakes and runs the runtime right there ([`DrivenRuntime::drive_now`]): the reply is read,
//! the call's task finishes and its Promise is settled by the same callback, as it returns
//! (`complete.rs`), without another thread being woken or another turn of the loop.
//! A call started from JS writes its requests the same way, on the JS thread. Between events the
//! runtime's driver thread takes over once no JS thread has driven it for a moment, so timers
//! (retry pauses, auto-extension) and background work run while every JS thread is busy or idle.
//!
//! The handle does not keep the event loop alive (the JS layer does, while calls are pending).
//! It is closed by an asynchronous environment cleanup hook, whose end Node awaits before it
//! closes the loop.
//!
//! [`DrivenRuntime::drive_now`]: ironlock::driven::DrivenRuntime::drive_now

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::ptr;

use napi::bindgen_prelude::{Function, JsValue, Unknown};
use napi::{Env, Result, Status, sys};

use crate::complete::{CompleteArgs, Completion, Finished};
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
/// handle's first field, `void* data`, points back here), the cleanup hook that closes it, and
/// what settling a call's Promise from the handle's callback needs (see [`settle_here`]).
struct Watch {
    handle: Box<[u64]>,
    hook: sys::napi_async_cleanup_hook_handle,
    env: sys::napi_env,
    /// The JS `complete(id, error, value, report)` functions of the environment's managers, each once
    /// (`calls.js`'s; more than one when that module was loaded more than once, as test
    /// runners that reset their module registry do). A `Completer` holds its index.
    complete: Vec<sys::napi_ref>,
    /// The async context the completions run in (null until the first manager).
    context: sys::napi_async_context,
}

thread_local! {
    /// This thread's environments that watch the runtime, by `napi_env` address (a JS thread
    /// has one; an embedder may run several).
    static WATCHES: RefCell<Vec<(usize, *mut Watch)>> = const { RefCell::new(Vec::new()) };
    /// The environment whose poll callback drives the runtime on this thread now (0: none).
    static DRIVING: Cell<usize> = const { Cell::new(0) };
    /// Calls of that environment finished in this drive, with the index of their `complete`,
    /// settled when it ends.
    static SETTLED: RefCell<Vec<Finished>> = const { RefCell::new(Vec::new()) };
    /// Calls that finished in a drive a JS call started (`collecting`), by environment, waiting
    /// for that environment's `settleStashed`.
    static STASHED: RefCell<Vec<(usize, Finished)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `start`, a JS call of environment `env` starting its task (which usually drives the
/// runtime on this thread until its requests are written), so that the calls finishing in that
/// drive are kept for [`settle_stashed`] instead of going through their manager's threadsafe
/// function: a reply can arrive while the drive still runs (the server answered while the call
/// wrote to the other nodes), and the threadsafe function would cost an eventfd write, a turn of
/// the event loop and an eventfd read to deliver it. Returns whether any were kept: the JS layer
/// then calls `settleStashed` in a microtask (it cannot settle them here, inside the call that
/// is still starting, without running user code in it).
pub fn collecting(env: usize, start: impl FnOnce()) -> bool {
    // A drive started from inside another (a task cannot call JS) or from the poll callback
    // (it collects its own) is not this one's.
    if DRIVING.with(Cell::get) != 0 || find(env).is_none() {
        start();
        return false;
    }
    DRIVING.with(|d| d.set(env));
    // `start` does not unwind (the napi methods catch panics around it), but reset anyway.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DRIVING.with(|d| d.set(0));
        }
    }
    let reset = Reset;
    start();
    drop(reset);
    let done = SETTLED.with_borrow_mut(std::mem::take);
    if done.is_empty() {
        return false;
    }
    STASHED.with_borrow_mut(|s| s.extend(done.into_iter().map(|f| (env, f))));
    true
}

/// Settles the calls of `env` that [`collecting`] kept, calling `complete` for each on this
/// (JS) thread; the JS layer calls it in a microtask. An exception thrown by `complete` is
/// reported as uncaught (as the poll callback's are), and the other calls are still settled.
pub fn settle_stashed(env: &Env) -> Result<()> {
    let raw = env.raw();
    let key = raw as usize;
    let mine: Vec<Finished> = STASHED.with_borrow_mut(|s| {
        let (mine, others): (Vec<_>, Vec<_>) =
            std::mem::take(s).into_iter().partition(|(e, _)| *e == key);
        *s = others;
        mine.into_iter().map(|(_, f)| f).collect()
    });
    if mine.is_empty() {
        return Ok(());
    }
    let Some(watch) = find(key) else {
        mine.into_iter().for_each(Finished::fall_back);
        return Ok(());
    };
    // SAFETY: on `env`'s thread, inside a JS call (napi gives it a handle scope); `watch` is
    // alive (listed).
    unsafe {
        let mut recv = ptr::null_mut();
        check(sys::napi_get_undefined(raw, &mut recv))?;
        let references = &(*watch).complete;
        for finished in mine {
            let mut function = ptr::null_mut();
            let found = references.get(finished.complete as usize).is_some_and(|r| {
                sys::napi_get_reference_value(raw, *r, &mut function) == sys::Status::napi_ok
                    && !function.is_null()
            });
            if !found {
                finished.fall_back();
                continue;
            }
            let Ok(args) = finished.done.into_args(raw) else {
                continue;
            };
            let mut result = ptr::null_mut();
            let status =
                sys::napi_call_function(raw, recv, function, 4, args.as_ptr(), &mut result);
            if status == sys::Status::napi_pending_exception {
                let mut error = ptr::null_mut();
                if sys::napi_get_and_clear_last_exception(raw, &mut error) == sys::Status::napi_ok {
                    sys::napi_fatal_exception(raw, error);
                }
            }
        }
    }
    Ok(())
}

/// The calls [`collecting`] kept for environment `env`, dropped when it exits.
fn drop_stashed(env: usize) {
    let dropped: Vec<(usize, Finished)> = STASHED.with_borrow_mut(|s| {
        let (mine, others): (Vec<_>, Vec<_>) =
            std::mem::take(s).into_iter().partition(|(e, _)| *e == env);
        *s = others;
        mine
    });
    drop(dropped);
}

/// Hands `done`, a finished call of environment `env`, to the poll callback that drives the
/// runtime on this thread if it is `env`'s: the callback settles it on its way out, with no
/// threadsafe-function round trip through the event loop. `Err(done)` otherwise (another
/// thread, another environment, or a drive that no poll callback started).
pub fn settle_here(env: usize, finished: Finished) -> std::result::Result<(), Finished> {
    if DRIVING.with(Cell::get) != env {
        return Err(finished);
    }
    SETTLED.with_borrow_mut(|settled| settled.push(finished));
    Ok(())
}

/// Registers `complete` as a function that [`settle_here`] completions of `env` may call, and
/// returns its index (the same for the same function). `None` without a poll handle for `env`:
/// every completion then goes through the manager's threadsafe function.
pub fn register_complete(
    env: &Env,
    complete: &Function<'_, CompleteArgs, Unknown<'static>>,
) -> Result<Option<u32>> {
    let Some(watch) = find(env.raw() as usize) else {
        return Ok(None);
    };
    let raw = env.raw();
    // SAFETY: `watch` is alive (listed) and used on its environment's thread only; the calls
    // are Node-API calls on that thread, inside the callback that creates a manager.
    unsafe {
        let references = &(*watch).complete;
        for (i, reference) in references.iter().enumerate() {
            let mut known = ptr::null_mut();
            let mut same = false;
            check(sys::napi_get_reference_value(raw, *reference, &mut known))?;
            check(sys::napi_strict_equals(
                raw,
                known,
                complete.raw(),
                &mut same,
            ))?;
            if same {
                return Ok(u32::try_from(i).ok());
            }
        }
        if (*watch).context.is_null() {
            let mut name = ptr::null_mut();
            check(sys::napi_create_string_utf8(
                raw,
                c"ironlock".as_ptr(),
                8,
                &mut name,
            ))?;
            let mut context = ptr::null_mut();
            check(sys::napi_async_init(
                raw,
                ptr::null_mut(),
                name,
                &mut context,
            ))?;
            (*watch).context = context;
        }
        let Ok(index) = u32::try_from((*watch).complete.len()) else {
            return Ok(None);
        };
        let mut reference = ptr::null_mut();
        check(sys::napi_create_reference(
            raw,
            complete.raw(),
            1,
            &mut reference,
        ))?;
        (*watch).complete.push(reference);
        Ok(Some(index))
    }
}

fn check(status: sys::napi_status) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::new(
            Status::from(status),
            "ironlock: Node-API call failed",
        ))
    }
}

fn find(env: usize) -> Option<*mut Watch> {
    WATCHES.with_borrow(|w| w.iter().find(|(e, _)| *e == env).map(|(_, w)| *w))
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
        env: env.raw(),
        complete: Vec::new(),
        context: ptr::null_mut(),
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
            return Ok(());
        }
    }
    WATCHES.with_borrow_mut(|w| w.push((env.raw() as usize, raw)));
    Ok(())
}

/// The reactor has events: run the runtime on this thread until nothing is ready, then settle
/// the calls of this environment that finished meanwhile.
unsafe extern "C" fn on_ready(handle: *mut c_void, _status: c_int, _events: c_int) {
    // SAFETY: the handle's `data` field points at its live `Watch` (freed only once closed).
    let watch = unsafe { *handle.cast::<*mut Watch>() };
    // SAFETY: as above; read on the loop's thread, which owns it.
    let env = unsafe { (*watch).env } as usize;
    DRIVING.with(|d| d.set(env));
    // A panic must not unwind into libuv; the tasks catch their own.
    let _ = std::panic::catch_unwind(|| runtime().drive_now(|| ()));
    DRIVING.with(|d| d.set(0));
    let done = SETTLED.with_borrow_mut(std::mem::take);
    if !done.is_empty() {
        // SAFETY: on the environment's own thread, from its event loop, outside any JS call.
        unsafe { settle(watch, done) };
    }
}

/// Calls its `complete(id, error, value, report)` for each of `done`, in one callback scope
/// (microtasks run once, when it closes, as for a batch of threadsafe-function calls). One that
/// cannot be called here goes through its manager's threadsafe function.
unsafe fn settle(watch: *mut Watch, done: Vec<Finished>) {
    // SAFETY: the caller's contract; every value is created and used inside the handle scope.
    unsafe {
        let env = (*watch).env;
        let context = (*watch).context;
        let mut scope = ptr::null_mut();
        let mut recv = ptr::null_mut();
        if sys::napi_open_handle_scope(env, &mut scope) != sys::Status::napi_ok {
            done.into_iter().for_each(Finished::fall_back);
            return;
        }
        if sys::napi_get_undefined(env, &mut recv) != sys::Status::napi_ok {
            done.into_iter().for_each(Finished::fall_back);
            sys::napi_close_handle_scope(env, scope);
            return;
        }
        // Node ignores the resource (the context carries it, Node 14.17 and later).
        let mut callback = ptr::null_mut();
        let scoped = sys::napi_open_callback_scope(env, ptr::null_mut(), context, &mut callback)
            == sys::Status::napi_ok;
        for finished in done {
            let mut function = ptr::null_mut();
            let references = &(*watch).complete;
            let found = references.get(finished.complete as usize).is_some_and(|r| {
                sys::napi_get_reference_value(env, *r, &mut function) == sys::Status::napi_ok
                    && !function.is_null()
            });
            if found {
                call_complete(env, context, scoped, recv, function, finished.done);
            } else {
                finished.fall_back();
            }
        }
        if scoped {
            sys::napi_close_callback_scope(env, callback);
        }
        sys::napi_close_handle_scope(env, scope);
    }
}

/// One `complete(id, error, value, report)` call, inside the batch's callback scope (`scoped`) or, if
/// that could not be opened, as a callback of its own; an exception it throws is reported as
/// uncaught.
unsafe fn call_complete(
    env: sys::napi_env,
    context: sys::napi_async_context,
    scoped: bool,
    recv: sys::napi_value,
    function: sys::napi_value,
    c: Completion,
) {
    // SAFETY: inside `settle`'s handle scope, on the environment's thread.
    unsafe {
        let Ok(args) = c.into_args(env) else {
            return;
        };
        let mut result = ptr::null_mut();
        let status = if scoped {
            sys::napi_call_function(env, recv, function, 4, args.as_ptr(), &mut result)
        } else {
            sys::napi_make_callback(env, context, recv, function, 4, args.as_ptr(), &mut result)
        };
        if status == sys::Status::napi_pending_exception {
            let mut error = ptr::null_mut();
            if sys::napi_get_and_clear_last_exception(env, &mut error) == sys::Status::napi_ok {
                sys::napi_fatal_exception(env, error);
            }
        }
    }
}

/// The environment exits: stop watching and close the handle.
unsafe extern "C" fn on_env_cleanup(_hook: sys::napi_async_cleanup_hook_handle, data: *mut c_void) {
    let watch = data.cast::<Watch>();
    // SAFETY: `data` is the `Watch` registered with this hook, alive until closed; the hook runs
    // on the environment's thread while it can still make Node-API calls.
    unsafe {
        let env = (*watch).env;
        WATCHES.with_borrow_mut(|w| w.retain(|(e, _)| *e != env as usize));
        drop_stashed(env as usize);
        for reference in std::mem::take(&mut (*watch).complete) {
            sys::napi_delete_reference(env, reference);
        }
        if !(*watch).context.is_null() {
            sys::napi_async_destroy(env, (*watch).context);
            (*watch).context = ptr::null_mut();
        }
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
