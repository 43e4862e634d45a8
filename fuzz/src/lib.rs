//! The properties the fuzz targets check, as plain functions: `fuzz_targets/*.rs` feed them
//! libFuzzer's inputs and `tests/regressions.rs` replays the committed corpus and every input
//! that once failed. Any violated property panics, which libFuzzer reports as a crash.
//!
//! Inputs are text lines (`key value`), so the seeds in `corpus/` are readable configurations,
//! URLs and resource lists, and libFuzzer's mutations stay close to what callers pass.

pub mod c_api;
pub mod config;
pub mod known;
pub mod redact;
pub mod resources;
mod secrets;
mod text;

pub use secrets::assert_hidden;
