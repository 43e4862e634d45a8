//! The C ABI of ironlock: `libironlock.so` / `libironlock.a` and `include/ironlock.h`
//! (generated from this crate by cbindgen; see `cbindgen.toml`).
//!
//! Every exported function converts its arguments, calls one core function and converts the
//! result. The rules of the boundary (panic guard, NULL checks, out-parameters written only on
//! success, `_free(NULL)` is a no-op, no I/O in `_free`) live in `boundary.rs` and `handles.rs`.

#![allow(non_camel_case_types)]

mod boundary;
mod config;
mod election;
mod error;
mod handles;
mod lock;
mod manager;
mod options;
mod report;
mod runtime;
mod version;

pub use config::*;
pub use election::*;
pub use error::*;
pub use lock::*;
pub use manager::*;
pub use options::*;
pub use report::*;
pub use version::*;
