//! Capsule assembly: determinism (order, mtimes, container format), layout
//! Ray can use (single top-level folder, code at its root, `.forge/` files),
//! the manifest, and that Ray-style unpacking runs the entrypoint.

use std::io::Read;
use std::path::Path;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use crate::support::{TarEntry, tar_gz_raw, write_tree, zip_raw};
use forge_capsule::{CapsuleError, CapsuleErrorKind, CapsuleLimits, CodeSource, assemble};
use sha2::{Digest, Sha256};

const JOBSPEC: &[u8] = br#"{"name":"demo","entrypoint":"python train.py"}"#;

/// 3 MiB of incompressible pseudo-random bytes (stored, and no zip-bomb ratio).
static BLOB: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..3 * 1024 * 1024 / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
});

fn files() -> Vec<(&'static str, &'static [u8], bool)> {
    vec![
        ("train.py", b"import os, json\nprint('trained', json.load(open('.forge/jobspec.json'))['name'], os.path.exists('lib/util.py'))\n", false),
        ("lib/util.py", b"X = 1\n", false),
        ("scripts/run.sh", b"#!/bin/sh\necho hi\n", true),
        ("data/blob.bin", BLOB.as_slice(), false),
        ("README.md", b"# demo\n", false),
    ]
}

/// [`files`] with [`JOBSPEC`] assembled from a directory; the capsule's directory is
/// removed when the second value is dropped.
fn assemble_files() -> (forge_capsule::Capsule, tempfile::TempDir) {
    let src = tempfile::tempdir().expect("tmp");
    let out = tempfile::tempdir().expect("tmp");
    write_tree(src.path(), &files());
    let cap = assemble(
        CodeSource::Dir(src.path().into()),
        JOBSPEC,
        None,
        &CapsuleLimits::default(),
        out.path(),
    )
    .expect("assemble");
    (cap, out)
}

fn set_mtime(path: &Path, t: SystemTime) {
    let f = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open");
    f.set_modified(t).expect("set mtime");
}

#[test]
fn same_inputs_other_order_and_mtimes_give_same_digest() {
    let limits = CapsuleLimits::default();
    let a = tempfile::tempdir().expect("tmp");
    let b = tempfile::tempdir().expect("tmp");
    let out = tempfile::tempdir().expect("tmp");
    let fs = files();
    write_tree(a.path(), &fs);
    let mut rev = fs.clone();
    rev.reverse();
    write_tree(b.path(), &rev);
    for (i, (p, _, _)) in fs.iter().enumerate() {
        set_mtime(
            &b.path().join(p),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + i as u64 * 7777),
        );
    }
    let ca = assemble(
        CodeSource::Dir(a.path().into()),
        JOBSPEC,
        None,
        &limits,
        out.path(),
    )
    .expect("assemble a");
    let cb = assemble(
        CodeSource::Dir(b.path().into()),
        JOBSPEC,
        None,
        &limits,
        out.path(),
    )
    .expect("assemble b");
    assert_eq!(ca.digest, cb.digest);
    let bytes = std::fs::read(&ca.path).expect("read capsule");
    assert_eq!(
        hex::encode(Sha256::digest(&bytes)),
        ca.digest,
        "digest is the SHA-256 of the file bytes"
    );
    assert_eq!(bytes.len() as u64, ca.size);
    assert_eq!(ca.path, out.path().join(format!("{}.zip", ca.digest)));

    // Same code as a zip with a single top-level folder and as a .tar.gz: the
    // folder is stripped like Ray does, so the capsule is identical.
    let arch = tempfile::tempdir().expect("tmp");
    let zip_path = arch.path().join("code.zip");
    let entries: Vec<(String, &[u8])> = rev
        .iter()
        .map(|(p, d, _)| (format!("myproj/{p}"), *d))
        .collect();
    let refs: Vec<(&str, &[u8])> = entries.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    zip_raw(&zip_path, &refs);
    let tgz = arch.path().join("code.tar.gz");
    let tentries: Vec<TarEntry<'_>> = entries.iter().map(|(p, d)| TarEntry::File(p, d)).collect();
    tar_gz_raw(&tgz, &tentries);
    // Executable bits do not survive zip_raw/tar_gz_raw (0644); compare with
    // a tree without exec bits.
    let c = tempfile::tempdir().expect("tmp");
    let plain: Vec<_> = fs.iter().map(|(p, d, _)| (*p, *d, false)).collect();
    write_tree(c.path(), &plain);
    let cc = assemble(
        CodeSource::Dir(c.path().into()),
        JOBSPEC,
        None,
        &limits,
        out.path(),
    )
    .expect("dir");
    let cz = assemble(
        CodeSource::Archive(zip_path),
        JOBSPEC,
        None,
        &limits,
        out.path(),
    )
    .expect("zip");
    let ct = assemble(CodeSource::Archive(tgz), JOBSPEC, None, &limits, out.path()).expect("tgz");
    assert_eq!(cz.digest, cc.digest);
    assert_eq!(ct.digest, cc.digest);
    assert_ne!(cc.digest, ca.digest, "the exec bit is part of the content");

    // Another JobSpec is another capsule.
    let other = assemble(
        CodeSource::Dir(a.path().into()),
        b"{}",
        None,
        &limits,
        out.path(),
    )
    .expect("assemble");
    assert_ne!(other.digest, ca.digest);
}

