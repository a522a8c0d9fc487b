//! The policy host's integration tests, one binary: the reference policies compiled
//! from source to components and run in the real host (`host`), the sandbox's limits
//! against hostile components (`sandbox`), one rule written in Rust, Python and
//! TypeScript deciding alike in one engine and one chain (`languages`), contract
//! versions side by side (`versions`) and what 0.3.0 adds (`contract_0_3_0`), and warm instances: reuse, the trust boundary
//! between teams, retirement and the fresh-instance comparison (`warm`), and loading:
//! checks before compiling and the verified precompile cache (`precompile`).
//!
//! `FORGE_POLICY_ISOLATION=fresh` runs the whole binary with a fresh instance per call
//! (the default is `warm`); `tests/run.sh` runs it in both modes.

mod contract_0_3_0;
mod host;
mod languages;
mod precompile;
mod sandbox;
mod support;
mod versions;
mod warm;
