//! rwo-guard
