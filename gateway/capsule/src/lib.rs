//! Capsules: content-addressed code distribution.
