//! [`Config::from_env`] / [`Config::from_env_map`]: the optional config file, the
//! environment over it, secrets named by file (`secret_files.rs`), the variable table
//! applied to all, then the checks across variables — every problem reported at once.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::error::ConfigErrors;
use super::file;
use super::model::Config;
use super::reader;
use super::secret_files;
use super::vars::CONFIG_FILE;

impl Config {
    /// Loads from the process environment (and `FORGE_CONFIG_FILE`).
    pub fn from_env() -> Result<Self, ConfigErrors> {
        Self::from_env_map(std::env::vars().collect())
    }

    /// Loads from a variable map (and `FORGE_CONFIG_FILE` if the map names one); the
    /// map wins over the file. Every problem is reported at once.
    pub fn from_env_map(env: HashMap<String, String>) -> Result<Self, ConfigErrors> {
        let mut merged = HashMap::new();
        let mut errors = Vec::new();
        if let Some(path) = env.get(CONFIG_FILE).filter(|f| !f.trim().is_empty()) {
            match file::read(Path::new(path.trim())) {
                Ok(vars) => merged.extend(vars),
                Err(mut e) => errors.append(&mut e),
            }
        }
        merged.extend(env);
        secret_files::resolve(&mut merged, &mut errors);
        let config = reader::read(&merged, &mut errors);
        // A variable already reported as invalid is left out of the checks across
        // variables: its field holds the default, not what the user meant.
        let invalid: HashSet<String> = errors.iter().map(|e| e.var().to_string()).collect();
        errors.extend(
            config
                .validate()
                .into_iter()
                .filter(|e| !e.vars().iter().any(|v| invalid.contains(*v))),
        );
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(errors))
        }
    }
}
