//! `forge plugin new NAME`: a standalone plugin crate that builds anywhere. The SDK
//! and the WIT contract are not on crates.io, so they are vendored into `vendor/`
//! from the copies embedded in this binary (`build.rs` takes them from the
//! repository at build time, so the scaffold always matches the `forge` that made
//! it, and still builds when the repository is not around). The crate defines its own
//! `plugin` profile and is its own workspace; it comes with a sample policy and its
//! harness tests, sample settings and a sample request.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use forge_policy_host::model::{
    ClusterView, JobView, PolicyRequest, PoolView, SeriesCapacity, SeriesUsage, StorageMode,
};
use serde_json::json;

use crate::exit::{CliError, code};
use crate::output::{Format, emit};
use crate::progress::note;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/vendored.rs"));
}

const CARGO_TOML: &str = include_str!("../../../templates/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("../../../templates/lib.rs.tmpl");
const README: &str = include_str!("../../../templates/README.md.tmpl");
const GITIGNORE: &str = include_str!("../../../templates/gitignore.tmpl");

/// Arguments of `forge plugin new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The plugin's name (a crate name: lowercase letters, digits, `-`)
    pub name: String,
    /// Where to create it [default: ./NAME]
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

fn check_name(name: &str) -> Result<(), CliError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "plugin name {name:?}: use lowercase letters, digits and `-`, starting with a letter"
        )))
    }
}

/// `max-gpus` → `MaxGpus`.
fn type_name(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn render(template: &str, name: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{type}}", &type_name(name))
}

/// A sample request: one two-pool job of 16 GPUs on a small cluster.
pub fn sample_request(team: &str) -> PolicyRequest {
    let pool = |name: &str, nodes, gpus| PoolView {
        name: name.into(),
        nodes,
        gpus_per_node: gpus,
        series: Some("h100".into()),
    };
    let series = |name: &str, total, free| SeriesCapacity {
        series: name.into(),
        total,
        allocatable: total,
        in_use: total - free,
        blocked: 0,
        free,
        largest_free_block: free.min(8),
        nodes: total / 8,
    };
    PolicyRequest {
        job: JobView {
            id: "job-sample".into(),
            team: team.into(),
            name: "sample-train".into(),
            framework: "nemo-rl".into(),
            priority: 0,
            pools: vec![pool("train", 1, 8), pool("rollout", 1, 8)],
            storage: StorageMode::Shared,
            labels: BTreeMap::from([("project".into(), "demo".into())]),
        },
        cluster: ClusterView {
            gpu_node_label: "starforge/gpu-series".into(),
            series: vec![series("h100", 32, 16), series("h200", 16, 16)],
        },
        usage: vec![SeriesUsage {
            series: "h100".into(),
            running: 8,
            queued: 0,
        }],
    }
}

fn write(root: &Path, rel: &str, text: &str) -> Result<(), CliError> {
    let path = root.join(rel);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| CliError::local(dir.display(), e))?;
    }
    std::fs::write(&path, text).map_err(|e| CliError::local(path.display(), e))
}

/// `forge plugin new`.
pub fn new(args: &NewArgs, format: Format) -> Result<u8, CliError> {
    check_name(&args.name)?;
    let root = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if root.exists()
        && std::fs::read_dir(&root)
            .map_err(|e| CliError::local(root.display(), e))?
            .next()
            .is_some()
    {
        return Err(CliError::Usage(format!(
            "{} exists and is not empty",
            root.display()
        )));
    }
    let name = &args.name;
    let request = serde_json::to_string_pretty(&sample_request("my-team"))
        .map_err(|e| CliError::local("the sample request", e))?;
    let files = [
        ("Cargo.toml", render(CARGO_TOML, name)),
        ("src/lib.rs", render(LIB_RS, name)),
        ("README.md", render(README, name)),
        (".gitignore", GITIGNORE.to_string()),
        ("settings.json", "{\"max_gpus\": 16}\n".to_string()),
        ("request.json", request + "\n"),
    ];
    for (rel, text) in &files {
        write(&root, rel, text)?;
    }
    for (rel, text) in embedded::VENDORED {
        write(&root, rel, text)?;
    }
    let summary = json!({
        "name": name,
        "dir": root.display().to_string(),
        "files": files.len() + embedded::VENDORED.len(),
    });
    emit(format, &summary, || {
        note(format!("created plugin crate {name} in {}", root.display()));
        note(format!(
            "next: cd {} && cargo test && forge plugin build && forge plugin run target/plugins/components/{name}.wasm --request request.json --settings settings.json",
            root.display()
        ));
    })?;
    Ok(code::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_types_and_bad_names_are_refused() {
        assert_eq!(type_name("max-gpus"), "MaxGpus");
        assert_eq!(type_name("quota"), "Quota");
        assert!(check_name("max-gpus").is_ok());
        for bad in ["", "Max", "9lives", "a_b", "a-", "a/b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_sdk_and_every_contract_version_are_vendored() {
        let paths: Vec<&str> = embedded::VENDORED.iter().map(|(p, _)| *p).collect();
        assert!(paths.contains(&"vendor/forge-plugin-sdk/Cargo.toml"));
        assert!(paths.contains(&"vendor/forge-plugin-sdk/src/lib.rs"));
        assert!(paths.iter().any(|p| p.starts_with("vendor/wit/policy@")));
        let manifest = embedded::VENDORED[0].1;
        assert!(!manifest.contains("workspace = true"), "{manifest}");
    }
}
