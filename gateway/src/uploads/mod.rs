//! Resumable uploads of client-built capsules, and which capsules a team may
//! reference.
//!
//! `forge submit` packs the code itself with `forge-capsule` (the same deterministic
//! packer the gateway uses, with the spec bytes the gateway would put in), asks
//! whether the gateway already has that capsule for the caller's team
//! ([`Uploads::has_capsule`]), and otherwise uploads it here in chunks:
//!
//! 1. [`Uploads::start`] (size, digest) opens a session — or returns the open one for
//!    the same digest and size, so a client that lost everything but the directory
//!    resumes by asking again;
//! 2. [`Uploads::put_chunk`] writes a byte range at its offset: idempotent (a repeat
//!    writes the same bytes), any order, at most [`MAX_CHUNK_BYTES`] per request;
//!    only a chunk whose body arrived whole (and reached the disk) is recorded;
//! 3. [`Uploads::status`] lists the ranges present and missing — where to resume;
//! 4. [`Uploads::complete`] checks that nothing is missing, that the bytes hash to
//!    the declared digest, and that packing the capsule's code and spec again gives
//!    the same digest (so the gateway stores only what it would have built itself,
//!    every hostile-input check included), then stores it content-addressed.
//!
//! The chunks form the client's capsule rather than a plain archive that the gateway
//! would pack: the digest the client asks about *is* the stored object's address, so
//! the "already there?" question and the upload name one thing, and a finished
//! upload needs no second copy. A submission then names the capsule by digest.
//!
//! Sessions live on the gateway's local disk (see `session.rs`), at most
//! `FORGE_UPLOAD_MAX_SESSIONS` open per team; one untouched for `FORGE_UPLOAD_TTL_S`
//! is removed by the sweeper (`sweep.rs`).

mod error;
mod finish;
mod ranges;
mod service;
mod session;
mod sweep;
#[cfg(test)]
mod tests;

pub use error::UploadError;
pub use finish::Completed;
pub use ranges::RangeSet;
pub use service::{ChunkRange, MAX_CHUNK_BYTES, UploadLimits, Uploads, max_upload_size};
pub use session::{Session, SessionView};