#[test]
fn layout_manifest_and_fixed_metadata() {
    let src = tempfile::tempdir().expect("tmp");
    let out = tempfile::tempdir().expect("tmp");
    write_tree(src.path(), &files());
    let rdir = tempfile::tempdir().expect("tmp");
    let runner = rdir.path().join("runner.pex");
    std::fs::write(&runner, b"#!/usr/bin/env python3\nprint('runner')\n").expect("runner");
    let cap = assemble(
        CodeSource::Dir(src.path().into()),
        JOBSPEC,
        Some(&runner),
        &CapsuleLimits::default(),
        out.path(),
    )
    .expect("assemble");

    let mut z = zip::ZipArchive::new(std::fs::File::open(&cap.path).expect("open")).expect("zip");
    let names: Vec<String> = (0..z.len())
        .map(|i| z.by_index_raw(i).expect("entry").name().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "capsule/README.md",
            "capsule/data/blob.bin",
            "capsule/lib/util.py",
            "capsule/scripts/run.sh",
            "capsule/train.py",
            "capsule/.forge/jobspec.json",
            "capsule/.forge/runner.pex",
            "capsule/.forge/forge-manifest.json",
        ]
    );
    for i in 0..z.len() {
        let f = z.by_index_raw(i).expect("entry");
        let t = f.last_modified().expect("timestamp");
        assert_eq!(
            (t.year(), t.month(), t.day(), t.hour(), t.minute()),
            (1980, 1, 1, 0, 0),
            "{}",
            f.name()
        );
        let mode = f.unix_mode().expect("unix mode") & 0o777;
        let exec = f.name().ends_with("run.sh") || f.name().ends_with("runner.pex");
        assert_eq!(mode, if exec { 0o755 } else { 0o644 }, "{}", f.name());
        assert!(
            f.extra_data().is_none_or(|e| e.is_empty()),
            "no extra fields in {}",
            f.name()
        );
    }
    // The big binary is stored, small text deflated.
    assert_eq!(
        z.by_name("capsule/data/blob.bin")
            .expect("blob")
            .compression(),
        zip::CompressionMethod::Stored
    );
    assert_eq!(
        z.by_name("capsule/train.py").expect("py").compression(),
        zip::CompressionMethod::Deflated
    );

    let mut js = Vec::new();
    z.by_name("capsule/.forge/jobspec.json")
        .expect("jobspec")
        .read_to_end(&mut js)
        .expect("read");
    assert_eq!(js, JOBSPEC);
    let mut m = String::new();
    z.by_name("capsule/.forge/forge-manifest.json")
        .expect("manifest")
        .read_to_string(&mut m)
        .expect("read");
    let manifest: forge_capsule::manifest::Manifest =
        serde_json::from_str(&m).expect("manifest json");
    assert_eq!(manifest, cap.manifest);
    assert_eq!(manifest.format_version, 2);
    assert_eq!(manifest.files.len(), 5);
    for f in &manifest.files {
        let data = std::fs::read(src.path().join(&f.path)).expect("source file");
        assert_eq!(f.size, data.len() as u64);
        assert_eq!(
            f.blake3,
            blake3::hash(&data).to_hex().as_str(),
            "{}",
            f.path
        );
    }
    assert_eq!(
        manifest.jobspec.sha256,
        hex::encode(Sha256::digest(JOBSPEC))
    );
    let runner = manifest.runner.expect("runner recorded");
    assert_eq!(runner.file.path, ".forge/runner.pex");
    assert!(runner.version.starts_with("sha256:"));
    assert_eq!(
        manifest.code_bytes,
        files().iter().map(|(_, d, _)| d.len() as u64).sum::<u64>()
    );
}

