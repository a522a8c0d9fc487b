//! [`LiveTokens`]: the tokens in force, reloaded when the tokens file changes, so a
//! token is revoked (or added) by editing the file — no restart.
//!
//! The file's directory is watched (`notify`, inotify on Linux) rather than the file
//! itself: editors and Kubernetes Secret volumes replace a file by renaming another
//! over it (Secret volumes swap a `..data` symlink), which a watch on the old inode
//! would never report. Every event in the directory re-reads the file; a changed,
//! valid file is swapped in atomically (`arc-swap`: requests in flight finish with the
//! set they loaded, the next one sees the new set). A file that no longer parses, or
//! that names a reserved team, is refused *as a whole*: the previous set stays in
//! force and the problem is logged, so a typo cannot lock every team out — fix the
//! file and the next write reloads it. [`LiveTokens::reload`] does the same on demand.
//!
//! Extra entries (the admin token `dev` mints at every start) are kept across reloads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::{RecursiveMode, Watcher};
use sha2::{Digest as _, Sha256};

use crate::auth::{AuthError, Caller, TokenEntry, Tokens, TokensFileError};

/// How long the watcher lets a burst of events settle before re-reading the file
/// (an editor's save is several events).
const SETTLE: Duration = Duration::from_millis(50);

/// Where the tokens come from.
#[derive(Debug, Clone, Default)]
pub struct TokenSource {
    /// The tokens file, re-read when it changes (`None`: only `extra`).
    pub file: Option<PathBuf>,
    /// Entries added to the file's (never written to it).
    pub extra: Vec<TokenEntry>,
}

/// The tokens in force.
pub struct LiveTokens {
    current: ArcSwap<Tokens>,
    source: TokenSource,
    /// SHA-256 of the file text behind `current` (a reload of identical text is a no-op).
    loaded: std::sync::Mutex<Option<[u8; 32]>>,
}

impl std::fmt::Debug for LiveTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LiveTokens({:?})", self.current.load())
    }
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reloaded {
    /// The file changed and its tokens are now in force.
    Swapped,
    /// The file's text is what is in force already.
    Unchanged,
}

impl LiveTokens {
    /// Reads the source once; an invalid file is an error here (at start-up).
    pub fn load(source: TokenSource) -> Result<Self, TokensFileError> {
        let (tokens, hash) = read(&source)?;
        Ok(LiveTokens {
            current: ArcSwap::from_pointee(tokens),
            source,
            loaded: std::sync::Mutex::new(hash),
        })
    }

    /// A fixed set (tests, tools): nothing to reload.
    pub fn fixed(tokens: Tokens) -> Self {
        LiveTokens {
            current: ArcSwap::from_pointee(tokens),
            source: TokenSource::default(),
            loaded: std::sync::Mutex::new(None),
        }
    }

    /// The set in force now.
    pub fn current(&self) -> Arc<Tokens> {
        self.current.load_full()
    }

    /// Authenticates an `Authorization` header value against the set in force.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, AuthError> {
        self.current.load().authenticate(authorization)
    }

    /// The watched file, if any.
    pub fn file(&self) -> Option<&Path> {
        self.source.file.as_deref()
    }

    /// Re-reads the file; swaps a changed, valid one in. An invalid file changes
    /// nothing and is returned as the error.
    pub fn reload(&self) -> Result<Reloaded, TokensFileError> {
        let (tokens, hash) = read(&self.source)?;
        let mut loaded = self
            .loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if hash.is_some() && *loaded == hash {
            return Ok(Reloaded::Unchanged);
        }
        self.current.store(Arc::new(tokens));
        *loaded = hash;
        Ok(Reloaded::Swapped)
    }

    /// Watches the file's directory and reloads on every change until the task is
    /// aborted. `None` when there is no file; a directory that cannot be watched is
    /// logged and leaves the tokens as they are (restart to pick up changes).
    pub fn spawn_watch(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        let file = self.source.file.clone()?;
        let dir = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok() {
                let _ = tx.send(());
            }
        });
        let mut watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                tracing::error!("cannot watch the tokens file {}: {e}", file.display());
                return None;
            }
        };
        if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
            tracing::error!(
                "cannot watch {} for tokens file changes: {e}",
                dir.display()
            );
            return None;
        }
        let this = self.clone();
        Some(tokio::spawn(async move {
            let _watcher = watcher; // dropping it ends the watch
            while rx.recv().await.is_some() {
                tokio::time::sleep(SETTLE).await;
                while rx.try_recv().is_ok() {}
                let me = this.clone();
                let result = tokio::task::spawn_blocking(move || me.reload()).await;
                match result {
                    Ok(Ok(Reloaded::Swapped)) => tracing::info!(
                        tokens = this.current().len(),
                        "tokens file {} reloaded",
                        file.display()
                    ),
                    Ok(Ok(Reloaded::Unchanged)) => {}
                    Ok(Err(e)) => tracing::error!(
                        "tokens file changed but is invalid; the previous tokens stay in force: {e}"
                    ),
                    Err(e) => tracing::error!("tokens reload task: {e}"),
                }
            }
        }))
    }
}

