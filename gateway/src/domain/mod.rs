//! The gateway's domain vocabulary: the types every layer shares and none owns — a
//! job's state machine, a playground's states and end reasons, the content digest that names a capsule, fair-share weights, resource
//! quantities, and JSON numbers as JSON Schema reads them. They know nothing of HTTP, storage or the API server, so every other
//! module may use them.

pub mod digest;
pub mod fair_weights;
pub mod job_state;
pub mod json_number;
pub mod playground_state;
pub mod quantity;

pub use digest::{Digest, InvalidDigest};
pub use fair_weights::{FairShareSettings, InvalidWeights};
pub use job_state::{JobState, UnknownState};
pub use playground_state::{EndReason, PlaygroundState, UnknownPlaygroundState};
