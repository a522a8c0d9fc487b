//! Forge gateway library.

pub mod config;
pub mod jobspec;
