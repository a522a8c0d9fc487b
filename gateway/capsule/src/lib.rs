//! Capsules: content-addressed code distribution for Forge jobs.
//!
//! A capsule is one deterministic `.zip` holding the user's code, the
//! authoritative JobSpec and (optionally) the runner artifact. Its SHA-256 is
//! its address: stored once, fetched and verified by every Ray pod.
//!
//! This crate is the capsule *format* only: it knows nothing about where capsules
//! are stored. Storing them (S3, the dev-mode local store, signed URLs, the object
//! key scheme) is `forge-object-store`'s job. Neither crate depends on the other;
//! the gateway composes them. The only notion they share is "a SHA-256 hex digest",
//! which each checks at its own boundary ([`validate_digest`] here, before a digest
//! goes into pod paths; the store's key check there, before it goes into an object
//! key). Depending on the other crate for that one predicate would couple their
//! builds and tests for nothing: this crate needs no async runtime, S3 SDK or HTTP.
//!
//! # Public API (for the gateway)
//!
//! ```text
//! // 1. Assemble (blocking; use spawn_blocking). Hostile input → CapsuleError
//! //    with .code()/.field()/.kind() (Rejected / TooLarge / Internal), nothing written.
//! let cap = assemble(CodeSource::Archive(spooled_upload), &jobspec_json,
//!                    runner_path.as_deref(), &CapsuleLimits::default(), &work_dir)?;
//! // 2. Store it by `cap.digest` (forge-object-store: put_file, get_url).
//! // 3. Point the RayJob at the store's URL for it.
//! //   direct mode:     working_dir = url
//! //   HTTP-only mode:  let init = init_container(&url, &cap.digest, image)?;
//! //                    init.apply_to_pod_spec(&mut head_and_worker_pod_specs);
//! //                    working_dir = init.working_dir  (file:///forge/capsule/<sha>.zip)
//! let pip = read_requirements(&cap.path)?;  // requirements.txt, else pyproject.toml (+ uv.lock)
//! let yaml = runtime_env_yaml(&working_dir, &env_vars)?;  // RayJob spec.runtimeEnvYAML
//! // (runtime_env_yaml_of(&RuntimeEnv { pip, .. }) with packages)
//! // annotation forge.dev/capsule-sha256 = cap.digest
//! ```
//!
//! A client may assemble the capsule itself (`forge submit` does, to skip uploading
//! what the gateway already has): [`repack`] packs such a capsule's code and spec
//! again, and the gateway stores it only if the digests agree. Directories with
//! ignore rules applied come in as [`CodeSource::Listed`].
//!
//! # Decisions
//! - Layout: everything under one top-level folder `capsule/` (Ray strips a
//!   single top-level folder), user code at its root, Forge files in
//!   `capsule/.forge/` (`jobspec.json`, the runner, `forge-manifest.json`);
//!   user code may not use `.forge/`.
//! - An uploaded archive with a single top-level folder has it stripped like
//!   Ray would (`__MACOSX/` ignored); a directory source is never stripped.
//! - All links are refused: escaping ones as `SymlinkEscape`, internal ones as
//!   `LinkUnsupported` (Ray's zip unpacker does not restore links, so the job
//!   would see a text file instead). Empty directories are not kept.
//! - Files ≥ 1 MiB and known compressed formats are `Stored`, others
//!   `Deflated` (zlib level 3): throughput on big data/checkpoints, small code
//!   still compressed. The choice depends on path and size only.
//! - Ratio check only after an entry produced `ratio_floor_bytes` (1 MiB), so
//!   small highly compressible files are not false positives.
//! - The runner's version in the manifest is `sha256:<hex>` of its bytes.

pub mod assemble;
pub mod digest;
pub mod error;
pub mod init_container;
pub mod limits;
pub mod manifest;
pub mod path;
pub mod pyproject;
pub mod python_deps;
pub mod repack;
pub mod requirements;
pub mod runtime_env;
pub mod source;
mod tail_hasher;
mod tar_guard;
mod zip_directory;

pub use assemble::{Capsule, assemble, assemble_observed};
pub use digest::{InvalidDigest, validate_digest};
pub use error::{CapsuleError, CapsuleErrorKind};
pub use init_container::{CapsuleInit, init_container};
pub use limits::CapsuleLimits;
pub use python_deps::read_requirements;
pub use repack::{capsule_jobspec, repack};
pub use runtime_env::{RuntimeEnv, runtime_env_yaml, runtime_env_yaml_of};
pub use source::CodeSource;
