//! Prometheus metrics (`GET /metrics`, text exposition format), with the
//! `prometheus-client` crate. Everything is counted where it happens; the queue depth
//! is read from the dispatcher's board at scrape time.
//!
//! Two views. The **open** one (no token) reveals no team or plugin names: plugin
//! calls and failures are aggregated. The **detailed** one — for a scraper presenting
//! `FORGE_METRICS_TOKEN` or an admin token — adds the per-plugin series, whose
//! `plugin` label is `<owner>/<name>` and so names teams.
//!
//! | metric | labels | view | what |
//! |---|---|---|---|
//! | `forge_admission_decisions_total` | `decision`, `path` (`submit`, `queue`, `review`) | open | policy chain decisions |
//! | `forge_job_transitions_total` | `state` | open | job state changes, by new state |
//! | `forge_dispatch_seconds` | | open | queued → RayJob created (persist + create) |
//! | `forge_dispatch_pass_seconds` | | open | one dispatcher pass over the queue |
//! | `forge_dispatch_quiet_passes_total` | | open | dispatcher passes skipped: the store, the cluster and the policy were as at the last settled pass (`jobs/dispatch/quiet.rs`); `forge_dispatch_pass_seconds` counts them too |
//! | `forge_dispatch_decisions_reused_total` | | open | queued jobs a pass did not ask the chain about again (same policy, view and team usage as their last decision) |
//! | `forge_capsule_uploads_total` | `outcome` (`uploaded`, `deduplicated`) | open | capsules stored |
//! | `forge_logs_archived_total` | | open | job logs archived to object storage |
//! | `forge_queue_depth` | `series` | open | queued jobs per GPU series |
//! | `forge_policy_version` | | open | version of the active global chain |
//! | `forge_policy_plugin_calls_total` | `outcome` (`admit`, `queue`, `reject`, `error`) | open | policy plugin calls, all plugins together |
//! | `forge_policy_plugin_failures_total` | `cause` (`deadline`, `memory`, `trap`, `bad-output`, `widened`, `instantiate`, `nondeterministic`) | open | plugin calls that failed (closed), all plugins together |
//! | `forge_plugin_calls_total` | `plugin`, `version`, `outcome` | detailed | policy plugin calls |
//! | `forge_plugin_call_seconds` | `plugin`, `version` | detailed | one plugin call's latency (successful calls) |
//! | `forge_plugin_failures_total` | `plugin`, `version`, `cause` | detailed | plugin calls that failed (closed) |
//! | `forge_capsule_lookups_total` | `result` (`present`, `absent`) | open | "does my team have this capsule?" questions (`forge submit` before uploading) |
//! | `forge_upload_bytes_total` | | open | bytes received in resumable-upload chunks |
//! | `forge_upload_sessions_total` | `outcome` (`started`, `resumed`, `completed`, `failed`, `aborted`, `expired`) | open | resumable-upload sessions |
//! | `forge_leader` | | open | 1 while this replica leads (dispatches), else 0 |
//! | `forge_leader_epoch` | | open | the epoch (fencing token) of this replica's term, 0 when following |
//! | `forge_fenced_total` | `action` (`dispatch`, `transition`, `create`, `delete`, `stop`) | open | side effects refused because their term was over |
//! | `forge_rayjob_writes_total` | `verb` (`create`, `delete`) | open | RayJob creates and deletes this process sent |
//! | `forge_rayjob_relists_total` | | open | RayJob watch lists (the first and every relist) whose reconcile with the store finished |
//! | `forge_rayjob_resyncs_total` | | open | periodic looks at every RayJob of this installation (events or not) that finished, successful or not |
//! | `forge_submissions_limited_total` | `limit` (`rate`, `queue`) | open | submissions refused with 429 for a team's rate or queue cap |
//! | `forge_playground_requests_total` | `api` (`models`, `chat/completions`, `completions`, `other`), `status` (`2xx`, `4xx`, `5xx`) | open | calls to playground servers through the gateway |
//! | `forge_playground_tokens_total` | `kind` (`prompt`, `completion`) | open | tokens playground servers reported in their answers' `usage` (streamed answers report it when asked with `stream_options.include_usage`) |
//! | `forge_playground_ends_total` | `reason` (`ttl-expired`, `idle`, `deleted`, `reclaimed-by-admin`, `pod-failed`) | open | playgrounds ended |
//! | `forge_storage_bytes` | `kind` (`capsules`, `logs`, `plugins`) | open | bytes object storage holds, measured by the leader's last retention sweep |
//! | `forge_storage_objects` | `kind` | open | objects object storage holds, as above |
//! | `forge_retention_deleted_total` | `kind` (`rejected-jobs`, `job-logs`, `capsule-owners`, `capsules`) | open | what retention deleted (a job's logs count once for all its pods) |
//! | `forge_retention_sweeps_total` | | open | retention sweeps finished (alert if the leader's stop increasing) |
//! | `forge_capacity_gpus` | `series`, `state` (`total`, `allocatable`, `in_use`, `free`, `blocked`, `tainted`) | open | GPUs per series from Node objects (what `/v1/capacity` shows), read at scrape time |
//! | `forge_fleet_available` | `fleet` | open | 1 while the fleet's API server answers its probes, 0 while it is marked unavailable (nothing is placed there) |
//! | `forge_admission_rejections_total` | `path`, `code` | open | policy rejections by their code |
//! | `forge_store_operation_seconds` | `op` | open | one job-store operation's latency (`store/metered.rs`) |
//! | `forge_store_errors_total` | `op` | open | job-store operations that failed in the database (not conflicts) |
//! | `forge_http_failures_total` | `code` | open | requests that failed on the gateway's side (5xx it logged), by error code |
//! | `forge_job_queue_wait_seconds` | `series`, `team` | detailed | submitted → dispatched (a job dispatched again after a failed create counts from its submission) |
//! | `forge_job_time_to_running_seconds` | `series`, `team` | detailed | submitted → running |
//! | `forge_team_queue_depth` | `team` | detailed | queued jobs per team, read at scrape time |
//! | `forge_preemptions_total` | `series`, `reason` (`priority`) | open | running jobs given a preemption notice (SIGTERM), by the series of the GPUs freed |
//! | `forge_preemption_releases_total` | `how` (`exited`, `checkpointed`, `grace-ended`, `rayjob-gone`) | open | preempted jobs released back to the queue, by what ended their notice |
//! | `forge_preemption_lost_gpu_seconds_total` | | open | GPU-seconds of work preemption threw away: from each victim's last acknowledged checkpoint (or its start) to its release |
//! | `forge_foreign_rayjobs` | `reason` (`other-instance`, `no-instance`, `unknown-job`, `other-fleet`) | open | managed RayJobs this installation did not create or does not know (reported, never deleted) |

