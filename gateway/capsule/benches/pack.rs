//! Capsule packing benchmark (run with `cargo bench -p forge-capsule --bench pack`).
//!
//! 1. Throughput: build + hash a 1 GiB code tree with `assemble` vs
//!    `openssl dgst -sha256` over the same files, same run, page cache warm;
//!    best of 3 each. Target: assemble ≥ 80 % of openssl's MB/s.
//! 2. Peak RSS while packing a 2 GiB tree: this binary re-runs itself in
//!    `pack` mode under `/usr/bin/time -v`. Target ≤ 64 MiB.
//!
//! Tree: `SMALL_FILES` pseudo-source files (~8 KiB each, deflated) plus
//! incompressible pseudo-random "data/checkpoint" files of 16 MiB (stored).
//! Set `FORGE_BENCH_DIR` to choose where the trees go (default: temp dir), and
//! `FORGE_BENCH_RSS=0` to skip part 2. With `FORGE_BENCH_RAY_PYTHON` (a Python with
//! `ray` installed) part 1 also times Ray's own `working_dir` packager on the same tree
//! (`tests/bench/ray_pack.py`). `BENCH` lines carry the figures for
//! `tests/bench/run.sh`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use forge_capsule::{CapsuleLimits, CodeSource, assemble};

/// As the gateway and the CLI (see the gateway's `main.rs` for why).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MIB: u64 = 1 << 20;
const SMALL_FILES: usize = 2000;

fn gen_tree(root: &Path, total: u64) -> u64 {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ total;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let words = [
        "import", "torch", "def", "return", "self", "model", "loss", "batch", "for", "in", "range",
        "(", ")", ":", "\n    ",
    ];
    let mut written = 0u64;
    for i in 0..SMALL_FILES {
        let dir = root.join(format!("src/pkg{:02}", i % 40));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut s = String::with_capacity(9000);
        while s.len() < 8192 {
            s.push_str(words[(next() % words.len() as u64) as usize]);
            s.push(' ');
        }
        std::fs::write(dir.join(format!("mod_{i}.py")), &s).expect("write");
        written += s.len() as u64;
    }
    std::fs::create_dir_all(root.join("data")).expect("mkdir");
    let mut buf = vec![0u8; MIB as usize];
    let mut n = 0;
    while written < total {
        let mut f =
            std::fs::File::create(root.join(format!("data/shard_{n:04}.bin"))).expect("create");
        for _ in 0..16 {
            for c in buf.chunks_mut(8) {
                c.copy_from_slice(&next().to_le_bytes());
            }
            f.write_all(&buf).expect("write");
        }
        written += 16 * MIB;
        n += 1;
    }
    written
}

fn files_of(root: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() { stack.push(p) } else { v.push(p) }
        }
    }
    v.sort();
    v
}

fn openssl_secs(files: &[PathBuf]) -> f64 {
    let t = Instant::now();
    for chunk in files.chunks(500) {
        let o = Command::new("openssl")
            .args(["dgst", "-sha256"])
            .args(chunk)
            .output()
            .expect("run openssl");
        assert!(o.status.success());
    }
    t.elapsed().as_secs_f64()
}

fn pack(tree: &Path, out: &Path) -> forge_capsule::Capsule {
    assemble(
        CodeSource::Dir(tree.into()),
        b"{\"bench\":true}",
        None,
        &CapsuleLimits::default(),
        out,
    )
    .expect("assemble")
}

