//! Re-packing a capsule someone else assembled (a client's `forge submit`), so the
//! gateway never stores bytes it would not have produced itself: the capsule's code
//! (everything under `capsule/` but `.forge/`) and its `capsule/.forge/jobspec.json`
//! go through [`assemble`] again — every hostile-input check included — and the
//! caller compares the result's digest with the uploaded one. Equal digests mean
//! the upload is byte for byte the capsule this packer builds from that code and
//! spec; a runner artifact, an extra file, another packer version or any tampering
//! changes the digest.

use std::io::Read;
use std::path::Path;

use crate::assemble::{Capsule, JOBSPEC_NAME, TOP_DIR, assemble};
use crate::error::CapsuleError;
use crate::limits::CapsuleLimits;
use crate::source::CodeSource;

/// Largest JobSpec a capsule may carry.
const MAX_JOBSPEC_BYTES: u64 = 1 << 20;

/// The JobSpec bytes a capsule carries (`capsule/.forge/jobspec.json`).
pub fn capsule_jobspec(capsule: &Path) -> Result<Vec<u8>, CapsuleError> {
    let file = std::fs::File::open(capsule).map_err(|e| CapsuleError::io(capsule, e))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| CapsuleError::InvalidArchive(format!("not a capsule: {e}")))?;
    let name = format!("{TOP_DIR}/.forge/{JOBSPEC_NAME}");
    let entry = archive
        .by_name(&name)
        .map_err(|_| CapsuleError::InvalidArchive(format!("not a capsule: it has no {name}")))?;
    let mut bytes = Vec::new();
    entry
        .take(MAX_JOBSPEC_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CapsuleError::InvalidArchive(format!("{name}: {e}")))?;
    if bytes.len() as u64 > MAX_JOBSPEC_BYTES {
        return Err(CapsuleError::InvalidArchive(format!(
            "{name} is larger than {MAX_JOBSPEC_BYTES} bytes"
        )));
    }
    Ok(bytes)
}

/// Packs the code and JobSpec of the capsule at `capsule` again into
/// `out_dir/<sha256>.zip` (blocking). Compare the result's digest with the
/// capsule's own to know whether it is canonical.
pub fn repack(
    capsule: &Path,
    limits: &CapsuleLimits,
    out_dir: &Path,
) -> Result<Capsule, CapsuleError> {
    let jobspec = capsule_jobspec(capsule)?;
    assemble(
        CodeSource::Capsule(capsule.to_owned()),
        &jobspec,
        None,
        limits,
        out_dir,
    )
}
