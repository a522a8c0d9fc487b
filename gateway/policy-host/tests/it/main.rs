//! The policy host's integration tests, one binary: the reference policies compiled
//! from source to components and run in the real host (`host`), the sandbox's limits
//! against hostile components (`sandbox`), one rule written in Rust, Python and
//! TypeScript deciding alike in one engine and one chain (`languages`), and contract
//! versions side by side (`versions`).

mod host;
mod languages;
mod sandbox;
mod support;
mod versions;
