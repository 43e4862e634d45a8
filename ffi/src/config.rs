//! `ironlock_config`: a builder for the manager's settings (SPEC §4). Setters only record
//! values; `ironlock_manager_new` validates them all through the core and names the first bad
//! one, so the rules live in one place.

use std::ffi::c_char;
use std::time::Duration;

use ironlock::Config;

use crate::boundary::{call, guard};
use crate::error::ironlock_status;
use crate::handles::{arg_mut, arg_str, free, into_raw};

type Edit = Box<dyn Fn(Config) -> Config + Send + Sync>;

/// Settings for a manager: node URLs plus any setting changed from its default.
///
/// Ownership: create with `ironlock_config_new`, free with `ironlock_config_free`; a manager
/// copies what it needs, so the config may be freed right after `ironlock_manager_new`.
/// Thread safety: not thread-safe; use one config from one thread at a time.
pub struct ironlock_config {
    nodes: Vec<String>,
    edits: Vec<Edit>,
}

impl ironlock_config {
    /// The core configuration: defaults, then each setter call in order.
    pub(crate) fn build(&self) -> Config {
        self.edits
            .iter()
            .fold(Config::new(self.nodes.clone()), |c, edit| edit(c))
    }
}

/// A new, empty configuration (no nodes, every setting at its default). NULL only if the
/// library failed internally.
#[unsafe(no_mangle)]
pub extern "C" fn ironlock_config_new() -> *mut ironlock_config {
    guard(std::ptr::null_mut(), || {
        into_raw(ironlock_config {
            nodes: Vec::new(),
            edits: Vec::new(),
        })
    })
}

/// Frees a configuration. NULL is a no-op.
///
/// # Safety
/// `config` is NULL or came from `ironlock_config_new` and was not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_free(config: *mut ironlock_config) {
    // SAFETY: forwarded caller contract.
    guard((), || unsafe { free(config) })
}

/// Appends a node URL: `redis://[user:password@]host:port[/db]`, `rediss://` (TLS) or
/// `unix://path`. Parsed (and checked for duplicates) by `ironlock_manager_new`.
///
/// # Safety
/// `config` is NULL or a live config; `url` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_add_node(
    config: *mut ironlock_config,
    url: *const c_char,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let config = unsafe { arg_mut(config, "config") }?;
        let url = unsafe { arg_str(url, "url") }?;
        config.nodes.push(url.to_owned());
        Ok(())
    })
}

/// Records one setting change.
///
/// # Safety
/// `config` is NULL or a live config.
unsafe fn edit(
    config: *mut ironlock_config,
    change: impl Fn(Config) -> Config + Send + Sync + 'static,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let config = unsafe { arg_mut(config, "config") }?;
        config.edits.push(Box::new(change));
        Ok(())
    })
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

/// Further rounds after the first (0 = try once). Default 10.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_retry_count(
    config: *mut ironlock_config,
    retry_count: u32,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.retry_count(retry_count)) }
}

/// Mean pause between rounds, in milliseconds. Default 200.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_retry_delay_ms(
    config: *mut ironlock_config,
    retry_delay_ms: u64,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.retry_delay(ms(retry_delay_ms))) }
}

/// Uniform ± spread of the pause, in milliseconds. Default 100.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_retry_jitter_ms(
    config: *mut ironlock_config,
    retry_jitter_ms: u64,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.retry_jitter(ms(retry_jitter_ms))) }
}

/// Clock drift allowance per unit of ttl, in [0, 0.5) (checked by `ironlock_manager_new`).
/// Default 0.01.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_drift_factor(
    config: *mut ironlock_config,
    drift_factor: f64,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.drift_factor(drift_factor)) }
}

/// Fixed clock drift allowance, in milliseconds. Default 2.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_drift_constant_ms(
    config: *mut ironlock_config,
    drift_constant_ms: u64,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.drift_constant(ms(drift_constant_ms))) }
}

/// Per-node request timeout, in milliseconds (must be positive). Default 50.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_node_timeout_ms(
    config: *mut ironlock_config,
    node_timeout_ms: u64,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.node_timeout(ms(node_timeout_ms))) }
}

/// Per-node connection timeout, in milliseconds (must be positive). Default 1000.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_connect_timeout_ms(
    config: *mut ironlock_config,
    connect_timeout_ms: u64,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.connect_timeout(ms(connect_timeout_ms))) }
}

/// Largest ttl any acquire or extend may ask for, and the restart quarantine length, in
/// milliseconds (positive, at most 2^32 - 1 seconds). Default 60000.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_max_ttl_ms(
    config: *mut ironlock_config,
    max_ttl_ms: u64,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.max_ttl(ms(max_ttl_ms))) }
}

/// Keep restarted nodes out of the quorum for max_ttl + drift + 1 s. Default true; switch off
/// only for nodes that persist with `appendfsync always`.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_restart_quarantine(
    config: *mut ironlock_config,
    restart_quarantine: bool,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.restart_quarantine(restart_quarantine)) }
}

