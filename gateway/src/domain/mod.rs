//! The gateway's domain vocabulary: the types every layer shares and none owns — a
//! job's state machine and the content digest that names a capsule. They know nothing
//! of HTTP, storage or Kubernetes, so every other module may use them.

pub mod digest;
pub mod job_state;

pub use digest::{Digest, InvalidDigest};
pub use job_state::{JobState, UnknownState};
