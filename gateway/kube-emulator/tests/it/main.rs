//! The emulator's integration tests, one binary: each module drives a
//! `forge_kubesim::Sim` on port 0 only through the real `kube` client (or
//! `/usr/bin/kubectl`), like the gateway does. Shared helpers live in `support`,
//! fixtures in `tests/fixtures/`.

mod api;
mod auth;
mod inference;
mod init_memory;
mod kubectl;
mod leases;
mod network_policies;
mod operator;
mod pod_env;
mod scheduler;
mod support;
mod volumes;
