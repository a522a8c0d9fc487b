//! Forge gateway library.