use std::time::Duration;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use std::collections::BTreeMap;

use crate::domain::JobState;
use forge_policy_host::model::{FleetView, SeriesCapacity};
use forge_policy_host::{ChainError, ChainOutcome};

type Labels = Vec<(&'static str, String)>;
type CounterFamily = Family<Labels, Counter>;
type GaugeFamily = Family<Labels, Gauge>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn plugin_call_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_02, 2.0, 16))
}

/// 0.1 s … ~14.5 h: how long jobs wait.
fn job_wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 20))
}

/// 50 µs … ~3.3 s: one database operation.
fn store_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 17))
}

/// Declares the metrics once, a line each — the view it is in (`open`: anyone may
/// scrape it; `detailed`: only an authenticated scraper, as its labels name plugins
/// and so teams), its field, type and constructor, its name and help — and builds the
/// [`Metrics`] struct and its registration from the table, in the table's order.
macro_rules! metrics {
    ($( $view:ident $field:ident : $ty:ty = $init:expr, $name:literal, $help:literal; )*) => {
        /// The gateway's metrics.
        #[derive(Debug)]
        pub struct Metrics {
            /// What anyone may scrape.
            registry: Registry,
            /// Added for authenticated scrapers: series labelled with plugin (and so
            /// team) names.
            detailed: Registry,
            $( $field: $ty, )*
        }

        impl Metrics {
            /// A registry with every metric registered (and no series yet).
            fn registered() -> Self {
                let mut registry = Registry::default();
                let mut detailed = Registry::default();
                $(
                    let $field: $ty = $init;
                    metrics!(@view $view, registry, detailed)
                        .register($name, $help, $field.clone());
                )*
                Self { registry, detailed, $( $field, )* }
            }
        }
    };
    (@view open, $open:ident, $detailed:ident) => { $open };
    (@view detailed, $open:ident, $detailed:ident) => { $detailed };
}

