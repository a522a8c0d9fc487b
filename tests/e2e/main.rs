//! Forge end to end, one test binary: the real gateway app (the `dev` composition: the
//! Kubernetes + KubeRay emulator in process mode, the reference policy chain compiled
//! from source, a local or S3 object store) driven over HTTP, plus real gateway and
//! emulator processes for the crash tests. Helpers live in the `forge_tests` support
//! library (`tests/support/`).

mod api;
mod binaries;
mod capsule_links;
mod capsule_rayjob;
mod checkpoints;
mod cli;
mod cli_plugins;
mod cli_scaffold;
mod cli_upload;
mod console;
mod crash;
mod degrade;
mod fair_share;
mod faults;
mod fleets;
mod hostile;
mod isolation;
mod jobs;
mod latency;
mod limits;
mod observability;
mod playground;
mod pod_logs;
mod policy_admin;
mod policy_swap;
mod preemption;
mod preemption_failures;
mod queue_decisions;
mod real_ray;
mod realism;
mod replicas;
mod retention;
mod routes;
mod s3;
mod sdk_plugins;
