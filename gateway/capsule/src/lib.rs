//! Capsules: content-addressed code distribution.
pub mod assemble;
pub mod error;
pub mod limits;
pub mod manifest;
pub mod path;
pub mod source;
mod tail_hasher;

pub use assemble::{Capsule, assemble};
pub use error::CapsuleError;
pub use limits::CapsuleLimits;
pub use source::CodeSource;
pub mod local;
pub mod s3;
pub mod store;

pub use local::{LocalStore, local_routes};
pub use s3::{S3Config, S3Store};
pub use store::{CapsuleStore, PutOutcome, StoreError, capsule_key, log_key};
pub mod init_container;
pub mod runtime_env;

pub use init_container::{CapsuleInit, init_container};
pub use runtime_env::runtime_env_yaml;
