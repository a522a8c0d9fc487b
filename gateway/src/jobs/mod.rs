//! Jobs: submission, the gang-aware queue and dispatcher, the RayJob lifecycle,
//! clean-up, cancellation, logs, diagnosis and its explanation in words, the followers'
//! queue board and the report of foreign RayJobs. [`Jobs`] owns job state; each operation
//! is an `impl Jobs` block in the file named for it. Nothing here knows HTTP: the
//! handlers in `http::jobs` call these.

pub mod cancel;
pub mod capsule_links;
pub mod claims;
pub mod cleanup;
pub mod dashboard;
pub mod decision_memo;
pub mod diagnosis;
pub mod dispatch;
pub mod error;
pub mod explain;
pub mod feed;
pub mod fit;
pub mod follower;
pub mod inflight;
pub mod kuberay_status;
pub mod lifecycle;
pub mod limits;
pub mod log_tail;
pub mod logs;
pub mod orphans;
pub mod owners;
pub mod per_key;
pub mod pod_logs;
pub mod pre_running;
pub mod queue;
pub mod records;
pub mod resync_round;
pub mod service;
pub mod submit;
pub mod watch;

pub use diagnosis::{Diagnosis, PendingReason};
pub use error::JobError;
pub use explain::pending_sentence;
pub use feed::{JobEvent, JobFeed, Resume, Sequenced};
pub use logs::{LogStart, LogStream};
pub use pod_logs::{LogTarget, PodLog, PodRole};
pub use queue::{QueueBoard, QueueEntry};
pub use service::Jobs;
pub use submit::{CodeInput, Submitted};
pub use watch::WatchEvent;
