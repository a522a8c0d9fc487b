//! Jobs: a small core that owns job state ([`core::JobCore`]: the store handle, the
//! feed, `insert` and `transition`) and the services around it, each in its own file or
//! folder and each holding the core — submission (`submit/`), dispatch with the
//! gang-aware queue (`dispatch/`), the RayJob lifecycle with clean-up, cancellation
//! and the foreign-RayJob report (`lifecycle/`), and a job's logs and diagnosis
//! (`logs/`). [`Jobs`] (`service.rs`) is the domain as the rest of the gateway sees
//! it; `watch.rs` its streams of a job's or a team's changes. Nothing here knows
//! HTTP: the handlers in `http::jobs` call these.

pub mod capsule_links;
pub mod claims;
pub mod core;
pub mod dispatch;
pub mod error;
pub mod fair_shares;
pub mod feed;
pub mod feed_tail;
pub mod fit;
pub mod job_access;
pub(crate) mod job_fleet;
pub mod last_day;
pub mod lifecycle;
pub mod logs;
mod phase_end;
pub mod pod_links;
pub mod pre_running;
pub mod preemption_plan;
pub mod queue;
pub mod records;
pub mod service;
pub mod submit;
pub mod watch;

pub use error::JobError;
pub use feed::{JobEvent, JobFeed, Resume, Sequenced};
pub use logs::diagnosis::{Diagnosis, PendingReason};
pub use logs::explain::pending_sentence;
pub use logs::pod_logs::{LogTarget, PodLog, PodRole};
pub use logs::{LogStart, LogStream};
pub use queue::{QueueBoard, QueueEntry};
pub use service::{JobParts, Jobs};
pub use submit::{CodeInput, Submitted};
pub use watch::WatchEvent;
