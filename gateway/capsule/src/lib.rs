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
