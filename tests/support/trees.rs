//! Code trees for upload tests: `files` files of `mib` MiB of pseudo-random
//! (incompressible) bytes under `data/`, so the packed capsule is as large as the tree,
//! and a `job.py` that prints their total size.

use std::path::Path;

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
