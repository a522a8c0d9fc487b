//! What the API shows of a session ([`SessionView`]): computed from its store row
//! and the parts that arrived, on whichever replica is asked.

use serde::Serialize;

use super::parts::PartPlan;
use super::ranges::RangeSet;
use crate::domain::Digest;
use crate::store::{PartRecord, UploadRecord};

/// What the API shows of a session.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    pub id: String,
    pub digest: Digest,
    pub size: u64,
    /// Byte ranges present (`[start, end)`), merged.
    pub received: Vec<[u64; 2]>,
    pub received_bytes: u64,
    /// Byte ranges still to send (`[start, end)`).
    pub missing: Vec<[u64; 2]>,
    /// Every chunk is one part of this many bytes, at a multiple of it (the last one
    /// shorter).
    pub part_bytes: u64,
    /// Largest chunk one PUT may carry: one part.
    pub max_chunk_bytes: u64,
    /// When the session is removed if nothing more arrives (Unix ms).
    pub expires_at_ms: i64,
    /// Whether an open session for the same digest was found (a resumed upload).
    pub resumed: bool,
}

/// The session's parts plan.
pub fn plan(u: &UploadRecord) -> PartPlan {
    PartPlan {
        size: u.size,
        part_bytes: u.part_bytes,
    }
}

/// The byte ranges the recorded parts cover (a part whose length is not its range's
/// is not counted: it cannot be completed with).
pub fn received(u: &UploadRecord, parts: &[PartRecord]) -> RangeSet {
    let plan = plan(u);
    let mut set = RangeSet::default();
    for p in parts {
        let [start, end] = plan.range(p.number);
        if p.number >= 1 && p.number <= plan.count() && end - start == p.len {
            set.insert(start, end);
        }
    }
    set
}

/// The view of `u` with `parts` present.
pub fn view(u: &UploadRecord, parts: &[PartRecord], ttl_ms: i64, resumed: bool) -> SessionView {
    let got = received(u, parts);
    SessionView {
        id: u.id.clone(),
        digest: u.digest.clone(),
        size: u.size,
        received: got.ranges().to_vec(),
        received_bytes: got.covered(),
        missing: got.missing(u.size),
        part_bytes: u.part_bytes,
        max_chunk_bytes: u.part_bytes,
        expires_at_ms: u.touched_at_ms.saturating_add(ttl_ms),
        resumed,
    }
}
