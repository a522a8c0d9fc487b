//! Shared helpers of the end-to-end tests (`e2e/`) and, until they move into the
//! emulator crate, the emulator's tests: a gateway on a port-0 listener, job and policy
//! API clients, a headless Chromium over WebDriver, the policy plugins built from
//! source, emulator helpers, real emulator and gateway processes (`procs`) for the
//! crash and replica tests, real Ray (`ray`) and large code trees (`trees`).

pub mod browser;
pub mod cli;
pub mod gateway;
pub mod jobs;
pub mod kubesim;
pub mod otlp;
pub mod plugins;
pub mod policy;
pub mod procs;
pub mod ray;
pub mod sse;
pub mod trees;
pub mod wait;
