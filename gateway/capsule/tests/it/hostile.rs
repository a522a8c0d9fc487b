//! Hostile code archives: each case is refused with a typed error of the uploader's
//! kind (`Rejected`, or `TooLarge` for the size limit) and nothing is left in the
//! output directory.

use std::path::PathBuf;

use crate::support::{TarEntry, dir_entries, tar_gz_raw, write_tree, zip_raw};
use forge_capsule::{CapsuleError, CapsuleErrorKind, CapsuleLimits, CodeSource, assemble};

struct Case {
    _tmp: tempfile::TempDir,
    out: PathBuf,
    input: PathBuf,
}

fn case(name: &str) -> Case {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("out");
    let input = tmp.path().join(name);
    Case {
        _tmp: tmp,
        out,
        input,
    }
}

fn refuse(c: &Case, source: CodeSource, limits: &CapsuleLimits) -> CapsuleError {
    let err =
        assemble(source, b"{}", None, limits, &c.out).expect_err("hostile input must be refused");
    let expected = if matches!(err, CapsuleError::TooLarge { .. }) {
        CapsuleErrorKind::TooLarge
    } else {
        CapsuleErrorKind::Rejected
    };
    assert_eq!(err.kind(), expected, "{err} must be the uploader's fault");
    assert!(err.code().starts_with("capsule."), "{}", err.code());
    assert_eq!(err.field(), "code");
    assert!(
        dir_entries(&c.out).is_empty(),
        "nothing stored, found {:?}",
        dir_entries(&c.out)
    );
    err
}

fn zip_case(entries: &[(&str, &[u8])]) -> (Case, CodeSource) {
    let c = case("code.zip");
    zip_raw(&c.input, entries);
    let s = CodeSource::Zip(c.input.clone());
    (c, s)
}