/// Replica acknowledgement, 0 (off, the default) to 16 (checked by `ironlock_manager_new`): a
/// node's "yes" counts only once this many of its master's replicas acknowledged the write
/// (`WAIT`); a voter whose master changed then counts at once instead of sitting out the
/// failover quarantine. Safe only when every client of these nodes sets it, to the number of
/// replicas each master has. Refused with a `redis-cluster://` node. Added after the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_replica_acks(
    config: *mut ironlock_config,
    replica_acks: u32,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.replica_acks(replica_acks)) }
}

/// Re-seat on extension: an extension that finds a held lock's keys gone from a node that
/// restarted since it last held them writes them back there (`SET NX`: never over another
/// client's key), so a lock held through a rolling restart of every node is not lost. Default
/// true. Added after the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_reseat(
    config: *mut ironlock_config,
    reseat: bool,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.reseat(reseat)) }
}

/// Prepended to every resource name to form the Redis key (UTF-8). Default empty.
///
/// # Safety
/// `config` is NULL or a live config; `key_prefix` is NULL or a NUL-terminated string (copied).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_key_prefix(
    config: *mut ironlock_config,
    key_prefix: *const c_char,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let config = unsafe { arg_mut(config, "config") }?;
        let prefix = unsafe { arg_str(key_prefix, "key_prefix") }?.to_owned();
        config
            .edits
            .push(Box::new(move |c| c.key_prefix(prefix.clone())));
        Ok(())
    })
}

/// The ACL user name that `redis-sentinel://` nodes log in to their sentinels with (the URL's
/// own credentials are the data nodes'). NULL: none (the default).
///
/// # Safety
/// `config` is NULL or a live config; `username` is NULL or a NUL-terminated string (copied).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_sentinel_username(
    config: *mut ironlock_config,
    username: *const c_char,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let config = unsafe { arg_mut(config, "config") }?;
        let user = if username.is_null() {
            None
        } else {
            Some(unsafe { arg_str(username, "username") }?.to_owned())
        };
        config
            .edits
            .push(Box::new(move |c| c.sentinel_username(user.clone())));
        Ok(())
    })
}

/// The password that `redis-sentinel://` nodes log in to their sentinels with (a sentinel's
/// `requirepass`). Never shown in errors. NULL: none (the default).
///
/// # Safety
/// `config` is NULL or a live config; `password` is NULL or a NUL-terminated string (copied).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_sentinel_password(
    config: *mut ironlock_config,
    password: *const c_char,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let config = unsafe { arg_mut(config, "config") }?;
        let password = if password.is_null() {
            None
        } else {
            Some(unsafe { arg_str(password, "password") }?.to_owned())
        };
        config
            .edits
            .push(Box::new(move |c| c.sentinel_password(password.clone())));
        Ok(())
    })
}

/// A grant needs validity above this, in milliseconds (below max_ttl). Default 0.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_min_validity_ms(
    config: *mut ironlock_config,
    min_validity_ms: u64,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.min_validity(ms(min_validity_ms))) }
}

/// How often one lock may be extended. Default unlimited.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_max_extensions(
    config: *mut ironlock_config,
    max_extensions: u32,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.max_extensions(Some(max_extensions))) }
}

/// Auto-extension extends when the remaining validity falls below this, in milliseconds
/// (positive, below max_ttl). Default: one third of the lock's ttl.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_extension_threshold_ms(
    config: *mut ironlock_config,
    extension_threshold_ms: u64,
) -> ironlock_status {
    unsafe {
        edit(config, move |c| {
            c.extension_threshold(Some(ms(extension_threshold_ms)))
        })
    }
}

/// Acquire fairly (FIFO across the quorum) unless an acquire's options say otherwise
/// (`ironlock_acquire_opts_set_fair`). Default false. Added after the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_fair(
    config: *mut ironlock_config,
    fair: bool,
) -> ironlock_status {
    unsafe { edit(config, move |c| c.fair(fair)) }
}

/// How long a fair waiter's queue entry outlives its last heartbeat, in milliseconds (positive,
/// at most a day): a waiter that crashed or went silent drops out of line after this. 0 = the
/// default, 2 × retry_delay. Added after the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_queue_timeout_ms(
    config: *mut ironlock_config,
    queue_timeout_ms: u64,
) -> ironlock_status {
    unsafe {
        edit(config, move |c| {
            c.queue_timeout((queue_timeout_ms > 0).then(|| ms(queue_timeout_ms)))
        })
    }
}

/// Which TLS material a setter sets.
#[derive(Clone, Copy)]
enum Pem {
    Ca,
    ClientCert,
    ClientKey,
}