metrics! {
    open decisions: CounterFamily = Family::default(), "forge_admission_decisions",
        "Policy chain decisions by kind and path";
    open transitions: CounterFamily = Family::default(), "forge_job_transitions",
        "Job state changes by new state";
    open dispatch: Histogram = Histogram::new(exponential_buckets(0.0005, 2.0, 16)), "forge_dispatch_seconds",
        "Seconds from the dispatch decision to the RayJob created";
    open pass: Histogram = Histogram::new(exponential_buckets(0.0005, 2.0, 16)), "forge_dispatch_pass_seconds",
        "Seconds of one dispatcher pass";
    open quiet_passes: Counter = Counter::default(), "forge_dispatch_quiet_passes",
        "Dispatcher passes skipped: the store, the cluster and the policy were as at the last settled pass";
    open reused: Counter = Counter::default(), "forge_dispatch_decisions_reused",
        "Queued jobs a dispatcher pass did not ask the chain about again: the policy, the cluster view and the team's usage were those of their last decision";
    open capsules: CounterFamily = Family::default(), "forge_capsule_uploads",
        "Capsules stored, by outcome";
    open capsule_lookups: CounterFamily = Family::default(), "forge_capsule_lookups",
        "Capsule presence questions, by result";
    open upload_bytes: Counter = Counter::default(), "forge_upload_bytes",
        "Bytes received in resumable-upload chunks";
    open upload_sessions: CounterFamily = Family::default(), "forge_upload_sessions",
        "Resumable-upload sessions, by outcome";
    open logs: Counter = Counter::default(), "forge_logs_archived",
        "Job logs archived to object storage";
    open queue_depth: GaugeFamily = Family::default(), "forge_queue_depth",
        "Queued jobs per GPU series";
    open policy_version: Gauge = Gauge::default(), "forge_policy_version",
        "Version of the active global policy chain";
    open plugin_calls_total: CounterFamily = Family::default(), "forge_policy_plugin_calls",
        "Policy plugin calls (all plugins) by outcome";
    open plugin_failures_total: CounterFamily = Family::default(), "forge_policy_plugin_failures",
        "Policy plugin calls (all plugins) that failed, by cause";
    detailed plugin_calls: CounterFamily = Family::default(), "forge_plugin_calls",
        "Policy plugin calls by plugin, version and outcome";
    detailed plugin_seconds: HistogramFamily = Family::new_with_constructor(plugin_call_histogram), "forge_plugin_call_seconds",
        "Seconds of one policy plugin call";
    detailed plugin_failures: CounterFamily = Family::default(), "forge_plugin_failures",
        "Policy plugin calls that failed, by cause";
    open leader: Gauge = Gauge::default(), "forge_leader",
        "1 while this replica leads (runs the dispatcher and the lifecycle controller)";
    open leader_epoch: Gauge = Gauge::default(), "forge_leader_epoch",
        "Epoch (fencing token) of this replica's leadership term, 0 when following";
    open fenced: CounterFamily = Family::default(), "forge_fenced",
        "Side effects refused because their leadership term was over";
    open rayjob_writes: CounterFamily = Family::default(), "forge_rayjob_writes",
        "RayJob creates and deletes sent by this process";
    open rayjob_relists: Counter = Counter::default(), "forge_rayjob_relists",
        "RayJob watch lists (the first and every relist) whose reconcile with the store finished";
    open rayjob_resyncs: Counter = Counter::default(), "forge_rayjob_resyncs",
        "Periodic looks at every RayJob of this installation (events or not) that finished, successful or not";
    open limited: CounterFamily = Family::default(), "forge_submissions_limited",
        "Submissions refused for a team's submission rate or queue cap";
    open preemptions: CounterFamily = Family::default(), "forge_preemptions",
        "Running jobs given a preemption notice, by series and reason";
    open preemption_releases: CounterFamily = Family::default(), "forge_preemption_releases",
        "Preempted jobs released back to the queue, by what ended their notice";
    open preemption_lost: Counter<f64, std::sync::atomic::AtomicU64> = Counter::default(), "forge_preemption_lost_gpu_seconds",
        "GPU-seconds of work lost to preemption (since each victim's last acknowledged checkpoint)";
    open foreign: GaugeFamily = Family::default(), "forge_foreign_rayjobs",
        "Managed RayJobs not created by this installation or of no known job (never deleted)";
    open playground_requests: CounterFamily = Family::default(), "forge_playground_requests",
        "Calls to playground servers through the gateway, by API and status class";
    open playground_ends: CounterFamily = Family::default(), "forge_playground_ends",
        "Playgrounds ended, by reason";
    open playground_tokens: CounterFamily = Family::default(), "forge_playground_tokens",
        "Tokens playground servers reported in their answers' usage, by kind";
    open storage_bytes: GaugeFamily = Family::default(), "forge_storage_bytes",
        "Bytes object storage holds, by kind (the leader's last retention sweep)";
    open storage_objects: GaugeFamily = Family::default(), "forge_storage_objects",
        "Objects object storage holds, by kind (the leader's last retention sweep)";
    open retention_deleted: CounterFamily = Family::default(), "forge_retention_deleted",
        "What retention deleted, by kind";
    open retention_sweeps: Counter = Counter::default(), "forge_retention_sweeps",
        "Retention sweeps finished";
    open capacity: GaugeFamily = Family::default(), "forge_capacity_gpus",
        "GPUs per series by state, from Node objects";
    open fleet_available: GaugeFamily = Family::default(), "forge_fleet_available",
        "1 while a fleet's API server answers its probes, 0 while it is marked unavailable";
    open rejections: CounterFamily = Family::default(), "forge_admission_rejections",
        "Policy rejections by path and code";
    open store_seconds: HistogramFamily = Family::new_with_constructor(store_histogram), "forge_store_operation_seconds",
        "Seconds of one job-store operation";
    open store_errors: CounterFamily = Family::default(), "forge_store_errors",
        "Job-store operations that failed in the database";
    open http_failures: CounterFamily = Family::default(), "forge_http_failures",
        "Requests that failed on the gateway's side (logged), by error code";
    detailed queue_wait: HistogramFamily = Family::new_with_constructor(job_wait_histogram), "forge_job_queue_wait_seconds",
        "Seconds from submission to dispatch, by series and team";
    detailed time_to_running: HistogramFamily = Family::new_with_constructor(job_wait_histogram), "forge_job_time_to_running_seconds",
        "Seconds from submission to running, by series and team";
    detailed team_queue_depth: GaugeFamily = Family::default(), "forge_team_queue_depth",
        "Queued jobs per team";
}

