//! Target `c_api`: the C entry points of libironlock called with arbitrary bytes, exactly as a C
//! program calls them (`extern "C"` functions, C strings, raw pointers, NULLs), next to a model
//! built from the core's public API.
//!
//! Input lines:
//! - config: `node BYTES`, `node-null`, `SETTER VALUE` (the C setter names: `retry_count`,
//!   `retry_delay_ms`, `drift_factor`, `key_prefix`, `key_prefix-null`, ...); a leading `!`
//!   calls the setter with a NULL config;
//! - acquire: `res BYTES`, `res-null`, `n COUNT` (at most the number of `res` lines),
//!   `list-null`, `ttl MS`, `wait MS`, `retry COUNT`, `single`, `fencing`, `opts-null`,
//!   `out-null`, `manager-null`;
//! - `index N`: an index for the report accessors and a status for `ironlock_status_str`.
//!
//! Properties: no call panics (libFuzzer aborts on a panic even inside the boundary) or
//! returns IRONLOCK_INTERNAL; each status and `ironlock_last_error()` text is the one the
//! model predicts, so every error names its argument; out-parameters are untouched on error;
//! a config the core rejects is rejected by `ironlock_manager_new` with the same message.
//!
//! No network traffic: `ironlock_manager_new` runs only on configs the core rejects (a valid
//! one is passed a NULL `out`, rejected before anything starts), and `ironlock_acquire` only on
//! inputs the model says are invalid, against one manager whose three nodes are closed ports on
//! 127.0.0.1.

use std::ffi::{CStr, CString, c_char};
use std::ptr;
use std::sync::OnceLock;
use std::time::Duration;

use ironlock::{Config, ErrorKind, validate_resources};
use ironlock_ffi::*;

use crate::text::{flag, float, int, lines};

/// The properties, for one input.
pub fn check(data: &[u8]) {
    config_calls(data);
    acquire_call(data);
    null_handle_calls(data);
}

/// Asserts the status of the call just made and this thread's last error.
fn expect(status: ironlock_status, want: Result<(), &str>, what: &str) {
    let last = unsafe { CStr::from_ptr(ironlock_last_error()) }
        .to_str()
        .expect("ironlock_last_error is UTF-8")
        .to_owned();
    match want {
        Ok(()) => {
            assert_eq!(status, IRONLOCK_OK, "{what}: {last}");
            assert_eq!(last, "", "{what}: last error not cleared");
        }
        Err(message) => {
            assert_eq!(status, IRONLOCK_INVALID_ARGUMENT, "{what}: {last}");
            assert_eq!(last, message, "{what}");
        }
    }
}

/// The bytes as a C string: up to the first NUL, as C sees them.
fn c_string(bytes: &[u8]) -> CString {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    CString::new(&bytes[..end]).expect("no NUL before end")
}

/// A setter line: the C call (on `config`, which may be NULL) and the same change to the model.
type Setter = (ironlock_status, Option<Box<dyn FnOnce(Config) -> Config>>);

unsafe fn setter(config: *mut ironlock_config, key: &[u8], v: &[u8]) -> Option<Setter> {
    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
    macro_rules! number {
        ($parse:expr, $ffi:ident, |$c:ident, $x:ident| $model:expr) => {{
            let $x = $parse(v)?;
            let status = unsafe { $ffi(config, $x) };
            Some((status, Some(Box::new(move |$c: Config| $model))))
        }};
    }
    match key {
        b"retry_count" => number!(int::<u32>, ironlock_config_set_retry_count, |c, x| c
            .retry_count(x)),
        b"retry_delay_ms" => number!(int::<u64>, ironlock_config_set_retry_delay_ms, |c, x| c
            .retry_delay(ms(x))),
        b"retry_jitter_ms" => number!(int::<u64>, ironlock_config_set_retry_jitter_ms, |c, x| c
            .retry_jitter(ms(x))),
        b"drift_factor" => number!(float, ironlock_config_set_drift_factor, |c, x| c
            .drift_factor(x)),
        b"drift_constant_ms" => {
            number!(int::<u64>, ironlock_config_set_drift_constant_ms, |c, x| c
                .drift_constant(ms(x)))
        }
        b"node_timeout_ms" => number!(int::<u64>, ironlock_config_set_node_timeout_ms, |c, x| c
            .node_timeout(ms(x))),
        b"connect_timeout_ms" => number!(
            int::<u64>,
            ironlock_config_set_connect_timeout_ms,
            |c, x| c.connect_timeout(ms(x))
        ),
        b"max_ttl_ms" => number!(int::<u64>, ironlock_config_set_max_ttl_ms, |c, x| c
            .max_ttl(ms(x))),
        b"restart_quarantine" => number!(flag, ironlock_config_set_restart_quarantine, |c, x| c
            .restart_quarantine(x)),
        b"min_validity_ms" => number!(int::<u64>, ironlock_config_set_min_validity_ms, |c, x| c
            .min_validity(ms(x))),
        b"max_extensions" => number!(int::<u32>, ironlock_config_set_max_extensions, |c, x| c
            .max_extensions(Some(x))),
        b"extension_threshold_ms" => number!(
            int::<u64>,
            ironlock_config_set_extension_threshold_ms,
            |c, x| c.extension_threshold(Some(ms(x)))
        ),
        b"key_prefix" => {
            let s = c_string(v);
            let status = unsafe { ironlock_config_set_key_prefix(config, s.as_ptr()) };
            let prefix = s.to_str().ok().map(str::to_owned);
            Some((
                status,
                prefix.map(|p| Box::new(move |c: Config| c.key_prefix(p)) as _),
            ))
        }
        b"key_prefix-null" => Some((
            unsafe { ironlock_config_set_key_prefix(config, ptr::null()) },
            None,
        )),
        _ => None,
    }
}