/// Unpack like Ray (Python zipfile, strip the single top-level folder) and run
/// the entrypoint from the working directory.
#[test]
fn ray_style_unpack_runs_the_entrypoint() {
    let (cap, _out) = assemble_files();
    let unpack = tempfile::tempdir().expect("tmp");
    let script = r#"
import sys, zipfile, os, shutil, subprocess
zf, dest = sys.argv[1], sys.argv[2]
names = zipfile.ZipFile(zf).namelist()
tops = {n.split('/')[0] for n in names if n.split('/')[0] != '__MACOSX'}
assert all('/' in n for n in names) and len(tops) == 1, names
zipfile.ZipFile(zf).extractall(dest)
top = os.path.join(dest, tops.pop())
for e in os.listdir(top): shutil.move(os.path.join(top, e), dest)
os.rmdir(top)
sys.exit(subprocess.call([sys.executable, 'train.py'], cwd=dest))
"#;
    let o = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&cap.path)
        .arg(unpack.path())
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "trained demo True"
    );
}

/// A server-side failure (the output directory cannot be created) is `Internal`, not
/// the uploader's fault, and has no request field.
#[test]
fn unwritable_output_is_an_internal_error() {
    let src = tempfile::tempdir().expect("tmp");
    write_tree(src.path(), &files());
    let blocker = src.path().join("not-a-dir");
    std::fs::write(&blocker, b"a file").expect("write");
    let err = assemble(
        CodeSource::Dir(src.path().into()),
        JOBSPEC,
        None,
        &CapsuleLimits::default(),
        &blocker.join("out"),
    )
    .expect_err("output under a regular file");
    assert!(matches!(err, CapsuleError::Io { .. }), "{err:?}");
    assert_eq!(err.kind(), CapsuleErrorKind::Internal);
    assert_eq!((err.code(), err.field()), ("capsule.io", ""));
}

/// The bytes are part of the format. The address of the same code and spec must not move
/// with a dependency update (the zip writer, the deflate backend and its level, the JSON
/// of the manifest): clients and gateways of one release would stop agreeing on repacked
/// uploads, and every stored capsule would be uploaded again. A failure here is a format
/// change: bump `FORMAT_VERSION`, say why in its doc, and update the digest.
#[test]
fn the_bytes_of_a_known_tree_are_pinned() {
    let (cap, _out) = assemble_files();
    assert_eq!(
        (cap.digest.as_str(), cap.size),
        (
            "e1f7d233a9e2fea97d85390021de28672e0a21ad94e4a769b6958a653ec4d848",
            3_147_303
        ),
        "capsule format {}, packer {}",
        cap.manifest.format_version,
        cap.manifest.packer
    );
}
