//! Which file gives a capsule's Python packages: `requirements.txt` at the code root
//! when there is one ([`crate::requirements`]), else `pyproject.toml`'s dependencies
//! pinned from `uv.lock` ([`crate::pyproject`]), else none. Read back from the
//! assembled capsule, so what Ray installs is what the capsule holds.

use std::io::Read;
use std::path::Path;

use crate::assemble::TOP_DIR;
use crate::error::CapsuleError;
use crate::pyproject::{
    MAX_PYPROJECT_BYTES, MAX_UV_LOCK_BYTES, PYPROJECT_FILE, UV_LOCK_FILE, project_dependencies,
};
use crate::requirements::{MAX_REQUIREMENTS_BYTES, REQUIREMENTS_FILE, parse_requirements};

/// The packages of an assembled capsule's code: its `requirements.txt` when the code
/// root has one, else its `pyproject.toml`'s dependencies pinned from `uv.lock`
/// ([`crate::pyproject`]), else none.
pub fn read_requirements(capsule_zip: &Path) -> Result<Vec<String>, CapsuleError> {
    let file = std::fs::File::open(capsule_zip).map_err(|e| CapsuleError::io(capsule_zip, e))?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| CapsuleError::InvalidArchive(format!("re-reading the capsule: {e}")))?;
    let too_big = |file: &'static str, max: u64| match file {
        REQUIREMENTS_FILE => CapsuleError::Requirements {
            line: 0,
            reason: format!("is larger than {max} bytes"),
        },
        file => CapsuleError::PythonProject {
            file,
            reason: format!("is larger than {max} bytes"),
        },
    };
    let mut read = |name: &'static str, max: u64| -> Result<Option<String>, CapsuleError> {
        let entry = match zip.by_name(&format!("{TOP_DIR}/{name}")) {
            Ok(entry) => entry,
            Err(zip::result::ZipError::FileNotFound) => return Ok(None),
            Err(e) => {
                return Err(CapsuleError::InvalidArchive(format!(
                    "re-reading the capsule: {e}"
                )));
            }
        };
        if entry.size() > max {
            return Err(too_big(name, max));
        }
        let mut text = String::new();
        entry
            .take(max)
            .read_to_string(&mut text)
            .map_err(|_| match name {
                REQUIREMENTS_FILE => CapsuleError::Requirements {
                    line: 0,
                    reason: "is not UTF-8 text".into(),
                },
                file => CapsuleError::PythonProject {
                    file,
                    reason: "is not UTF-8 text".into(),
                },
            })?;
        Ok(Some(text))
    };
    if let Some(text) = read(REQUIREMENTS_FILE, MAX_REQUIREMENTS_BYTES)? {
        return parse_requirements(&text);
    }
    let Some(pyproject) = read(PYPROJECT_FILE, MAX_PYPROJECT_BYTES)? else {
        return Ok(Vec::new());
    };
    let lock = read(UV_LOCK_FILE, MAX_UV_LOCK_BYTES)?;
    project_dependencies(&pyproject, lock.as_deref())
}
