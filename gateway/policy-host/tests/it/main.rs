//! The policy host's integration tests, one binary: the reference policies compiled
//! from source to components and run in the real host (`host`), and the sandbox's
//! limits against hostile components (`sandbox`).

mod host;
mod sandbox;
mod support;
