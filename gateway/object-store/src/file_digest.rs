//! SHA-256 of a file, streamed on the blocking pool: both stores verify that bytes
//! match the content address they are stored under.

use std::path::Path;

use crate::error::StoreError;

/// Hex SHA-256 of the file at `path` and its length in bytes.
pub(crate) async fn sha256_file(path: &Path) -> Result<(String, u64), StoreError> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || -> Result<(String, u64), StoreError> {
        use sha2::Digest;
        use std::io::Read;
        let mut f = std::fs::File::open(&path)?;
        let mut h = sha2::Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut n_total = 0u64;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            n_total += n as u64;
        }
        Ok((hex::encode(h.finalize()), n_total))
    })
    .await
    .map_err(|e| StoreError::Io(std::io::Error::other(e)))?
}