/// Builds a config through the C setters and a model `Config` through the Rust ones, then
/// compares `ironlock_manager_new` with `Config::check`.
fn config_calls(data: &[u8]) {
    let config = ironlock_config_new();
    assert!(!config.is_null());
    let mut nodes = Vec::new();
    let mut edits: Vec<Box<dyn FnOnce(Config) -> Config>> = Vec::new();
    for (key, v) in lines(data) {
        match key {
            b"node" => {
                let url = c_string(v);
                let status = unsafe { ironlock_config_add_node(config, url.as_ptr()) };
                match url.to_str() {
                    Ok(u) => {
                        expect(status, Ok(()), "add_node");
                        nodes.push(u.to_owned());
                    }
                    Err(_) => expect(status, Err("url: not valid UTF-8"), "add_node"),
                }
            }
            b"node-null" => {
                let status = unsafe { ironlock_config_add_node(config, ptr::null()) };
                expect(status, Err("url: NULL pointer"), "add_node(NULL)");
            }
            _ => {
                let (target, key) = match key.strip_prefix(b"!") {
                    Some(k) => (ptr::null_mut(), k),
                    None => (config, key),
                };
                let Some((status, edit)) = (unsafe { setter(target, key, v) }) else {
                    continue;
                };
                let what = String::from_utf8_lossy(key);
                if target.is_null() {
                    expect(status, Err("config: NULL pointer"), &what);
                } else if let Some(edit) = edit {
                    expect(status, Ok(()), &what);
                    edits.push(edit);
                } else if key == b"key_prefix" {
                    expect(status, Err("key_prefix: not valid UTF-8"), &what);
                } else {
                    expect(status, Err("key_prefix: NULL pointer"), &what);
                }
            }
        }
    }
    let model = edits
        .into_iter()
        .fold(Config::new(nodes), |c, edit| edit(c));
    let mut out: *mut ironlock_manager = ptr::null_mut();
    match model.check() {
        Err(e) => {
            // Rejected by validation, before any connection.
            let status = unsafe { ironlock_manager_new(config, &mut out) };
            let want = match e.kind() {
                ErrorKind::InvalidArgument => IRONLOCK_INVALID_ARGUMENT,
                ErrorKind::Connection => IRONLOCK_CONNECTION,
                other => panic!("Config::check returned {other:?}: {e}"),
            };
            let last = unsafe { CStr::from_ptr(ironlock_last_error()) };
            assert_eq!(status, want, "manager_new: {last:?}");
            assert_eq!(
                last.to_str().ok(),
                Some(e.to_string().as_str()),
                "manager_new"
            );
            assert!(out.is_null(), "manager_new wrote *out on failure");
            crate::config::assert_names_argument(e.kind(), e.message(), model.nodes().len());
        }
        Ok(()) => {
            // Valid: only the NULL out-parameter may stop it, and must, before it connects.
            let status = unsafe { ironlock_manager_new(config, ptr::null_mut()) };
            expect(status, Err("out: NULL pointer"), "manager_new(out = NULL)");
        }
    }
    let status = unsafe { ironlock_manager_new(ptr::null(), &mut out) };
    expect(
        status,
        Err("config: NULL pointer"),
        "manager_new(config = NULL)",
    );
    assert!(out.is_null());
    unsafe { ironlock_config_free(config) };
}

