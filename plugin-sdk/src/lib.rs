//! Forge plugin SDK.
