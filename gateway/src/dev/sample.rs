//! The sample job `forge-gateway dev` writes into its data directory and prints a
//! submit command for: a JobSpec and a code archive whose `train.py` prints a few steps.

use std::path::PathBuf;

use anyhow::Context;

/// The sample job `dev` prints a submit command for.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The JobSpec (JSON).
    pub spec: PathBuf,
    /// The code archive (`.zip` with `train.py`).
    pub code: PathBuf,
}

const SAMPLE_TRAIN_PY: &str = r#"import os, time
print("forge sample: starting on", os.environ.get("FORGE_JOB_ID", "?"), flush=True)
for step in range(1, 4):
    print(f"step {step}/3 loss={1.0 / step:.3f}", flush=True)
    time.sleep(0.2)
print("forge sample: done", flush=True)
"#;

/// Write the sample job (spec + code zip) into `<data dir>/sample`.
pub fn write_sample(data_dir: &std::path::Path) -> anyhow::Result<Sample> {
    let dir = data_dir.join("sample");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let spec = dir.join("job.json");
    let doc = serde_json::json!({
        "name": "sample",
        "framework": "nemo-rl",
        "entrypoint": "python3 train.py",
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8}]
    });
    std::fs::write(&spec, serde_json::to_vec_pretty(&doc)?)
        .with_context(|| format!("writing {}", spec.display()))?;
    let code = dir.join("code.zip");
    let file =
        std::fs::File::create(&code).with_context(|| format!("creating {}", code.display()))?;
    let mut zip = zip::ZipWriter::new(file);
    zip.start_file("train.py", zip::write::SimpleFileOptions::default())?;
    std::io::Write::write_all(&mut zip, SAMPLE_TRAIN_PY.as_bytes())?;
    zip.finish()?;
    Ok(Sample { spec, code })
}
