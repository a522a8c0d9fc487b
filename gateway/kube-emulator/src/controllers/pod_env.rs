//! The environment of a process-mode container: what a pod would get, nothing of the
//! host's. A job's process runs as the user who started the emulator (in `forge-gateway
//! dev`, the gateway's own user), so inheriting the host environment would hand it the
//! gateway's `FORGE_*` settings and credentials. It gets instead: `PATH` (the host's,
//! so its interpreters are found — the image stands in for them), `HOME`, `HOSTNAME`
//! (the pod's name), and the container's `env`: literal values, and `valueFrom.
//! secretKeyRef` read from the Secret of the pod's namespace as a kubelet does (a
//! missing Secret or key fails the start, naming them, never showing a value).

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, EnvVar, Secret};
use kube::Api;

/// A container's env could not be resolved (what and why; never a value): the
/// container does not start, as with a kubelet's `CreateContainerConfigError`.
#[derive(Debug, thiserror::Error)]
#[error("CreateContainerConfigError: {0}")]
pub struct EnvError(pub String);

/// The `PATH` when the host has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Clears `cmd`'s environment and sets what any pod's container has: `PATH`, `HOME`
/// (`home`) and `HOSTNAME` (`pod`).
pub fn base(cmd: &mut tokio::process::Command, home: &Path, pod: &str) {
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_owned());
    cmd.env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("HOSTNAME", pod);
}

/// The container's `env`, resolved: literal values as they are (through `map`, which
/// rewrites mount paths), `secretKeyRef` values read from namespace `ns`'s Secrets.
/// Other sources (`fieldRef`, `configMapKeyRef`, ...) are not emulated and skipped.
pub async fn resolve(
    client: &kube::Client,
    ns: &str,
    container: &Container,
    map: impl Fn(&str) -> String,
) -> Result<Vec<(String, String)>, EnvError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for e in container.env.iter().flatten() {
        if let Some(v) = &e.value {
            out.push((e.name.clone(), map(v)));
        } else if let Some(v) = secret_value(&secrets, e).await? {
            out.push((e.name.clone(), v));
        }
    }
    Ok(out)
}

/// The value of `e`'s `secretKeyRef` (`None`: not a Secret reference, or an optional
/// one whose Secret or key is missing).
async fn secret_value(secrets: &Api<Secret>, e: &EnvVar) -> Result<Option<String>, EnvError> {
    let Some(r) = e
        .value_from
        .as_ref()
        .and_then(|f| f.secret_key_ref.as_ref())
    else {
        return Ok(None);
    };
    let optional = r.optional.unwrap_or(false);
    let missing = |what: String| {
        if optional {
            Ok(None)
        } else {
            Err(EnvError(what))
        }
    };
    let secret = match secrets.get_opt(&r.name).await {
        Ok(Some(s)) => s,
        Ok(None) => return missing(format!("secret {:?} not found", r.name)),
        Err(e) => {
            return Err(EnvError(format!("reading secret {:?}: {e}", r.name)));
        }
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&r.key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(&r.key))
                .map(|s| s.clone().into_bytes())
        });
    match bytes {
        Some(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
        None => missing(format!("couldn't find key {} in Secret {}", r.key, r.name)),
    }
}