/// What `/metrics` reads at scrape time.
#[derive(Debug, Default)]
pub struct Scrape<'a> {
    /// Queued jobs per series.
    pub queue_depth: BTreeMap<String, u64>,
    /// Queued jobs per team.
    pub team_depth: BTreeMap<String, u64>,
    /// GPUs per series.
    pub capacity: &'a [SeriesCapacity],
    /// The fleets, each available or not.
    pub fleets: &'a [FleetView],
    /// Version of the active global chain.
    pub policy_version: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// A job-store operation (`store/metered.rs` times each), as
/// `forge_store_operation_seconds{op}` labels it; every one starts at 0
/// ([`StoreOp::ALL`]), so the list is here once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    Insert,
    Get,
    Transition,
    List,
    Queued,
    QueuedCount,
    Active,
    Unfinished,
    ChangeVersion,
    GetMany,
    RecordDecision,
    RecordCheckpoint,
    Decisions,
    History,
    Histories,
    LivesSince,
    Preemptions,
    PreemptionsSince,
    AccrueUsage,
    Usage,
    RecordPass,
    Passes,
    ChangesSince,
    ChangesHead,
}

impl StoreOp {
    /// Every operation.
    pub const ALL: [StoreOp; 24] = [
        StoreOp::Insert,
        StoreOp::Get,
        StoreOp::Transition,
        StoreOp::List,
        StoreOp::Queued,
        StoreOp::QueuedCount,
        StoreOp::Active,
        StoreOp::Unfinished,
        StoreOp::ChangeVersion,
        StoreOp::GetMany,
        StoreOp::RecordDecision,
        StoreOp::RecordCheckpoint,
        StoreOp::Decisions,
        StoreOp::History,
        StoreOp::Histories,
        StoreOp::LivesSince,
        StoreOp::Preemptions,
        StoreOp::PreemptionsSince,
        StoreOp::AccrueUsage,
        StoreOp::Usage,
        StoreOp::RecordPass,
        StoreOp::Passes,
        StoreOp::ChangesSince,
        StoreOp::ChangesHead,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreOp::Insert => "insert",
            StoreOp::Get => "get",
            StoreOp::Transition => "transition",
            StoreOp::List => "list",
            StoreOp::Queued => "queued",
            StoreOp::QueuedCount => "queued_count",
            StoreOp::Active => "active",
            StoreOp::Unfinished => "unfinished",
            StoreOp::ChangeVersion => "change_version",
            StoreOp::GetMany => "get_many",
            StoreOp::RecordDecision => "record_decision",
            StoreOp::RecordCheckpoint => "record_checkpoint",
            StoreOp::Decisions => "decisions",
            StoreOp::History => "history",
            StoreOp::Histories => "histories",
            StoreOp::LivesSince => "lives_since",
            StoreOp::Preemptions => "preemptions",
            StoreOp::PreemptionsSince => "preemptions_since",
            StoreOp::AccrueUsage => "accrue_usage",
            StoreOp::Usage => "usage",
            StoreOp::RecordPass => "record_pass",
            StoreOp::Passes => "passes",
            StoreOp::ChangesSince => "changes_since",
            StoreOp::ChangesHead => "changes_head",
        }
    }
}

