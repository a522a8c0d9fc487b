//! HTTP-only capsule mode: an init container that downloads the capsule,
//! verifies its SHA-256 and places it in a shared `emptyDir`, so Ray's
//! `working_dir` can be a `file://` path instead of a URL Ray itself fetches
//! without any integrity check.
//!
//! Conventions (shared with the gateway and the emulator): init container
//! `forge-capsule-fetch`, volume `forge-capsule` mounted at `/forge/capsule`
//! in the init container and the Ray container, env `FORGE_CAPSULE_URL`,
//! `FORGE_CAPSULE_SHA256`, `FORGE_CAPSULE_PATH`, and optionally
//! `FORGE_CAPSULE_FALLBACK_URL` ([`CapsuleInit::with_fallback`]): fetched when the
//! first URL fails (a presigned URL that expired while a long job's pod was
//! recreated), never after a checksum mismatch. The script is POSIX `sh`
//! using only `curl`/`wget` (both following redirects: a capsule link answers
//! 302), `sha256sum`, `mv` and `echo`; on a mismatch it exits 1 printing `capsule sha256
//! mismatch: expected X got Y`. The URL (a presigned credential) is never echoed.
//!
//! The default image `busybox:1.36` has `wget` + `sha256sum`; for `https`
//! endpoints configure an image with `curl` (busybox's TLS support varies).

use serde_json::{Value, json};
use url::Url;

use crate::digest::{InvalidDigest, validate_digest};

/// Name of the init container.
pub const INIT_CONTAINER_NAME: &str = "forge-capsule-fetch";
/// Name of the shared `emptyDir` volume.
pub const VOLUME_NAME: &str = "forge-capsule";
/// Mount path in the init container and the Ray containers.
pub const MOUNT_PATH: &str = "/forge/capsule";
/// The variable naming the URL fetched when the first one fails.
pub const FALLBACK_ENV: &str = "FORGE_CAPSULE_FALLBACK_URL";
/// Default init container image.
pub const DEFAULT_IMAGE: &str = "busybox:1.36";

/// The fetch-and-verify script run by `sh -c` (reads the env vars above).
pub const FETCH_SCRIPT: &str = r#"set -eu
tmp="$FORGE_CAPSULE_PATH.part"
if [ -f "$FORGE_CAPSULE_PATH" ]; then
  echo "capsule $FORGE_CAPSULE_SHA256 already present"
  exit 0
fi
fetch() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 5 --retry-delay 2 -o "$tmp" "$1" || { echo "capsule download failed (curl exit $?)"; return 1; }
  else
    wget -q -O "$tmp" "$1" || { echo "capsule download failed (wget exit $?)"; return 1; }
  fi
}
if ! fetch "$FORGE_CAPSULE_URL"; then
  if [ -z "${FORGE_CAPSULE_FALLBACK_URL:-}" ]; then
    exit 1
  fi
  echo "trying the capsule link instead"
  fetch "$FORGE_CAPSULE_FALLBACK_URL" || exit 1
fi
got=$(sha256sum "$tmp")
got=${got%% *}
if [ "$got" != "$FORGE_CAPSULE_SHA256" ]; then
  echo "capsule sha256 mismatch: expected $FORGE_CAPSULE_SHA256 got $got"
  exit 1
fi
mv "$tmp" "$FORGE_CAPSULE_PATH"
echo "capsule $FORGE_CAPSULE_SHA256 verified"
"#;

/// Everything the gateway adds to each Ray pod template in HTTP-only mode.
#[derive(Debug, Clone, PartialEq)]
pub struct CapsuleInit {
    /// The `initContainers[]` entry.
    pub init_container: Value,
    /// The `volumes[]` entry.
    pub volume: Value,
    /// The `volumeMounts[]` entry for the Ray container(s).
    pub volume_mount: Value,
    /// `file:///forge/capsule/<sha>.zip`, for `runtimeEnvYAML.working_dir`.
    pub working_dir: String,
}

/// Path of the verified capsule inside the pods.
pub fn capsule_path(digest: &str) -> String {
    format!("{MOUNT_PATH}/{digest}.zip")
}

/// Build the init container, volume, mount and `file://` working_dir for the
/// capsule `digest` fetched from `url`. `image` defaults to [`DEFAULT_IMAGE`].
/// Refuses a `digest` that is not one (it is used in paths and the script's env).
pub fn init_container(
    url: &Url,
    digest: &str,
    image: Option<&str>,
) -> Result<CapsuleInit, InvalidDigest> {
    validate_digest(digest)?;
    let path = capsule_path(digest);
    let volume_mount = json!({ "name": VOLUME_NAME, "mountPath": MOUNT_PATH });
    let init_container = json!({
        "name": INIT_CONTAINER_NAME,
        "image": image.unwrap_or(DEFAULT_IMAGE),
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", FETCH_SCRIPT],
        "env": [
            { "name": "FORGE_CAPSULE_URL", "value": url.as_str() },
            { "name": "FORGE_CAPSULE_SHA256", "value": digest },
            { "name": "FORGE_CAPSULE_PATH", "value": path },
        ],
        "volumeMounts": [volume_mount.clone()],
    });
    Ok(CapsuleInit {
        init_container,
        volume: json!({ "name": VOLUME_NAME, "emptyDir": {} }),
        volume_mount,
        working_dir: format!("file://{path}"),
    })
}

impl CapsuleInit {
    /// The same init container, fetching `url` when its first URL fails to download
    /// (`FORGE_CAPSULE_FALLBACK_URL`; set once, a second call replaces it).
    pub fn with_fallback(mut self, url: &Url) -> Self {
        if let Some(env) = self.init_container["env"].as_array_mut() {
            env.retain(|e| e["name"] != FALLBACK_ENV);
            env.push(json!({ "name": FALLBACK_ENV, "value": url.as_str() }));
        }
        self
    }

    /// Add the init container and volume to a pod spec (`spec` of a pod
    /// template) and mount the volume in every container. Idempotent.
    pub fn apply_to_pod_spec(&self, pod_spec: &mut Value) {
        let Some(spec) = pod_spec.as_object_mut() else {
            return;
        };
        let push_unique = |list: &mut Value, item: &Value, key: &str| {
            if !list.is_array() {
                *list = Value::Array(Vec::new());
            }
            let arr = list.as_array_mut().expect("made an array above");
            if !arr.iter().any(|v| v.get(key) == item.get(key)) {
                arr.push(item.clone());
            }
        };
        push_unique(
            spec.entry("initContainers").or_insert(Value::Null),
            &self.init_container,
            "name",
        );
        push_unique(
            spec.entry("volumes").or_insert(Value::Null),
            &self.volume,
            "name",
        );
        if let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) {
            for c in containers {
                if let Some(obj) = c.as_object_mut() {
                    push_unique(
                        obj.entry("volumeMounts").or_insert(Value::Null),
                        &self.volume_mount,
                        "name",
                    );
                }
            }
        }
    }
}
