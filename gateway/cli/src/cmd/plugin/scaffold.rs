//! `forge plugin new NAME [--lang rust|python|ts]`: a standalone plugin that builds
//! anywhere. The SDK and the WIT contract are not on crates.io, PyPI or npm, so they
//! are vendored into `vendor/` from the copies embedded in this binary (`build.rs`
//! takes them from the repository at build time, so the scaffold always matches the
//! `forge` that made it, and still builds when the repository is not around).
//!
//! - Rust: a crate (`vendor/forge-plugin-sdk`, `vendor/wit`) that defines its own
//!   `plugin` profile and is its own workspace.
//! - Python / TypeScript: `forge-plugin.toml` and the policy module, with the SDK in
//!   the repository's layout (`vendor/plugin-sdk/{sdk.toml,python|js}`, `vendor/wit`),
//!   which `forge plugin build|test` use for a plugin that carries it; its pinned
//!   toolchain installs into `vendor/` with `vendor/plugin-sdk/install-toolchains.sh`
//!   (or `FORGE_PYTHON_VENV` / `FORGE_NODE_MODULES` name a shared installation).
//!
//! Every scaffold comes with the same sample policy (refuse jobs asking for more GPUs
//! than `max_gpus`) and its harness tests, sample settings and a sample request.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use forge_plugin_build::Lang;
use forge_policy_host::model::{
    ClusterView, JobView, PolicyRequest, PoolView, SeriesCapacity, SeriesUsage, StorageMode,
    WorkloadKind,
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

/// Python and TypeScript templates: (path in the scaffold, template); `{{module}}` in
/// a path is the Python module name, `{{name}}` the plugin's.
const PYTHON: &[(&str, &str)] = &[
    (
        "forge-plugin.toml",
        include_str!("../../../templates/python/forge-plugin.toml.tmpl"),
    ),
    (
        "{{module}}.py",
        include_str!("../../../templates/python/policy.py.tmpl"),
    ),
    (
        "test_{{module}}.py",
        include_str!("../../../templates/python/test_policy.py.tmpl"),
    ),
    (
        "README.md",
        include_str!("../../../templates/python/README.md.tmpl"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/python/gitignore.tmpl"),
    ),
];
const TS: &[(&str, &str)] = &[
    (
        "forge-plugin.toml",
        include_str!("../../../templates/ts/forge-plugin.toml.tmpl"),
    ),
    (
        "{{name}}.ts",
        include_str!("../../../templates/ts/policy.ts.tmpl"),
    ),
    (
        "{{name}}.test.ts",
        include_str!("../../../templates/ts/policy.test.ts.tmpl"),
    ),
    (
        "tsconfig.json",
        include_str!("../../../templates/ts/tsconfig.json.tmpl"),
    ),
    (
        "README.md",
        include_str!("../../../templates/ts/README.md.tmpl"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/ts/gitignore.tmpl"),
    ),
];

/// Python module names the SDK and the component build already use, and Python's
/// keywords (not importable).
const TAKEN_MODULES: &[&str] = &[
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "forge_policy",
    "forge_plugin_entry",
    "wit_world",
    "componentize_py_types",
    "componentize_py_runtime",
    "dacite",
    "pytest",
];

/// Arguments of `forge plugin new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The plugin's name (lowercase letters, digits, `-`; the component is NAME.wasm)
    pub name: String,
    /// The language: rust, python or ts
    #[arg(long, value_name = "LANG", default_value = "rust")]
    pub lang: Lang,
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

/// `max-gpus` → `max_gpus`.
fn module_name(name: &str) -> String {
    name.replace('-', "_")
}

fn render(template: &str, name: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{type}}", &type_name(name))
        .replace("{{module}}", &module_name(name))
}

/// The files of a scaffold in `lang` (sample settings and request aside), the
/// vendored ones included.
fn files(lang: Lang, name: &str) -> Vec<(String, String)> {
    let rendered = |t: &[(&str, &str)]| -> Vec<(String, String)> {
        t.iter()
            .map(|(path, text)| (render(path, name), render(text, name)))
            .collect()
    };
    let vendored = |v: &[&[(&str, &str)]]| -> Vec<(String, String)> {
        v.iter()
            .flat_map(|files| files.iter())
            .map(|(path, text)| ((*path).to_string(), (*text).to_string()))
            .collect()
    };
    match lang {
        Lang::Rust => {
            let mut out = rendered(&[
                ("Cargo.toml", CARGO_TOML),
                ("src/lib.rs", LIB_RS),
                ("README.md", README),
                (".gitignore", GITIGNORE),
            ]);
            out.extend(vendored(&[embedded::VENDORED]));
            out
        }
        Lang::Python => {
            let mut out = rendered(PYTHON);
            out.extend(vendored(&[
                embedded::VENDORED_SDK,
                embedded::VENDORED_PYTHON,
            ]));
            out
        }
        Lang::Ts => {
            let mut out = rendered(TS);
            out.extend(vendored(&[embedded::VENDORED_SDK, embedded::VENDORED_TS]));
            out
        }
    }
}

/// The command lines of the loop, after `cd DIR`.
fn next_steps(lang: Lang, name: &str) -> String {
    let run = format!(
        "forge plugin build && forge plugin run target/plugins/components/{name}.wasm --request request.json --settings settings.json"
    );
    match lang {
        Lang::Rust => format!("cargo test && {run}"),
        Lang::Python | Lang::Ts => format!(
            "bash vendor/plugin-sdk/install-toolchains.sh {lang} && forge plugin test && {run}"
        ),
    }
}

/// A sample request: one two-pool job of 16 GPUs on a small cluster.
pub fn sample_request(team: &str) -> PolicyRequest {
    let pool = |name: &str, nodes, gpus| PoolView {
        name: name.into(),
        nodes,
        gpus_per_node: gpus,
        series: Some("h100".into()),
        cpu_millis: None,
        memory_bytes: None,
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
        tainted: 0,
        taints: Vec::new(),
        default_cpu_millis: 8_000,
        default_memory_bytes: 32 << 30,
    };
    PolicyRequest {
        shares: Default::default(),
        job: JobView {
            id: "job-sample".into(),
            team: team.into(),
            name: "sample-train".into(),
            framework: "nemo-rl".into(),
            kind: WorkloadKind::Training,
            priority: 0,
            pools: vec![pool("train", 1, 8), pool("rollout", 1, 8)],
            storage: StorageMode::Shared,
            labels: BTreeMap::from([("project".into(), "demo".into())]),
        },
        cluster: ClusterView {
            fleets: Vec::new(),
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
    if args.lang == Lang::Python && TAKEN_MODULES.contains(&module_name(&args.name).as_str()) {
        return Err(CliError::Usage(format!(
            "plugin name {:?}: its module `{}` is a Python keyword or shadows one the SDK uses; choose another name",
            args.name,
            module_name(&args.name)
        )));
    }
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
    let mut files = files(args.lang, name);
    files.push(("settings.json".into(), "{\"max_gpus\": 16}\n".into()));
    files.push(("request.json".into(), request + "\n"));
    for (rel, text) in &files {
        write(&root, rel, text)?;
    }
    let summary = json!({
        "name": name,
        "lang": args.lang.as_str(),
        "dir": root.display().to_string(),
        "files": files.len(),
    });
    emit(format, &summary, || {
        let what = match args.lang {
            Lang::Rust => "plugin crate".to_string(),
            lang => format!("{lang} plugin"),
        };
        note(format!("created {what} {name} in {}", root.display()));
        note(format!(
            "next: cd {} && {}",
            root.display(),
            next_steps(args.lang, name)
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
        for taken in ["forge-policy", "class", "wit-world"] {
            assert!(
                TAKEN_MODULES.contains(&module_name(taken).as_str()),
                "{taken}"
            );
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

    #[test]
    fn python_and_ts_scaffolds_carry_their_sdk_in_the_repository_layout() {
        let paths = |lang| -> Vec<String> {
            files(lang, "max-gpus")
                .into_iter()
                .map(|(p, _)| p)
                .collect()
        };
        let py = paths(Lang::Python);
        for want in [
            "forge-plugin.toml",
            "max_gpus.py",
            "test_max_gpus.py",
            "vendor/plugin-sdk/sdk.toml",
            "vendor/plugin-sdk/install-toolchains.sh",
            "vendor/plugin-sdk/python/requirements.txt",
            "vendor/plugin-sdk/python/forge_policy/__init__.py",
        ] {
            assert!(py.iter().any(|p| p == want), "{want} in {py:?}");
        }
        assert!(py.iter().any(|p| p.starts_with("vendor/wit/policy@")));
        assert!(
            !py.iter()
                .any(|p| p.contains("/js/") || p.contains("__pycache__"))
        );
        let ts = paths(Lang::Ts);
        for want in [
            "forge-plugin.toml",
            "max-gpus.ts",
            "max-gpus.test.ts",
            "vendor/plugin-sdk/js/package-lock.json",
            "vendor/plugin-sdk/js/tsconfig.plugin.json",
            "vendor/plugin-sdk/js/src/index.ts",
        ] {
            assert!(ts.iter().any(|p| p == want), "{want} in {ts:?}");
        }
        assert!(
            !ts.iter()
                .any(|p| p.contains("/python/") || p.contains("node_modules"))
        );
        let manifest = &files(Lang::Python, "max-gpus")[0].1;
        assert!(
            manifest.contains("entry = \"max_gpus:MaxGpus\""),
            "{manifest}"
        );
    }
}
