//! Gateway configuration: one typed [`Config`] built from `FORGE_*` environment
//! variables (plus an optional `FORGE_CONFIG_FILE`, TOML or YAML; the environment
//! wins), checked at start-up so that every problem is reported at once, each naming
//! the variable and why.
//!
//! Every variable is one entry of the table `VARS` (`vars.rs`): its name (or a
//! pattern such as `FORGE_IMAGE_<FRAMEWORK>`), its default as the docs show it, its
//! meaning, whether it is a secret, and the parser that stores it in its field.
//! Everything else is derived from the table: reading (`reader.rs`), the keys a config
//! file may hold (`file.rs`) and README.md's Configuration table (`table.rs`), which a
//! test keeps in step with the code. The variables, defaults and meanings are listed
//! there (or by `forge-gateway config-table`), not here.
//!
//! The config file is a flat map of the same variable names to scalar values, e.g.
//!
//! ```toml
//! FORGE_K8S_NAMESPACE = "starforge"
//! FORGE_KUBERAY_TTL_SECONDS = 600
//! FORGE_IMAGE_NEMO_RL = "registry.internal/starforge/nemo-rl:v0.7.0"
//! ```
//!
//! Unknown keys in the file are rejected (typo protection); unknown `FORGE_*`
//! environment variables are ignored (other Forge components read their own).
//! Secrets are held in [`Secret`], whose `Debug` is redacted, and never echoed in
//! errors.
//!
//! # Adding a variable
//!
//! 1. Add its field to the typed config in `model.rs` (and a neutral value in
//!    `Draft::blank`, `draft.rs`; the table's default replaces it).
//! 2. Add one entry to `VARS` in `vars.rs`:
//!    `Var::new("FORGE_X", Fallback::Value("5"), |d, _, v| put(&mut d.cfg.gateway.x,
//!    int(v, 1, 100)), "what it means (1..=100)")` — parsers are in `values.rs`;
//!    `.secret()` for a secret, `Fallback::Unset("—")` for no default.
//! 3. If it must agree with another variable, add the check to `validate.rs` and one
//!    test per rejection in `tests.rs`.
//! 4. Regenerate README.md's table from the repository root:
//!    `cargo run -p forge-gateway -- config-table --readme README.md`.
//!
//! Files: `model.rs` the typed config, `vars.rs` the table, `descriptor.rs` its entry
//! type, `values.rs` the value parsers, `per_series.rs` per-series values,
//! `fleets.rs` the fleets file (`FORGE_FLEETS_FILE`), `draft.rs` the config while it is built,
//! `reader.rs` the table applied to a variable map, `file.rs` the config file,
//! `reading.rs` reading the files it names (size cap, YAML budget),
//! `load.rs` `from_env`/`from_env_map`, `validate.rs` cross-variable checks,
//! `table.rs` the Markdown table, `error.rs` the errors, `secret.rs` [`Secret`],
//! `dev.rs` the dev-mode defaults.

mod descriptor;
mod dev;
mod draft;
mod error;
mod file;
mod fleets;
mod load;
mod model;
mod per_series;
mod reader;
mod reading;
mod secret;
mod secret_files;
mod table;
mod validate;
mod values;
mod vars;

#[cfg(test)]
mod tests;

pub use dev::dev_defaults;
pub use error::{ConfigError, ConfigErrors};
pub use fleets::DEFAULT_FLEET;
pub use model::{
    Config, DEFAULT_CPUS_PER_NODE, DEFAULT_MEMORY_PER_NODE, DatabaseConfig, FleetConfig,
    FleetConnection, FleetKind, GatewayConfig, K8sConfig, KubeRayConfig, LeaderConfig, PodsConfig,
    S3Config, StorageConfig,
};
pub use per_series::PerSeries;
pub use secret::Secret;
pub use table::{TableError, markdown_table, update_readme};
pub use vars::{CONFIG_FILE, IMAGE_PREFIX, framework_of_image_var, is_known};
