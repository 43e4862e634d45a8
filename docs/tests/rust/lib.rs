//! The user guide's Rust examples as doctests: every ```rust block of the pages listed here runs
//! against the nodes in `IRONLOCK_NODES` when `scripts/docs --check` runs
//! `RUSTDOCFLAGS="--cfg ironlock_docs" cargo test -p ironlock-docs-examples --doc`.
//! docs/tests/run.py fails when a page with a Rust block is missing from this list.

#[cfg(all(doctest, ironlock_docs))]
#[doc = include_str!("../../src/start/rust.md")]
pub struct StartRust;

#[cfg(all(doctest, ironlock_docs))]
#[doc = include_str!("../../src/reference/rust.md")]
pub struct ReferenceRust;

#[cfg(all(doctest, ironlock_docs))]
#[doc = include_str!("../../src/guides/semaphores.md")]
pub struct GuideSemaphores;

#[cfg(all(doctest, ironlock_docs))]
#[doc = include_str!("../../src/guides/fair-locks.md")]
pub struct GuideFairLocks;

#[cfg(all(doctest, ironlock_docs))]
#[doc = include_str!("../../src/guides/operations.md")]
pub struct GuideOperations;

#[cfg(all(doctest, ironlock_docs))]
#[doc = include_str!("../../src/guides/read-write-locks.md")]
pub struct GuideReadWriteLocks;

#[cfg(all(doctest, ironlock_docs))]
#[doc = include_str!("../../src/guides/elections.md")]
pub struct GuideElections;