fn tar_case(entries: &[TarEntry<'_>]) -> (Case, CodeSource) {
    let c = case("code.tar.gz");
    tar_gz_raw(&c.input, entries);
    let s = CodeSource::TarGz(c.input.clone());
    (c, s)
}

#[test]
fn parent_traversal_in_zip() {
    let (c, s) = zip_case(&[("ok.py", b"1"), ("../evil.py", b"x")]);
    let e = refuse(&c, s, &CapsuleLimits::default());
    assert!(
        matches!(e, CapsuleError::UnsafePath { ref path, .. } if path == "../evil.py"),
        "{e:?}"
    );
}

#[test]
fn nested_traversal_in_tar() {
    let (c, s) = tar_case(&[TarEntry::File("a/b/../../../etc/cron.d/x", b"x")]);
    assert!(matches!(
        refuse(&c, s, &CapsuleLimits::default()),
        CapsuleError::UnsafePath { .. }
    ));
}

#[test]
fn absolute_path_in_zip() {
    let (c, s) = zip_case(&[("/etc/passwd", b"root")]);
    let e = refuse(&c, s, &CapsuleLimits::default());
    assert!(
        matches!(
            e,
            CapsuleError::UnsafePath {
                reason: "absolute path",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn windows_drive_and_backslash_tricks() {
    for name in ["C:/Windows/x.dll", "c:evil", "..\\..\\evil.py", "a\\b.py"] {
        let (c, s) = zip_case(&[(name, b"x")]);
        let e = refuse(&c, s, &CapsuleLimits::default());
        assert!(
            matches!(e, CapsuleError::UnsafePath { .. }),
            "{name}: {e:?}"
        );
    }
}

#[test]
fn symlink_leaving_the_tree_in_tar() {
    let (c, s) = tar_case(&[
        TarEntry::File("a.py", b"1"),
        TarEntry::Symlink("data/link", "../../etc/passwd"),
    ]);
    let e = refuse(&c, s, &CapsuleLimits::default());
    assert!(
        matches!(e, CapsuleError::SymlinkEscape { ref target, .. } if target == "../../etc/passwd"),
        "{e:?}"
    );
    let (c, s) = tar_case(&[TarEntry::Symlink("abs", "/etc/shadow")]);
    assert!(matches!(
        refuse(&c, s, &CapsuleLimits::default()),
        CapsuleError::SymlinkEscape { .. }
    ));
    let (c, s) = tar_case(&[TarEntry::HardLink("h", "../../etc/shadow")]);
    assert!(matches!(
        refuse(&c, s, &CapsuleLimits::default()),
        CapsuleError::SymlinkEscape { .. }
    ));
}

#[test]
fn symlink_leaving_the_tree_in_a_directory() {
    let c = case("dir");
    write_tree(&c.input, &[("a.py", b"1", false)]);
    std::os::unix::fs::symlink("/etc/passwd", c.input.join("pw")).expect("symlink");
    let e = refuse(
        &c,
        CodeSource::Dir(c.input.clone()),
        &CapsuleLimits::default(),
    );
    assert!(matches!(e, CapsuleError::SymlinkEscape { .. }), "{e:?}");
}

#[test]
fn internal_symlinks_are_refused_too() {
    let (c, s) = tar_case(&[
        TarEntry::File("a.py", b"1"),
        TarEntry::Symlink("b.py", "a.py"),
    ]);
    let e = refuse(&c, s, &CapsuleLimits::default());
    assert!(matches!(e, CapsuleError::LinkUnsupported { .. }), "{e:?}");
}

#[test]
fn device_and_fifo_files_in_tar() {
    let (c, s) = tar_case(&[TarEntry::Char("dev/sda")]);
    let e = refuse(&c, s, &CapsuleLimits::default());
    assert!(
        matches!(
            e,
            CapsuleError::SpecialFile {
                kind: "character device",
                ..
            }
        ),
        "{e:?}"
    );
    let (c, s) = tar_case(&[TarEntry::Fifo("pipe")]);
    assert!(matches!(
        refuse(&c, s, &CapsuleLimits::default()),
        CapsuleError::SpecialFile { kind: "fifo", .. }
    ));
}

#[test]
fn zip_bomb_ratio_limit() {
    // 64 MiB of zeros deflates ~1000x.
    let zeros = vec![0u8; 64 << 20];
    let (c, s) = zip_case(&[("ok.py", b"print(1)"), ("bomb.bin", &zeros)]);
    let e = refuse(&c, s, &CapsuleLimits::default());
    assert!(
        matches!(e, CapsuleError::CompressionRatio { ref path, limit: 200 } if path == "bomb.bin"),
        "{e:?}"
    );
    // The same stream-level check guards .tar.gz.
    let (c, s) = tar_case(&[TarEntry::File("bomb.bin", &zeros)]);
    assert!(matches!(
        refuse(&c, s, &CapsuleLimits::default()),
        CapsuleError::CompressionRatio { .. }
    ));
}

#[test]
fn total_size_limit_lists_largest_files() {
    let limits = CapsuleLimits {
        max_total_bytes: 1000,
        ..CapsuleLimits::default()
    };
    let big = vec![1u8; 700];
    let mid = vec![2u8; 400];
    let small = vec![3u8; 10];
    for kind in ["zip", "tar", "dir"] {
        let (c, s) = match kind {
            "zip" => zip_case(&[("small.txt", &small), ("big.bin", &big), ("mid.bin", &mid)]),
            "tar" => tar_case(&[
                TarEntry::File("small.txt", &small),
                TarEntry::File("big.bin", &big),
                TarEntry::File("mid.bin", &mid),
            ]),
            _ => {
                let c = case("dir");
                write_tree(
                    &c.input,
                    &[
                        ("small.txt", &small, false),
                        ("big.bin", &big, false),
                        ("mid.bin", &mid, false),
                    ],
                );
                let s = CodeSource::Dir(c.input.clone());
                (c, s)
            }
        };
        let e = refuse(&c, s, &limits);
        let CapsuleError::TooLarge { limit, largest, .. } = &e else {
            panic!("{kind}: {e:?}")
        };
        assert_eq!(*limit, 1000);
        assert_eq!(largest[0].path, "big.bin", "{kind}: {largest:?}");
        assert!(e.to_string().contains("big.bin"), "{e}");
        assert_eq!(e.kind(), CapsuleErrorKind::TooLarge);
    }
}

#[test]
fn size_limit_is_enforced_on_decoded_bytes_not_headers() {
    // A zip that lies about its uncompressed size (header says 16 bytes).
    let c = case("liar.zip");
    let data = vec![b'a'; 8192];
    zip_raw(&c.input, &[("x.txt", &data)]);
    let mut bytes = std::fs::read(&c.input).expect("read");
    // Patch the central directory's uncompressed size of the only entry.
    let cd = bytes
        .windows(4)
        .position(|w| w == [0x50, 0x4b, 0x01, 0x02])
        .expect("central directory");
    bytes[cd + 24..cd + 28].copy_from_slice(&16u32.to_le_bytes());
    let lh = 0;
    bytes[lh + 22..lh + 26].copy_from_slice(&16u32.to_le_bytes());
    std::fs::write(&c.input, &bytes).expect("write");
    let limits = CapsuleLimits {
        max_total_bytes: 4096,
        ..CapsuleLimits::default()
    };
    let err = assemble(
        CodeSource::Zip(c.input.clone()),
        b"{}",
        None,
        &limits,
        &c.out,
    )
    .expect_err("refused");
    // Either the decoder notices the lie or the byte budget trips: never accepted.
    assert!(
        matches!(
            err,
            CapsuleError::TooLarge { .. } | CapsuleError::InvalidArchive(_)
        ),
        "{err:?}"
    );
    assert!(dir_entries(&c.out).is_empty());
}

#[test]
fn too_many_files() {
    let limits = CapsuleLimits {
        max_files: 3,
        ..CapsuleLimits::default()
    };
    let (c, s) = zip_case(&[("a", b"1"), ("b", b"2"), ("c", b"3"), ("d", b"4")]);
    let e = refuse(&c, s, &limits);
    assert!(
        matches!(e, CapsuleError::TooManyFiles { limit: 3 }),
        "{e:?}"
    );
}

#[test]
fn duplicate_paths() {
    let (c, s) = tar_case(&[TarEntry::File("a.py", b"1"), TarEntry::File("a.py", b"2")]);
    assert!(matches!(
        refuse(&c, s, &CapsuleLimits::default()),
        CapsuleError::DuplicatePath { .. }
    ));
    // Two spellings of one path in a zip (the single top-level `src/` is
    // stripped like Ray does, so the duplicate is reported as `a.py`).
    let (c, s) = zip_case(&[("src/a.py", b"1"), ("src//./a.py", b"2")]);
    let e = refuse(&c, s, &CapsuleLimits::default());
    assert!(
        matches!(e, CapsuleError::DuplicatePath { ref path } if path == "a.py"),
        "{e:?}"
    );
}

#[test]
fn file_and_directory_with_one_name() {
    let (c, s) = zip_case(&[("a", b"1"), ("a/b", b"2")]);
    assert!(matches!(
        refuse(&c, s, &CapsuleLimits::default()),
        CapsuleError::PathConflict { .. }
    ));
}

#[test]
fn reserved_forge_directory() {
    let (c, s) = zip_case(&[("train.py", b"1"), (".forge/jobspec.json", b"{\"evil\":1}")]);
    assert!(matches!(
        refuse(&c, s, &CapsuleLimits::default()),
        CapsuleError::ReservedPath { .. }
    ));
}

#[test]
fn garbage_and_empty_archives() {
    let c = case("junk.zip");
    std::fs::write(&c.input, b"this is not an archive").expect("write");
    assert!(matches!(
        refuse(
            &c,
            CodeSource::Archive(c.input.clone()),
            &CapsuleLimits::default()
        ),
        CapsuleError::InvalidArchive(_)
    ));
    let (c, s) = zip_case(&[]);
    assert!(matches!(
        refuse(&c, s, &CapsuleLimits::default()),
        CapsuleError::Empty
    ));
}

/// A `.tar.gz` whose first entry is a GNU long name of `size` bytes, then a file.
fn long_name_tar(path: &std::path::Path, size: usize) {
    use std::io::Write;
    let mut raw = Vec::new();
    let mut long = tar::Header::new_gnu();
    long.set_path("././@LongLink").expect("path");
    long.set_entry_type(tar::EntryType::GNULongName);
    long.set_size(size as u64);
    long.set_cksum();
    raw.extend_from_slice(long.as_bytes());
    raw.extend(std::iter::repeat_n(b'a', size));
    raw.resize(raw.len().div_ceil(512) * 512, 0);
    let mut file = tar::Header::new_gnu();
    file.set_path("x.py").expect("path");
    file.set_size(1);
    file.set_mode(0o644);
    file.set_cksum();
    raw.extend_from_slice(file.as_bytes());
    raw.push(b'1');
    raw.resize(raw.len().div_ceil(512) * 512 + 1024, 0);
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).expect("create"),
        flate2::Compression::best(),
    );
    gz.write_all(&raw).expect("write");
    gz.finish().expect("finish");
}

#[test]
fn tar_long_name_is_bounded_before_it_is_read() {
    let c = case("code.tar.gz");
    long_name_tar(&c.input, 16 << 20);
    let e = refuse(
        &c,
        CodeSource::TarGz(c.input.clone()),
        &CapsuleLimits::default(),
    );
    assert!(
        matches!(
            e,
            CapsuleError::HeaderTooLarge {
                what: "GNU long name",
                size,
                limit: 65536
            } if size == 16 << 20
        ),
        "{e:?}"
    );
    assert_eq!(e.code(), "capsule.header_too_large");
}

#[test]
fn pax_headers_within_the_bound_still_work() {
    // A long path is written as a GNU long name below the bound: accepted.
    let tmp = tempfile::tempdir().expect("tmp");
    let input = tmp.path().join("code.tar.gz");
    let long_path = format!("{}/train.py", "d".repeat(150));
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        std::fs::File::create(&input).expect("create"),
        flate2::Compression::default(),
    ));
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o644);
    builder
        .append_data(&mut h, &long_path, &b"print"[..])
        .expect("append");
    builder.into_inner().expect("tar").finish().expect("gz");
    let cap = assemble(
        CodeSource::TarGz(input),
        b"{}",
        None,
        &CapsuleLimits::default(),
        &tmp.path().join("out"),
    )
    .expect("a long name within the bound is accepted");
    assert!(cap.digest.len() == 64);
}

#[test]
fn zip64_entry_count_is_checked_before_the_central_directory_is_read() {
    let c = case("code.zip");
    let raw = forge_testkit::archives::zip64_entry_bomb(50_000_000);
    std::fs::write(&c.input, &raw).expect("write");
    let e = refuse(
        &c,
        CodeSource::Zip(c.input.clone()),
        &CapsuleLimits::default(),
    );
    assert!(matches!(e, CapsuleError::TooManyFiles { .. }), "{e:?}");
}