/// The tokens of a source and the hash of the file text they came from.
fn read(source: &TokenSource) -> Result<(Tokens, Option<[u8; 32]>), TokensFileError> {
    let (mut entries, hash) = match &source.file {
        Some(path) => {
            let (entries, text) = Tokens::read_entries_and_text(path)?;
            (entries, Some(Sha256::digest(text.as_bytes()).into()))
        }
        None => (Vec::new(), None),
    };
    entries.extend(source.extra.iter().cloned());
    Ok((Tokens::from_entries(entries)?, hash))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Role, hash_token};

    fn file_with(path: &Path, teams: &[(&str, &str)]) {
        let mut text = String::from("tokens:\n");
        for (token, team) in teams {
            text.push_str(&format!(
                "  - team: {team}\n    role: member\n    token_sha256: {}\n",
                hash_token(token)
            ));
        }
        std::fs::write(path, text).expect("write tokens");
    }

    #[test]
    fn reload_swaps_valid_files_and_keeps_extras() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokens.yaml");
        file_with(&path, &[("alice", "team-a")]);
        let extra = TokenEntry {
            token_sha256: hash_token("dev-admin"),
            team: "team-a".into(),
            role: Role::Admin,
            name: Some("dev".into()),
        };
        let live = LiveTokens::load(TokenSource {
            file: Some(path.clone()),
            extra: vec![extra],
        })
        .expect("load");
        assert!(live.authenticate(Some("Bearer alice")).is_ok());
        assert_eq!(live.reload().expect("reload"), Reloaded::Unchanged);

        // Revoke alice, add bob.
        file_with(&path, &[("bob", "team-b")]);
        assert_eq!(live.reload().expect("reload"), Reloaded::Swapped);
        assert_eq!(
            live.authenticate(Some("Bearer alice")),
            Err(AuthError::Invalid)
        );
        assert_eq!(
            live.authenticate(Some("Bearer bob")).expect("bob").team,
            "team-b"
        );
        assert!(live.authenticate(Some("Bearer dev-admin")).is_ok());

        // A broken or reserved-team file changes nothing.
        std::fs::write(&path, "tokens: [").expect("write");
        assert!(live.reload().is_err());
        file_with(&path, &[("mallory", "global")]);
        assert!(matches!(live.reload(), Err(TokensFileError::Entry { .. })));
        assert!(live.authenticate(Some("Bearer bob")).is_ok());
        assert!(live.authenticate(Some("Bearer mallory")).is_err());
    }

    #[tokio::test]
    async fn the_watcher_picks_up_a_renamed_over_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokens.yaml");
        file_with(&path, &[("alice", "team-a")]);
        let live = Arc::new(
            LiveTokens::load(TokenSource {
                file: Some(path.clone()),
                extra: Vec::new(),
            })
            .expect("load"),
        );
        let task = live.spawn_watch().expect("watching");
        // Replace the file the way editors and Secret volumes do: write a new one and
        // rename it over the old.
        let next = dir.path().join(".tokens.yaml.new");
        file_with(&next, &[("bob", "team-b")]);
        std::fs::rename(&next, &path).expect("rename");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if live.authenticate(Some("Bearer bob")).is_ok() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the watcher never reloaded the file"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(live.authenticate(Some("Bearer alice")).is_err());
        task.abort();
    }
}
