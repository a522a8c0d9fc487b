//! Playgrounds: inference servers (vLLM) a team starts for a model on its GPUs,
//! called through the gateway and reclaimed when their TTL ends so the GPUs go back
//! to training.
//!
//! Files: `request` (the create body and its limits), `model_source` (a model id or a
//! path on the team's storage), `objects` (the pod, key Secret and NetworkPolicy),
//! `phase` (the pod's phase as users see it), `relay` (passing answers on as they
//! arrive, with the reclaim warning), `usage` (token counts of the answers), `service`
//! (the domain: create, read, list, delete, extend, call), `reclaim` (the leader's TTL
//! controller), `error`.

pub mod error;
pub mod model_source;
pub mod objects;
pub mod phase;
pub mod reclaim;
pub mod relay;
pub mod request;
pub mod service;
pub mod usage;
pub mod warning;

pub use error::PlaygroundError;
pub use request::CreatePlayground;
pub use service::{PlaygroundView, Playgrounds};
