//! Capsules: content-addressed code distribution for Forge jobs.
//!
//! A capsule is one deterministic `.zip` holding the user's code, the
//! authoritative JobSpec and (optionally) the runner artifact. Its SHA-256 is
//! its address: stored once, fetched and verified by every Ray pod.
//!
//! # Public API (for the gateway)
//!
//! ```text
//! // 1. Assemble (blocking; use spawn_blocking). Hostile input → CapsuleError
//! //    with .code()/.field()/.http_status() (4xx), nothing written.
//! let cap = assemble(CodeSource::Archive(spooled_upload), &jobspec_json,
//!                    runner_path.as_deref(), &CapsuleLimits::default(), &work_dir)?;
//! // 2. Store (dedupes: AlreadyPresent when the digest exists).
//! let store: Arc<dyn CapsuleStore> = Arc::new(S3Store::connect(S3Config::from_env()?).await?);
//! //    (S3Store::check() at start-up: Credentials / BucketMissing / Unreachable)
//! //    or, in dev mode: LocalStore::new(dir, hmac_key, public_base_url)? and
//! //    mount local_routes(store.clone()) into the gateway's axum router.
//! store.put_file(&cap.digest, &cap.path).await?;
//! // 3. Point the RayJob at it.
//! let url = store.get_url(&cap.digest, ttl).await?;        // presigned (≤ 7 days)
//! //   direct mode:     working_dir = url
//! //   HTTP-only mode:  let init = init_container(&url, &cap.digest, image)?;
//! //                    init.apply_to_pod_spec(&mut head_and_worker_pod_specs);
//! //                    working_dir = init.working_dir  (file:///forge/capsule/<sha>.zip)
//! let yaml = runtime_env_yaml(&working_dir, &env_vars)?;  // RayJob spec.runtimeEnvYAML
//! // annotation forge.dev/capsule-sha256 = cap.digest
//! ```
//!
//! Object keys: [`capsule_key`] (`capsules/<sha>.zip`) and [`log_key`]
//! (`logs/<job-id>/<name>.log`) for archived logs (`put_object`/`get_object`).
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
//!   `Deflated` (level 6): throughput on big data/checkpoints, small code
//!   still compressed. The choice depends on path and size only.
//! - Ratio check only after an entry produced `ratio_floor_bytes` (1 MiB), so
//!   small highly compressible files are not false positives.
//! - The runner's version in the manifest is `sha256:<hex>` of its bytes.

pub mod assemble;
pub mod error;
pub mod init_container;
pub mod limits;
pub mod local;
pub mod manifest;
pub mod path;
pub mod runtime_env;
#[cfg(feature = "s3")]
pub mod s3;
pub mod source;
pub mod store;
mod tail_hasher;

pub use assemble::{Capsule, assemble};
pub use error::CapsuleError;
pub use init_container::{CapsuleInit, init_container};
pub use limits::CapsuleLimits;
pub use local::{LocalStore, local_routes};
pub use runtime_env::runtime_env_yaml;
#[cfg(feature = "s3")]
pub use s3::{S3Config, S3Store};
pub use source::CodeSource;
pub use store::{CapsuleStore, PutOutcome, StoreError, capsule_key, log_key, plugin_key};
