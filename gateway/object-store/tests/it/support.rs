//! Shared helpers of the object-store tests: the in-process S3 server (from
//! `forge-testkit`, shared with the workspace's end-to-end tests) and a store config
//! for it, and capsule-like files with their content address. The stores only see
//! "a file whose SHA-256 is `digest`", so the tests need no real capsule.

use std::path::{Path, PathBuf};

use forge_object_store::S3Config;
use sha2::{Digest, Sha256};

pub use forge_testkit::s3::S3Server;

/// The S3 store settings for `srv` (defaults for everything else).
pub fn s3_config(srv: &S3Server) -> S3Config {
    S3Config::new(&srv.endpoint, &srv.bucket, &srv.access_key, &srv.secret_key)
}

/// A file on disk and the content address it is stored under.
pub struct Blob {
    pub path: PathBuf,
    /// Hex SHA-256 of the bytes.
    pub digest: String,
    pub size: u64,
}

/// Write `bytes` to `dir/name`.
pub fn blob(dir: &Path, name: &str, bytes: &[u8]) -> Blob {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write blob");
    Blob {
        path,
        digest: hex::encode(Sha256::digest(bytes)),
        size: bytes.len() as u64,
    }
}

/// `mib` MiB of incompressible pseudo-random bytes (xorshift) written to `dir/name`
/// 1 MiB at a time, hashed as they are written.
pub fn incompressible_blob(dir: &Path, name: &str, mib: u64) -> Blob {
    use std::io::Write;
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("create blob");
    let mut sha = Sha256::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for chunk in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&buf).expect("write blob");
        sha.update(&buf);
    }
    Blob {
        path,
        digest: hex::encode(sha.finalize()),
        size: mib << 20,
    }
}

/// A small zip-like file standing in for a capsule.
pub fn small_capsule(dir: &Path) -> Blob {
    blob(
        dir,
        "capsule.zip",
        b"PK\x03\x04 capsule/train.py print('hi')\n",
    )
}