/// Label values known in advance, whose series start at 0 (Prometheus' advice: a
/// series that first appears at 1 is missed by `rate`/`increase`, and so by alerts).
mod known {
    pub const DECISIONS: [&str; 4] = ["admit", "queue", "reject", "error"];
    pub const PATHS: [&str; 3] = ["submit", "queue", "review"];
    pub const FAILURE_CAUSES: [&str; 7] = [
        "deadline",
        "memory",
        "trap",
        "bad-output",
        "widened",
        "instantiate",
        "nondeterministic",
    ];
    pub const FENCED: [&str; 5] = ["dispatch", "transition", "create", "delete", "stop"];
    pub const RAYJOB_WRITES: [&str; 2] = ["create", "delete"];
    pub const LIMITS: [&str; 2] = ["rate", "queue"];
    /// Codes of the failures the gateway logs as its own (`answer::Answer::internal`,
    /// `storage_unavailable`).
    pub const FAILURES: [&str; 2] = ["internal", "storage-unavailable"];
}

impl Metrics {
    /// Every metric registered, with the series of known label values at 0.
    pub fn new() -> Self {
        let m = Self::registered();
        let one = |k: &'static str, v: &str| vec![(k, v.to_string())];
        for d in known::DECISIONS {
            for p in known::PATHS {
                m.decisions
                    .get_or_create(&vec![("decision", d.to_string()), ("path", p.to_string())])
                    .inc_by(0);
            }
            m.plugin_calls_total
                .get_or_create(&one("outcome", d))
                .inc_by(0);
        }
        for s in JobState::ALL {
            m.transitions
                .get_or_create(&one("state", s.as_str()))
                .inc_by(0);
        }
        for c in known::FAILURE_CAUSES {
            m.plugin_failures_total
                .get_or_create(&one("cause", c))
                .inc_by(0);
        }
        for a in known::FENCED {
            m.fenced.get_or_create(&one("action", a)).inc_by(0);
        }
        for v in known::RAYJOB_WRITES {
            m.rayjob_writes.get_or_create(&one("verb", v)).inc_by(0);
        }
        for l in known::LIMITS {
            m.limited.get_or_create(&one("limit", l)).inc_by(0);
        }
        for op in StoreOp::ALL {
            m.store_errors
                .get_or_create(&one("op", op.as_str()))
                .inc_by(0);
        }
        for code in known::FAILURES {
            m.http_failures.get_or_create(&one("code", code)).inc_by(0);
        }
        m
    }
}

impl Metrics {
    /// A policy rejection's code.
    pub fn rejection(&self, code: &str, path: &'static str) {
        self.rejections
            .get_or_create(&vec![
                ("path", path.to_string()),
                ("code", code.to_string()),
            ])
            .inc();
    }