/// The manager every acquire runs against: three closed ports on 127.0.0.1, retry_count 0.
/// Made once per process; only invalid acquires reach it, so it never talks to a node.
fn manager() -> *mut ironlock_manager {
    struct Shared(*mut ironlock_manager);
    // SAFETY: an ironlock_manager is thread-safe (include/ironlock.h) and never freed.
    unsafe impl Send for Shared {}
    unsafe impl Sync for Shared {}
    static MANAGER: OnceLock<Shared> = OnceLock::new();
    MANAGER
        .get_or_init(|| {
            let config = ironlock_config_new();
            for _ in 0..3 {
                // A port that was just free: nothing listens there.
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .expect("bind 127.0.0.1:0")
                    .port();
                let url = CString::new(format!("redis://127.0.0.1:{port}")).expect("no NUL");
                unsafe { ironlock_config_add_node(config, url.as_ptr()) };
            }
            unsafe {
                ironlock_config_set_retry_count(config, 0);
                ironlock_config_set_connect_timeout_ms(config, 100);
                ironlock_config_set_restart_quarantine(config, false);
            }
            let mut m = ptr::null_mut();
            let status = unsafe { ironlock_manager_new(config, &mut m) };
            unsafe { ironlock_config_free(config) };
            assert_eq!(status, IRONLOCK_OK, "manager over closed loopback ports");
            Shared(m)
        })
        .0
}

const ACQUIRE_KEYS: &[&[u8]] = &[
    b"res",
    b"res-null",
    b"n",
    b"list-null",
    b"ttl",
    b"wait",
    b"retry",
    b"single",
    b"fencing",
    b"opts-null",
    b"out-null",
    b"manager-null",
];

