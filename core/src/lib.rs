//! # ironlock
//!
//! The Redlock distributed lock over N independent Redis (or Valkey) masters, with a majority
//! quorum, monotonic validity, restart-aware quorum, release wake-ups and fencing tokens.
//!
//! ```no_run
//! use std::time::Duration;
//! use ironlock::{Config, LockManager};
//!
//! # async fn demo() -> ironlock::Result<()> {
//! let manager = LockManager::new(Config::new([
//!     "redis://127.0.0.1:7001",
//!     "redis://127.0.0.1:7002",
//!     "redis://127.0.0.1:7003",
//! ]))
//! .await?;
//! let lock = manager.acquire(&["invoice:42"], Duration::from_secs(10)).await?;
//! assert!(lock.is_valid());
//! // ... the critical section: keep it shorter than lock.validity() ...
//! lock.release().await;
//! # Ok(())
//! # }
//! ```
//!
//! What Redlock promises, and what it does not, is in the user guide
//! (`docs/src/concepts/promises.md`; `scripts/docs` builds it).

#![warn(missing_docs)]

mod acquire;
mod alarm;
mod cluster;
mod config;
mod drain;
pub mod driven;
mod election;
mod error;
mod fair;
mod inspect;
mod keeper;
mod lock;
mod manager;
mod node;
mod notify;
mod quorum;
mod request;
mod rwlock;
pub mod scripts;
mod settings;
mod shards;
mod slot;
mod stats;
mod token;
mod topology;
mod urls;
mod verdict;

pub use acquire::{AcquireOptions, MAX_SEMAPHORE_LIMIT};
pub use config::{
    Config, NodeParts, NodeTls, RESERVED_SUFFIXES, agree_sentinel_login, cut, defaults,
    duration_from_millis_f64, duration_from_secs_f64, node_url, nodes_from_env, redact_url,
    resource_from_bytes, split_node_list, validate_election_name, validate_resource,
    validate_resources,
};
pub use drain::{drain, drain_blocking};
pub use election::{
    Election, Leader, Leadership, MAX_VALUE_LEN as MAX_ELECTION_VALUE_LEN, Observer,
};
pub use error::{Error, ErrorKind, NodeReport, Report, Result, Vote};
pub use inspect::{Holder, Permit};
pub use lock::{Access, KeepAlive, Lock, Released};
pub use manager::{LockManager, RwLock, Semaphore};
pub use node::NodeStatus;
pub use quorum::{classify, drift, fence, quorum, restart_quarantine, semaphore_quorum, validity};
pub use settings::{
    SETTINGS, Setting, SettingKind, SettingValue, TLS_SETTINGS, camel_case, respell, setting,
    suggest,
};
pub use stats::{LATENCY_BUCKETS, Latency, Stats};
pub use token::{HOLDER_MAX_LEN, holder_of, new_token, token_with_holder};

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The README's Rust examples, compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
