//! The record of one committed change ([`WatchEvent`]) that every write appends to
//! the history window and broadcasts to the watches.

use std::sync::Arc;

use serde_json::Value;

use crate::resources::ResId;

/// Type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventKind {
    /// Wire name (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub struct WatchEvent {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Resource type.
    pub res: ResId,
    /// Event type.
    pub kind: EventKind,
    /// The object after the change (the last state for deletions).
    pub object: Arc<Value>,
    /// The object before the change (for selector transitions).
    pub old: Option<Arc<Value>>,
}