/// Ray's `working_dir` packager (hash + zip) on `tree`, best of 3; prints its `BENCH`
/// line with MiB/s.
fn ray_pack(python: &str, tree: &Path, out: &Path, bytes: u64) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/bench/ray_pack.py");
    let o = Command::new(python)
        .arg(&script)
        .arg(tree)
        .arg(out)
        .arg("3")
        .output()
        .expect("run ray_pack.py");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "ray_pack.py: {text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let secs: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("BENCH capsule.ray secs="))
        .and_then(|v| v.trim().parse().ok())
        .expect("ray_pack.py reports its time");
    print!(
        "{}",
        text.lines()
            .next()
            .map(|l| format!("{l}\n"))
            .unwrap_or_default()
    );
    println!(
        "BENCH capsule.ray mib_s={:.1} secs={secs:.3}",
        bytes as f64 / MIB as f64 / secs
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("pack") {
        let cap = pack(Path::new(&args[2]), Path::new(&args[3]));
        println!("packed {} bytes -> {}", cap.size, cap.digest);
        return;
    }
    let base = std::env::var("FORGE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let work = tempfile::tempdir_in(base).expect("bench dir");

    // 1. Throughput on 1 GiB.
    let tree = work.path().join("tree1g");
    let bytes = gen_tree(&tree, 1024 * MIB);
    let files = files_of(&tree);
    let out = work.path().join("out");
    openssl_secs(&files); // warm the page cache
    let mut best_ssl = f64::MAX;
    let mut best_cap = f64::MAX;
    let mut size = 0;
    for _ in 0..3 {
        best_ssl = best_ssl.min(openssl_secs(&files));
        let t = Instant::now();
        let cap = pack(&tree, &out);
        best_cap = best_cap.min(t.elapsed().as_secs_f64());
        size = cap.size;
        std::fs::remove_file(&cap.path).expect("rm capsule");
    }
    let mbs = |s: f64| bytes as f64 / MIB as f64 / s;
    println!(
        "tree: {} files, {:.0} MiB ({SMALL_FILES} small .py deflated, rest 16 MiB random shards stored)",
        files.len(),
        bytes as f64 / MIB as f64
    );
    println!(
        "openssl dgst -sha256: {:.3} s  {:.0} MiB/s (best of 3)",
        best_ssl,
        mbs(best_ssl)
    );
    println!(
        "assemble (zip + per-file blake3 + capsule sha256): {:.3} s  {:.0} MiB/s (best of 3), capsule {size} bytes",
        best_cap,
        mbs(best_cap)
    );
    println!(
        "ratio assemble/openssl: {:.0} % (target >= 80 %)",
        100.0 * best_ssl / best_cap
    );
    println!(
        "BENCH capsule.assemble mib_s={:.1} secs={best_cap:.3}",
        mbs(best_cap)
    );
    println!(
        "BENCH capsule.openssl mib_s={:.1} secs={best_ssl:.3}",
        mbs(best_ssl)
    );
    if let Ok(python) = std::env::var("FORGE_BENCH_RAY_PYTHON") {
        ray_pack(&python, &tree, &work.path().join("ray.zip"), bytes);
    }
    std::fs::remove_dir_all(&tree).expect("rm tree");
    if std::env::var("FORGE_BENCH_RSS").as_deref() == Ok("0") {
        return;
    }

    // 2. Peak RSS on 2 GiB.
    let tree = work.path().join("tree2g");
    let bytes = gen_tree(&tree, 2048 * MIB);
    let exe = std::env::current_exe().expect("current exe");
    let o = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(exe)
        .arg("pack")
        .arg(&tree)
        .arg(&out)
        .output()
        .expect("run /usr/bin/time");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let rss_kb: u64 = err
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .expect("time -v output");
    let wall = err
        .lines()
        .find(|l| l.contains("Elapsed (wall clock)"))
        .unwrap_or("")
        .trim()
        .to_owned();
    println!(
        "pack {:.0} MiB tree: peak RSS {:.1} MiB (target <= 64 MiB); {wall}",
        bytes as f64 / MIB as f64,
        rss_kb as f64 / 1024.0
    );
    println!(
        "BENCH capsule.rss mib={:.1} tree_mib={:.0}",
        rss_kb as f64 / 1024.0,
        bytes as f64 / MIB as f64
    );
}
