//! The capsule format's integration tests, one binary: assembly (determinism,
//! layout, manifest), hostile archives, and the HTTP-only mode's init container.
//! Shared helpers live in `support`.

mod assemble;
mod hostile;
mod init_container;
mod repack;
mod support;