/// One `ironlock_acquire` described by the input, made only when the model predicts a
/// validation error (a valid one would contact the nodes).
fn acquire_call(data: &[u8]) {
    let mut resources: Vec<Option<CString>> = Vec::new();
    let mut n: Option<usize> = None;
    let (mut list_null, mut opts_null, mut out_null, mut manager_null) =
        (false, false, false, false);
    let mut ttl_ms = 0u64;
    let mut opts = ironlock_acquire_options::default();
    let mut any = false;
    for (key, v) in lines(data) {
        any |= ACQUIRE_KEYS.contains(&key);
        match key {
            b"res" => resources.push(Some(c_string(v))),
            b"res-null" => resources.push(None),
            b"n" => n = int(v).or(n),
            b"list-null" => list_null = true,
            b"ttl" => ttl_ms = int(v).unwrap_or(ttl_ms),
            b"wait" => opts.wait_ms = int(v).unwrap_or(opts.wait_ms),
            b"retry" => {
                if let Some(r) = int(v) {
                    opts.retry_count = r;
                    opts.has_retry_count = true;
                }
            }
            b"single" => opts.single_attempt = true,
            b"fencing" => opts.fencing = true,
            b"opts-null" => opts_null = true,
            b"out-null" => out_null = true,
            b"manager-null" => manager_null = true,
            _ => {}
        }
    }
    if !any {
        return;
    }
    // Never more than there are pointers: a larger count would read past the array in C too.
    let n = n.map_or(resources.len(), |n| n.min(resources.len()));
    let Some(want) = acquire_error(
        manager_null,
        &resources[..n],
        list_null,
        (!opts_null).then_some(&opts),
        out_null,
        ttl_ms,
    ) else {
        return; // valid: it would reach the nodes
    };
    let ptrs: Vec<*const c_char> = resources
        .iter()
        .map(|r| r.as_ref().map_or(ptr::null(), |s| s.as_ptr()))
        .collect();
    let mut out: *mut ironlock_lock = ptr::null_mut();
    let status = unsafe {
        ironlock_acquire(
            if manager_null {
                ptr::null_mut()
            } else {
                manager()
            },
            if list_null {
                ptr::null()
            } else {
                ptrs.as_ptr()
            },
            n,
            ttl_ms,
            if opts_null { ptr::null() } else { &opts },
            if out_null { ptr::null_mut() } else { &mut out },
        )
    };
    let last = unsafe { CStr::from_ptr(ironlock_last_error()) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(status, IRONLOCK_INVALID_ARGUMENT, "acquire: {last}");
    assert!(
        last.starts_with(&want),
        "acquire: {last:?}, expected {want:?}"
    );
    assert!(out.is_null(), "acquire wrote *out on failure");
    assert_eq!(
        ironlock_last_report_node_count(),
        0,
        "a rejected acquire has an empty report"
    );
}

/// The message (or its start) of the first validation error `ironlock_acquire` must report,
/// in its documented order; None when the call is valid.
fn acquire_error(
    manager_null: bool,
    resources: &[Option<CString>],
    list_null: bool,
    opts: Option<&ironlock_acquire_options>,
    out_null: bool,
    ttl_ms: u64,
) -> Option<String> {
    if manager_null {
        return Some("manager: NULL pointer".into());
    }
    if resources.is_empty() {
        return Some("n_resources: the resource list is empty (0)".into());
    }
    if list_null {
        return Some("resources: NULL pointer".into());
    }
    let mut names = Vec::new();
    for (i, r) in resources.iter().enumerate() {
        let Some(r) = r else {
            return Some(format!("resources[{i}]: NULL pointer"));
        };
        let Ok(name) = r.to_str() else {
            return Some(format!("resources[{i}]: not valid UTF-8"));
        };
        names.push(name);
    }
    if let Some(o) = opts
        && o.single_attempt
        && o.has_retry_count
        && o.retry_count != 0
    {
        return Some("opts: single_attempt contradicts a non-zero retry_count".into());
    }
    if out_null {
        return Some("out: NULL pointer".into());
    }
    if let Err(e) = validate_resources(&names) {
        return Some(e.message().to_owned());
    }
    // The manager's defaults: max_ttl 60 s, drift 1 % + 2 ms, min_validity 0.
    let ttl = Duration::from_millis(ttl_ms);
    if ttl.is_zero() {
        return Some("ttl: must be positive".into());
    }
    if ttl > Duration::from_secs(60) {
        return Some("ttl: must be at most max_ttl (60s)".into());
    }
    if ttl <= ttl.mul_f64(0.01) + Duration::from_millis(2) {
        return Some(format!("ttl: {ttl:?} leaves no validity"));
    }
    None
}

/// The lock, report and status functions with NULL handles and arbitrary numbers.
fn null_handle_calls(data: &[u8]) {
    let index: usize = lines(data)
        .filter(|(k, _)| *k == b"index")
        .find_map(|(_, v)| int(v))
        .unwrap_or(data.len());
    let ttl = data.len() as u64;
    let lock: *mut ironlock_lock = ptr::null_mut();
    unsafe {
        expect(
            ironlock_extend(lock, ttl),
            Err("lock: NULL pointer"),
            "extend(NULL)",
        );
        expect(
            ironlock_release(lock),
            Err("lock: NULL pointer"),
            "release(NULL)",
        );
        let mut held = true;
        expect(
            ironlock_release_held(lock, &mut held),
            Err("lock: NULL pointer"),
            "release_held(NULL)",
        );
        assert!(held, "release_held wrote *held on failure");
        expect(
            ironlock_release_held(lock, ptr::null_mut()),
            Err("held: NULL pointer"),
            "release_held(NULL, NULL)",
        );
        let mut fence = 7u64;
        expect(
            ironlock_lock_fence(lock, &mut fence),
            Err("lock: NULL pointer"),
            "fence(NULL)",
        );
        assert_eq!(fence, 7, "fence wrote *fence on failure");
        expect(
            ironlock_lock_report(lock),
            Err("lock: NULL pointer"),
            "lock_report(NULL)",
        );
        expect(
            ironlock_lock_auto_extend(lock, None, ptr::null_mut()),
            Err("lock: NULL pointer"),
            "auto_extend(NULL)",
        );
        expect(
            ironlock_lock_stop_auto_extend(lock),
            Err("lock: NULL pointer"),
            "stop_auto_extend(NULL)",
        );
        assert_eq!(ironlock_lock_validity_ms(lock), 0);
        assert!(!ironlock_lock_is_valid(lock));
        assert!(!ironlock_lock_is_lost(lock));
        assert!(ironlock_lock_token(lock).is_null());
        ironlock_lock_free(lock);
        ironlock_manager_free(ptr::null_mut());
        ironlock_config_free(ptr::null_mut());
    }
    // The report of the last (failed) call is empty: every index is out of range.
    assert_eq!(ironlock_last_report_node_count(), 0);
    assert!(ironlock_last_report_node_url(index).is_null());
    assert!(ironlock_last_report_node_vote(index).is_null());
    assert!(ironlock_last_report_node_error(index).is_null());
    assert_eq!(ironlock_last_report_rounds(), 0);
    let status = index as ironlock_status;
    let name = unsafe { CStr::from_ptr(ironlock_status_str(status)) };
    let known = (IRONLOCK_OK..=IRONLOCK_INTERNAL).contains(&status);
    assert_eq!(
        name.to_bytes() == b"UNKNOWN",
        !known,
        "status_str({status}) = {name:?}"
    );
}