/// Records PEM material given as text (`from_file` false) or as a file path read now.
///
/// # Safety
/// `config` is NULL or a live config; `arg` is NULL or a NUL-terminated string.
unsafe fn set_pem(
    config: *mut ironlock_config,
    arg: *const c_char,
    name: &'static str,
    which: Pem,
    from_file: bool,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let config = unsafe { arg_mut(config, "config") }?;
        let text = unsafe { arg_str(arg, name) }?;
        let pem = if from_file {
            std::fs::read(text).map_err(|e| {
                ironlock::Error::new(
                    ironlock::ErrorKind::InvalidArgument,
                    format!("{name}: cannot read {:?}: {e}", ironlock::cut(text)),
                )
            })?
        } else {
            text.as_bytes().to_vec()
        };
        config.edits.push(Box::new(move |c| match which {
            Pem::Ca => c.tls_ca_cert(Some(pem.clone())),
            Pem::ClientCert => c.tls_client_cert(Some(pem.clone())),
            Pem::ClientKey => c.tls_client_key(Some(pem.clone())),
        }));
        Ok(())
    })
}

/// Trusts only this CA (PEM text, copied) for `rediss://` nodes instead of the system's store;
/// verification is always on. Added after the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config; `pem` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_tls_ca_cert(
    config: *mut ironlock_config,
    pem: *const c_char,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { set_pem(config, pem, "pem", Pem::Ca, false) }
}

/// As `ironlock_config_set_tls_ca_cert`, reading the PEM file at `path` now. Added after the
/// 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config; `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_tls_ca_cert_file(
    config: *mut ironlock_config,
    path: *const c_char,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { set_pem(config, path, "path", Pem::Ca, true) }
}

/// The client certificate (PEM text with its chain, copied) for mutual TLS (servers with
/// `tls-auth-clients yes`); give its key too. Added after the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config; `pem` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_tls_client_cert(
    config: *mut ironlock_config,
    pem: *const c_char,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { set_pem(config, pem, "pem", Pem::ClientCert, false) }
}

/// As `ironlock_config_set_tls_client_cert`, reading the PEM file at `path` now. Added after
/// the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config; `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_tls_client_cert_file(
    config: *mut ironlock_config,
    path: *const c_char,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { set_pem(config, path, "path", Pem::ClientCert, true) }
}

/// The private key (PEM text, copied; never shown in errors) of the client certificate. Added
/// after the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config; `pem` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_tls_client_key(
    config: *mut ironlock_config,
    pem: *const c_char,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { set_pem(config, pem, "pem", Pem::ClientKey, false) }
}

/// As `ironlock_config_set_tls_client_key`, reading the PEM file at `path` now. Added after the
/// 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config; `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_tls_client_key_file(
    config: *mut ironlock_config,
    path: *const c_char,
) -> ironlock_status {
    // SAFETY: forwarded caller contract.
    unsafe { set_pem(config, path, "path", Pem::ClientKey, true) }
}

/// The name every `rediss://` node's certificate must hold when the node URLs name the nodes
/// otherwise (an IP address); also sent as the TLS server name (SNI). Verification stays on.
/// Checked when the manager starts (a DNS name or an IP address). Added after the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config; `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_tls_server_name(
    config: *mut ironlock_config,
    name: *const c_char,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let config = unsafe { arg_mut(config, "config") }?;
        let name = unsafe { arg_str(name, "name") }?.to_owned();
        config
            .edits
            .push(Box::new(move |c| c.tls_server_name(Some(name.clone()))));
        Ok(())
    })
}

/// TLS settings of node `index` (in the order the nodes were added) that override the
/// manager's for that node: its trusted CA, client certificate and key (PEM text, copied) and
/// the name its certificate must hold. Each may be NULL: the manager's setting then. The node
/// must be a `rediss://` URL; checked when the manager starts. Called again for the same node,
/// the last call counts. Added after the 0.1.0 ABI.
///
/// # Safety
/// `config` is NULL or a live config; each string is NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ironlock_config_set_node_tls(
    config: *mut ironlock_config,
    index: usize,
    ca_pem: *const c_char,
    cert_pem: *const c_char,
    key_pem: *const c_char,
    server_name: *const c_char,
) -> ironlock_status {
    call(|| {
        // SAFETY: forwarded caller contract.
        let config = unsafe { arg_mut(config, "config") }?;
        let opt = |ptr: *const c_char, name: &str| -> ironlock::Result<Option<String>> {
            if ptr.is_null() {
                return Ok(None);
            }
            // SAFETY: non-NULL and NUL-terminated by the caller's contract.
            Ok(Some(unsafe { arg_str(ptr, name) }?.to_owned()))
        };
        let tls = ironlock::NodeTls {
            ca_cert: opt(ca_pem, "ca_pem")?.map(String::into_bytes),
            client_cert: opt(cert_pem, "cert_pem")?.map(String::into_bytes),
            client_key: opt(key_pem, "key_pem")?.map(String::into_bytes),
            server_name: opt(server_name, "server_name")?,
        };
        config
            .edits
            .push(Box::new(move |c| c.node_tls(index, tls.clone())));
        Ok(())
    })
}
