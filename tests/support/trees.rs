//! Code trees for upload tests: `files` files of `mib` MiB of pseudo-random
//! (incompressible) bytes under `data/`, so the packed capsule is as large as the tree,
//! and a `job.py` that prints their total size; and a job spec running it.

use std::path::{Path, PathBuf};

/// A large tree (`<dir>/code`) and a spec running its `job.py` (`<dir>/big.yaml`).
pub struct BigJob {
    pub code: PathBuf,
    pub spec: PathBuf,
}

impl BigJob {
    /// Writes both under `dir`.
    pub fn write(dir: &Path, files: usize, mib: usize) -> BigJob {
        let code = dir.join("code");
        big_tree(&code, files, mib);
        let spec = dir.join("big.yaml");
        std::fs::write(
            &spec,
            "name: big\nframework: nemo-rl\nentrypoint: python3 job.py\npools:\n  - name: train\n    nodes: 1\n    gpusPerNode: 1\n",
        )
        .expect("spec");
        BigJob { code, spec }
    }

    /// `forge submit <code> -f <spec> --chunk-mib <chunk_mib>`.
    pub fn submit_args(&self, chunk_mib: u32) -> Vec<String> {
        vec![
            "submit".into(),
            self.code.to_str().expect("utf-8").into(),
            "-f".into(),
            self.spec.to_str().expect("utf-8").into(),
            "--chunk-mib".into(),
            chunk_mib.to_string(),
        ]
    }
}

/// Writes the tree under `dir`.
pub fn big_tree(dir: &Path, files: usize, mib: usize) {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut buf = vec![0u8; mib << 20];
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    for i in 0..files {
        for chunk in buf.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        std::fs::write(dir.join(format!("data/shard-{i}.bin")), &buf).expect("shard");
    }
    std::fs::write(
        dir.join("job.py"),
        "import os\nprint(sum(os.path.getsize('data/' + f) for f in os.listdir('data')))\n",
    )
    .expect("job.py");
}
