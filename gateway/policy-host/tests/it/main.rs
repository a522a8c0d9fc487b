//! The policy host's integration tests, one binary: the reference policies compiled
//! from source to components and run in the real host (`host`), and the sandbox's
//! limits against hostile components (`sandbox`), and contract versions side by side
//! (`versions`).

mod host;
mod sandbox;
mod support;
mod versions;
