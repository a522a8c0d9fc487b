//! Playgrounds: inference servers (vLLM) a team starts for a model on its GPUs,
//! called through the gateway and reclaimed when their TTL ends so the GPUs go back
//! to training.
//!
//! Files: `request` (the create body and its limits), `objects` (the pod, key Secret
//! and NetworkPolicy), `phase` (the pod's phase as users see it), `relay` (passing answers on as they arrive),
//! `service` (the domain: create, read, list, delete, extend, call), `reclaim` (the
//! leader's TTL controller), `error`.

pub mod error;
pub mod objects;
pub mod phase;
pub mod reclaim;
pub mod relay;
pub mod request;
pub mod service;

pub use error::PlaygroundError;
pub use request::CreatePlayground;
pub use service::{PlaygroundView, Playgrounds};
