//! Where `forge` finds the gateway: `--url`/`--token` (or `FORGE_URL`/`FORGE_TOKEN`)
//! win over what `forge login` stored in the user's config directory
//! (`$XDG_CONFIG_HOME/forge/config.yaml` on Linux; mode 0600, the directory 0700,
//! since it holds a bearer token).

use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::exit::CliError;

/// What `forge login` stores.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Login {
    pub url: String,
    pub token: String,
}

/// The config file's path.
pub fn path() -> Result<PathBuf, CliError> {
    let dir = dirs::config_dir().ok_or_else(|| {
        CliError::Local("no config directory (set HOME or XDG_CONFIG_HOME)".into())
    })?;
    Ok(dir.join("forge").join("config.yaml"))
}

/// The stored login, if any.
pub fn load() -> Result<Option<Login>, CliError> {
    let path = path()?;
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_saphyr::from_str(&text)
            .map(Some)
            .map_err(|e| CliError::local(path.display(), e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::local(path.display(), e)),
    }
}

/// Stores a login (replacing the file atomically, readable by the user only).
pub fn store(login: &Login) -> Result<PathBuf, CliError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = path()?;
    let dir = path.parent().expect("the config file has a directory");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| CliError::local(dir.display(), e))?;
    let text = serde_saphyr::to_string(login).map_err(|e| CliError::local("config", e))?;
    let tmp = dir.join(".config.yaml.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| CliError::local(tmp.display(), e))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| CliError::local(tmp.display(), e))?;
    std::fs::rename(&tmp, &path).map_err(|e| CliError::local(path.display(), e))?;
    Ok(path)
}

/// Removes the stored login; whether there was one.
pub fn remove() -> Result<bool, CliError> {
    let path = path()?;
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(CliError::local(path.display(), e)),
    }
}

/// The gateway to talk to: flags and environment over the stored login.
pub fn resolve(url: Option<String>, token: Option<String>) -> Result<Login, CliError> {
    let stored = load()?;
    let url = url.or_else(|| stored.as_ref().map(|l| l.url.clone()));
    let token = token.or_else(|| stored.map(|l| l.token));
    match (url, token) {
        (Some(url), Some(token)) => Ok(Login { url, token }),
        _ => Err(CliError::NotLoggedIn),
    }
}