    /// A job-store operation's latency, and whether it failed in the database.
    pub fn store_operation(&self, op: &'static str, took: Duration, failed: bool) {
        let op = vec![("op", op.to_string())];
        self.store_seconds
            .get_or_create(&op)
            .observe(took.as_secs_f64());
        if failed {
            self.store_errors.get_or_create(&op).inc();
        }
    }

    /// A request that failed on the gateway's side, by its error code.
    pub fn http_failure(&self, code: &str) {
        self.http_failures
            .get_or_create(&vec![("code", code.to_string())])
            .inc();
    }

    /// A job's phase that ended with a move to `to`: its queue wait (dispatched) or
    /// its time to running, counted from its submission.
    pub fn job_phase(&self, to: JobState, series: &str, team: &str, since_submit: Duration) {
        let family = match to {
            JobState::Dispatched => &self.queue_wait,
            JobState::Running => &self.time_to_running,
            _ => return,
        };
        family
            .get_or_create(&vec![
                ("series", series.to_string()),
                ("team", team.to_string()),
            ])
            .observe(since_submit.as_secs_f64());
    }

    /// A policy decision.
    pub fn admission(&self, decision: &str, path: &'static str) {
        self.decisions
            .get_or_create(&vec![
                ("decision", decision.to_string()),
                ("path", path.to_string()),
            ])
            .inc();
    }

    /// The per-plugin outcome of one chain evaluation.
    pub fn plugin_calls(&self, result: &Result<ChainOutcome, ChainError>) {
        match result {
            Ok(outcome) => {
                for t in &outcome.trace {
                    self.plugin_calls_total
                        .get_or_create(&vec![("outcome", t.outcome.to_string())])
                        .inc();
                    self.plugin_calls
                        .get_or_create(&vec![
                            ("plugin", t.plugin.clone()),
                            ("version", t.version.clone()),
                            ("outcome", t.outcome.to_string()),
                        ])
                        .inc();
                    self.first_sight(&t.plugin, &t.version);
                    #[allow(clippy::cast_precision_loss)]
                    self.plugin_seconds
                        .get_or_create(&vec![
                            ("plugin", t.plugin.clone()),
                            ("version", t.version.clone()),
                        ])
                        .observe(t.elapsed_us as f64 / 1e6);
                }
            }
            Err(e) => {
                self.plugin_calls_total
                    .get_or_create(&vec![("outcome", "error".to_string())])
                    .inc();
                self.plugin_failures_total
                    .get_or_create(&vec![("cause", e.source.cause().to_string())])
                    .inc();
                self.plugin_calls
                    .get_or_create(&vec![
                        ("plugin", e.plugin.clone()),
                        ("version", e.version.clone()),
                        ("outcome", "error".to_string()),
                    ])
                    .inc();
                self.plugin_failures
                    .get_or_create(&vec![
                        ("plugin", e.plugin.clone()),
                        ("version", e.version.clone()),
                        ("cause", e.source.cause().to_string()),
                    ])
                    .inc();
            }
        }
    }

    /// A plugin version's failure series at 0, the first time it is called.
    fn first_sight(&self, plugin: &str, version: &str) {
        let pv = vec![
            ("plugin", plugin.to_string()),
            ("version", version.to_string()),
        ];
        if self.plugin_seconds.get(&pv).is_some() {
            return;
        }
        for cause in known::FAILURE_CAUSES {
            let mut labels = pv.clone();
            labels.push(("cause", cause.to_string()));
            self.plugin_failures.get_or_create(&labels).inc_by(0);
        }
    }

    /// A job state change.
    pub fn transition(&self, to: JobState) {
        self.transitions
            .get_or_create(&vec![("state", to.as_str().to_string())])
            .inc();
    }

    /// A dispatch's latency.
    pub fn dispatched(&self, took: Duration) {
        self.dispatch.observe(took.as_secs_f64());
    }

    /// A dispatcher pass's duration.
    pub fn dispatch_pass(&self, took: Duration) {
        self.pass.observe(took.as_secs_f64());
    }

    /// A dispatcher pass skipped: nothing it decides from moved since a settled one.
    pub fn dispatch_pass_quiet(&self) {
        self.quiet_passes.inc();
    }

    /// Decisions a pass reused instead of asking the chain again.
    pub fn dispatch_decisions_reused(&self, n: u64) {
        self.reused.inc_by(n);
    }

