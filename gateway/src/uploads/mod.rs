//! Resumable uploads of client-built capsules, and which capsules a team may
//! reference.
//!
//! `forge submit` packs the code itself with `forge-capsule` (the same deterministic
//! packer the gateway uses, with the spec bytes the gateway would put in), asks
//! whether the gateway already has that capsule for the caller's team
//! ([`Uploads::has_capsule`]), and otherwise uploads it here in chunks:
//!
//! 1. [`Uploads::start`] (size, digest, optionally the part size) opens a session —
//!    or returns the open one for the same digest and size, so a client that lost
//!    everything but the directory resumes by asking again, on any replica;
//! 2. [`Uploads::put_chunk`] stores one whole part (`parts.rs`: at a multiple of the
//!    session's `partBytes`, that long, the last one shorter) in the session's
//!    multipart upload: idempotent (a repeat replaces the part), any order, at most
//!    [`MAX_CHUNK_BYTES`] per request; only a part whose body arrived whole and that
//!    the object store took is recorded;
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
//! Nothing of a session lives in one gateway: it is a store row with a row per part
//! that arrived ([`crate::store::UploadSessionStore`]), and its bytes are the parts of
//! a multipart upload in object storage (S3; the local store of dev keeps them in its
//! directory) — so any replica resumes and completes any session, and an ingress needs
//! no stickiness. At most `FORGE_UPLOAD_MAX_SESSIONS` are open per team; one untouched
//! for `FORGE_UPLOAD_TTL_S` is removed by the sweeper (`sweep.rs`), its multipart
//! upload aborted.

mod error;
mod finish;
mod parts;
mod ranges;
mod service;
mod session;
mod sweep;
#[cfg(test)]
mod tests;

pub use error::UploadError;
pub use finish::Completed;
pub use parts::{DEFAULT_PART_BYTES, PartPlan};
pub use ranges::RangeSet;
pub use service::{ChunkRange, MAX_CHUNK_BYTES, UploadLimits, Uploads, max_upload_size};
pub use session::SessionView;
