//! Dev-only helpers shared by the tests of several crates (never a dependency of a
//! shipped crate):
//!
//! - [`archives`]: hostile archives built byte by byte (`forge-capsule`'s archive
//!   limits, the end-to-end hostile-input suite).
//! - [`fs`]: write code trees on disk (used by `forge-capsule`'s tests and the
//!   workspace's end-to-end tests in `tests/`).
//! - `s3` (feature `s3`): a real S3-compatible server (s3s-fs, strict SigV4) served
//!   in-process on a port-0 listener (used by `forge-object-store`'s tests and by
//!   `tests/gateway_s3.rs` and `tests/capsule_rayjob.rs`).
//! - `postgres` (feature `postgres`): a throwaway PostgreSQL server (Debian's
//!   `initdb` + `postgres`, run as an unprivileged user) and fresh databases on it
//!   (used by the gateway's store conformance tests and the replica tests).
//!
//! A crate of its own (not a module of `forge-tests` or a feature of
//! `forge-object-store`) so that crates' own test binaries can share it without
//! depending on the gateway, and production builds never compile the test server.

pub mod archives;
pub mod fs;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "s3")]
pub mod s3;