    /// A capsule stored (or found already stored).
    pub fn capsule(&self, deduplicated: bool) {
        let outcome = if deduplicated {
            "deduplicated"
        } else {
            "uploaded"
        };
        self.capsules
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .inc();
    }

    /// A capsule presence question and its answer.
    pub fn capsule_lookup(&self, present: bool) {
        let result = if present { "present" } else { "absent" };
        self.capsule_lookups
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }

    /// Bytes of an accepted upload chunk.
    pub fn upload_bytes(&self, n: u64) {
        self.upload_bytes.inc_by(n);
    }

    /// An upload session event.
    pub fn upload_session(&self, outcome: &'static str) {
        self.upload_sessions
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .inc();
    }

    /// A call to a playground server (`api`: the OpenAI path, `status`: its answer).
    pub fn playground_request(&self, api: &str, status: u16) {
        let api = match api {
            "models" | "chat/completions" | "completions" => api,
            _ => "other",
        };
        self.playground_requests
            .get_or_create(&vec![
                ("api", api.to_string()),
                ("status", format!("{}xx", status / 100)),
            ])
            .inc();
    }

    /// Tokens a playground server reported for one answer.
    pub fn playground_tokens(&self, prompt: u64, completion: u64) {
        for (kind, n) in [("prompt", prompt), ("completion", completion)] {
            self.playground_tokens
                .get_or_create(&vec![("kind", kind.to_string())])
                .inc_by(n);
        }
    }

    /// A playground ended.
    pub fn playground_end(&self, reason: &'static str) {
        self.playground_ends
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc();
    }

    /// A log archived.
    pub fn log_archived(&self) {
        self.logs.inc();
    }

