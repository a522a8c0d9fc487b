//! Hostile archives built byte by byte, for the archive-limit tests of
//! `forge-capsule` and the hostile-input end-to-end suite.

/// A "zip" that is a local-file-header signature followed by end records only: a Zip64
/// end-of-central-directory record declaring `entries` entries, its locator, and the
/// classic record deferring to Zip64. Nothing in it is a real entry; only a reader
/// that trusts the declared count would allocate for them.
pub fn zip64_entry_bomb(entries: u64) -> Vec<u8> {
    let mut raw = b"PK\x03\x04".to_vec();
    raw.resize(30, 0);
    let record_at = raw.len() as u64;
    raw.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
    raw.extend_from_slice(&44u64.to_le_bytes());
    raw.extend_from_slice(&[45, 0, 45, 0]);
    raw.extend_from_slice(&[0; 8]);
    raw.extend_from_slice(&entries.to_le_bytes());
    raw.extend_from_slice(&entries.to_le_bytes());
    raw.extend_from_slice(&(46 * entries).to_le_bytes());
    raw.extend_from_slice(&0u64.to_le_bytes());
    raw.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
    raw.extend_from_slice(&0u32.to_le_bytes());
    raw.extend_from_slice(&record_at.to_le_bytes());
    raw.extend_from_slice(&1u32.to_le_bytes());
    raw.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    raw.extend_from_slice(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    raw.extend_from_slice(&[0xff; 8]);
    raw.extend_from_slice(&[0, 0]);
    raw
}