    /// What object storage holds of `kind`, as a sweep measured it.
    pub fn storage_held(&self, kind: &str, objects: u64, bytes: u64) {
        let labels = vec![("kind", kind.to_string())];
        self.storage_objects
            .get_or_create(&labels)
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
        self.storage_bytes
            .get_or_create(&labels)
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A retention sweep finished.
    pub fn retention_swept(&self) {
        self.retention_sweeps.inc();
    }

    /// `n` of `kind` deleted by retention.
    pub fn retention_deleted(&self, kind: &'static str, n: u64) {
        if n > 0 {
            self.retention_deleted
                .get_or_create(&vec![("kind", kind.to_string())])
                .inc_by(n);
        }
    }

    /// This replica's role: leading in `epoch`, or following.
    pub fn leadership(&self, leader: bool, epoch: u64) {
        self.leader.set(i64::from(leader));
        self.leader_epoch
            .set(i64::try_from(epoch).unwrap_or(i64::MAX));
    }

    /// A side effect refused because its term was over.
    pub fn fenced(&self, action: &'static str) {
        self.fenced
            .get_or_create(&vec![("action", action.to_string())])
            .inc();
    }

    /// A running job given a preemption notice, freeing GPUs of `series`.
    pub fn preempted(&self, series: &str, reason: &'static str) {
        self.preemptions
            .get_or_create(&vec![
                ("series", series.to_string()),
                ("reason", reason.to_string()),
            ])
            .inc();
    }

    /// A preempted job released (`how`: what ended its notice), losing
    /// `lost_gpu_seconds` of work.
    pub fn preemption_released(&self, how: &'static str, lost_gpu_seconds: f64) {
        self.preemption_releases
            .get_or_create(&vec![("how", how.to_string())])
            .inc();
        if lost_gpu_seconds.is_finite() && lost_gpu_seconds > 0.0 {
            self.preemption_lost.inc_by(lost_gpu_seconds);
        }
    }

    /// A RayJob create or delete sent.
    pub fn rayjob_write(&self, verb: &'static str) {
        self.rayjob_writes
            .get_or_create(&vec![("verb", verb.to_string())])
            .inc();
    }

    /// A RayJob watch list reconciled with the store.
    pub fn rayjob_relisted(&self) {
        self.rayjob_relists.inc();
    }

    /// A periodic resync of the RayJobs finished (successful or not).
    pub fn rayjob_resynced(&self) {
        self.rayjob_resyncs.inc();
    }

    /// A submission refused by a team limit (`rate` or `queue`).
    pub fn submission_limited(&self, limit: &'static str) {
        self.limited
            .get_or_create(&vec![("limit", limit.to_string())])
            .inc();
    }

    /// The foreign RayJobs found by the last scan, per reason.
    pub fn foreign_rayjobs(&self, by_reason: &[(&'static str, u64)]) {
        for (reason, n) in by_reason {
            self.foreign
                .get_or_create(&vec![("reason", (*reason).to_string())])
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    /// The exposition text, with the scrape-time gauges set first; `detailed` adds the
    /// per-plugin and per-team series (authenticated scrapers only: they name teams).
    pub fn render(&self, scrape: &Scrape<'_>, detailed: bool) -> String {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.queue_depth.clear();
        for c in scrape.capacity {
            self.queue_depth
                .get_or_create(&vec![("series", c.series.clone())])
                .set(0);
        }
        for (series, n) in &scrape.queue_depth {
            self.queue_depth
                .get_or_create(&vec![("series", series.clone())])
                .set(gauge(*n));
        }
        self.team_queue_depth.clear();
        for (team, n) in &scrape.team_depth {
            self.team_queue_depth
                .get_or_create(&vec![("team", team.clone())])
                .set(gauge(*n));
        }
        self.capacity.clear();
        for c in scrape.capacity {
            for (state, n) in [
                ("total", c.total),
                ("allocatable", c.allocatable),
                ("in_use", c.in_use),
                ("free", c.free),
                ("blocked", c.blocked),
                ("tainted", c.tainted),
            ] {
                self.capacity
                    .get_or_create(&vec![
                        ("series", c.series.clone()),
                        ("state", state.to_string()),
                    ])
                    .set(i64::from(n));
            }
        }
        self.fleet_available.clear();
        for f in scrape.fleets {
            self.fleet_available
                .get_or_create(&vec![("fleet", f.name.clone())])
                .set(i64::from(f.available));
        }
        self.policy_version.set(gauge(scrape.policy_version));
        let mut out = String::new();
        let encoded = encode_registry(&mut out, &self.registry)
            .and_then(|()| {
                if detailed {
                    encode_registry(&mut out, &self.detailed)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| encode_eof(&mut out));
        if let Err(e) = encoded {
            tracing::error!("encoding metrics: {e}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_scrape_gauges() {
        let m = Metrics::new();
        m.admission("admit", "submit");
        m.admission("admit", "submit");
        m.transition(JobState::Dispatched);
        let scrape = Scrape {
            queue_depth: [("h100".to_string(), 3)].into(),
            policy_version: 7,
            ..Scrape::default()
        };
        let text = m.render(&scrape, false);
        assert!(
            text.contains(r#"forge_admission_decisions_total{decision="admit",path="submit"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"forge_job_transitions_total{state="dispatched"} 1"#));
        assert!(text.contains(r#"forge_queue_depth{series="h100"} 3"#));
        assert!(text.contains("forge_policy_version 7"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn plugin_names_only_in_the_detailed_view() {
        use forge_policy_host::{ChainOutcome, TraceEntry};
        let m = Metrics::new();
        m.plugin_calls(&Ok(ChainOutcome {
            decision: forge_policy_host::model::Decision::Queue {
                code: "quota.exceeded".into(),
                message: "m".into(),
            },
            digests: vec!["sha256:00".into()],
            reads_shares: false,
            trace: vec![TraceEntry {
                plugin: "team-secret/canary".into(),
                version: "1.0.0".into(),
                digest: "sha256:00".into(),
                outcome: "queue",
                decision: None,
                error: None,
                elapsed_us: 12,
                started_at: std::time::SystemTime::UNIX_EPOCH,
            }],
        }));
        let open = m.render(&Scrape::default(), false);
        assert!(!open.contains("team-secret"), "{open}");
        assert!(
            open.contains(r#"forge_policy_plugin_calls_total{outcome="queue"} 1"#),
            "{open}"
        );
        assert_eq!(open.matches("# EOF").count(), 1);
        let detailed = m.render(&Scrape::default(), true);
        assert!(
            detailed.contains(
                r#"forge_plugin_calls_total{plugin="team-secret/canary",version="1.0.0",outcome="queue"} 1"#
            ),
            "{detailed}"
        );
        assert!(detailed.ends_with("# EOF\n"));
        assert_eq!(detailed.matches("# EOF").count(), 1);
    }
}
