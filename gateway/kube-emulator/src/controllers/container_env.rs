//! A container's environment as the kubelet builds it when it creates the container:
//! `envFrom` (ConfigMaps and Secrets, with `prefix`, in order), then `env` in order —
//! plain values with `$(VAR)` references expanded against what came before (`$$` is a
//! literal `$`), and `valueFrom` `configMapKeyRef`, `secretKeyRef` (decoded),
//! `fieldRef` (the downward API's pod fields) and `resourceFieldRef` (`limits.*` /
//! `requests.*` with a divisor; a missing limit is the node's allocatable).
//!
//! A missing object or key that is not `optional` is the kubelet's
//! `CreateContainerConfigError`, with its message (`secret "x" not found`,
//! `couldn't find key k in ConfigMap ns/x`). The kubelet reads the objects through the
//! API, as the real one does.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Node, Pod, Secret};
use kube::{Api, Client, ResourceExt};

use super::quantity::parse_milli;

/// Why a container's environment cannot be built (the container waits in
/// `CreateContainerConfigError` with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// A ConfigMap or Secret does not exist.
    #[error("{kind} \"{name}\" not found")]
    Missing {
        /// `configmap` or `secret`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// The object has no such key.
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    MissingKey {
        /// The key.
        key: String,
        /// `ConfigMap` or `Secret`.
        kind: &'static str,
        /// Namespace of the object.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A field or resource reference the emulator cannot resolve.
    #[error("{0}")]
    Unsupported(String),
    /// Reading an object failed.
    #[error("{0}")]
    Api(String),
}

/// What the downward API reads that is not in the pod spec yet: the pod's IPs as the
/// kubelet assigned them.
#[derive(Debug, Clone, Default)]
pub struct PodNetwork {
    /// `status.podIP`.
    pub pod_ip: String,
    /// `status.hostIP`.
    pub host_ip: String,
}

/// Fetches ConfigMaps and Secrets once per environment.
struct Sources<'a> {
    client: &'a Client,
    ns: String,
    config_maps: HashMap<String, Option<ConfigMap>>,
    secrets: HashMap<String, Option<Secret>>,
}

impl Sources<'_> {
    async fn config_map(&mut self, name: &str) -> Result<Option<&ConfigMap>, EnvError> {
        if !self.config_maps.contains_key(name) {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.ns);
            let cm = api
                .get_opt(name)
                .await
                .map_err(|e| EnvError::Api(e.to_string()))?;
            self.config_maps.insert(name.to_owned(), cm);
        }
        Ok(self.config_maps.get(name).and_then(Option::as_ref))
    }

    async fn secret(&mut self, name: &str) -> Result<Option<&Secret>, EnvError> {
        if !self.secrets.contains_key(name) {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.ns);
            let s = api
                .get_opt(name)
                .await
                .map_err(|e| EnvError::Api(e.to_string()))?;
            self.secrets.insert(name.to_owned(), s);
        }
        Ok(self.secrets.get(name).and_then(Option::as_ref))
    }
}

/// The data of a ConfigMap (`data` and `binaryData`, lossily as text).
fn config_map_data(cm: &ConfigMap) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = cm.data.clone().unwrap_or_default().into_iter().collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        out.push((k.clone(), String::from_utf8_lossy(&v.0).into_owned()));
    }
    out
}

/// The decoded data of a Secret.
fn secret_data(s: &Secret) -> Vec<(String, String)> {
    s.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

/// A valid environment variable name (what the kubelet exports from `envFrom`).
fn valid_env_name(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// Where `envFrom` and a key reference read from.
#[derive(Clone, Copy)]
enum Source {
    ConfigMap,
    Secret,
}

impl Source {
    /// As `EnvError::Missing` names it, and as `EnvError::MissingKey` does.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Source::ConfigMap => ("configmap", "ConfigMap"),
            Source::Secret => ("secret", "Secret"),
        }
    }
}

impl Sources<'_> {
    /// The data of ConfigMap or Secret `name`; `None` when it does not exist and is
    /// `optional`.
    async fn data(
        &mut self,
        source: Source,
        name: &str,
        optional: bool,
    ) -> Result<Option<Vec<(String, String)>>, EnvError> {
        let data = match source {
            Source::ConfigMap => self.config_map(name).await?.map(config_map_data),
            Source::Secret => self.secret(name).await?.map(secret_data),
        };
        match data {
            Some(d) => Ok(Some(d)),
            None if optional => Ok(None),
            None => Err(EnvError::Missing {
                kind: source.names().0,
                name: name.to_owned(),
            }),
        }
    }

    /// Key `key` of ConfigMap or Secret `name`; `None` when either is missing and the
    /// reference is `optional`.
    async fn key(
        &mut self,
        source: Source,
        name: &str,
        key: &str,
        optional: bool,
    ) -> Result<Option<String>, EnvError> {
        let Some(data) = self.data(source, name, optional).await? else {
            return Ok(None);
        };
        match data.into_iter().find(|(k, _)| k == key) {
            Some((_, v)) => Ok(Some(v)),
            None if optional => Ok(None),
            None => Err(EnvError::MissingKey {
                key: key.to_owned(),
                kind: source.names().1,
                namespace: self.ns.clone(),
                name: name.to_owned(),
            }),
        }
    }
}

/// The environment of container `c` of `pod`, in the order the kubelet builds it
/// (later entries win when names repeat): `envFrom` first, then `env`.
pub async fn resolve(
    client: &Client,
    pod: &Pod,
    c: &Container,
    net: &PodNetwork,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut src = Sources {
        client,
        ns: pod.namespace().unwrap_or_default(),
        config_maps: HashMap::new(),
        secrets: HashMap::new(),
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let entries = if let Some(r) = &from.config_map_ref {
            src.data(Source::ConfigMap, &r.name, r.optional == Some(true))
                .await?
        } else if let Some(r) = &from.secret_ref {
            src.data(Source::Secret, &r.name, r.optional == Some(true))
                .await?
        } else {
            None
        };
        for (k, v) in entries.into_iter().flatten() {
            let name = format!("{prefix}{k}");
            if valid_env_name(&name) {
                out.push((name, v));
            }
        }
    }
    for e in c.env.iter().flatten() {
        let value = match &e.value_from {
            None => Some(expand(e.value.as_deref().unwrap_or(""), &out)),
            Some(from) => value_from(&mut src, pod, c, from, net).await?,
        };
        if let Some(v) = value {
            out.push((e.name.clone(), v));
        }
    }
    Ok(out)
}

/// An `env` entry's `valueFrom`: a ConfigMap's or Secret's key, a field of the pod, or
/// a resource of a container; `None` for an optional reference that is missing.
async fn value_from(
    src: &mut Sources<'_>,
    pod: &Pod,
    c: &Container,
    from: &k8s_openapi::api::core::v1::EnvVarSource,
    net: &PodNetwork,
) -> Result<Option<String>, EnvError> {
    if let Some(r) = &from.config_map_key_ref {
        return src
            .key(Source::ConfigMap, &r.name, &r.key, r.optional == Some(true))
            .await;
    }
    if let Some(r) = &from.secret_key_ref {
        return src
            .key(Source::Secret, &r.name, &r.key, r.optional == Some(true))
            .await;
    }
    if let Some(f) = &from.field_ref {
        return field_value(pod, &f.field_path, net).map(Some);
    }
    if let Some(r) = &from.resource_field_ref {
        let container = r.container_name.as_deref().unwrap_or(&c.name);
        let divisor = r.divisor.as_ref().map(|d| d.0.as_str());
        return resource_value(src.client, pod, container, &r.resource, divisor)
            .await
            .map(Some);
    }
    Ok(None)
}

/// `$(VAR)` references to variables defined before replaced by their values (the
/// last definition wins); `$$` is a literal `$`; unknown references stay as written.
pub fn expand(s: &str, defined: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match defined.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A downward API `fieldRef` of the pod.
fn field_value(pod: &Pod, path: &str, net: &PodNetwork) -> Result<String, EnvError> {
    let spec = pod.spec.clone().unwrap_or_default();
    let keyed = |prefix: &str, map: Option<&std::collections::BTreeMap<String, String>>| {
        path.strip_prefix(prefix)
            .and_then(|k| k.strip_suffix("']"))
            .map(|k| map.and_then(|m| m.get(k)).cloned().unwrap_or_default())
    };
    let v = match path {
        "metadata.name" => pod.name_any(),
        "metadata.namespace" => pod.namespace().unwrap_or_default(),
        "metadata.uid" => pod.uid().unwrap_or_default(),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.podIP" | "status.podIPs" => net.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => net.host_ip.clone(),
        _ => {
            if let Some(v) = keyed("metadata.labels['", pod.metadata.labels.as_ref()) {
                v
            } else if let Some(v) =
                keyed("metadata.annotations['", pod.metadata.annotations.as_ref())
            {
                v
            } else {
                return Err(EnvError::Unsupported(format!(
                    "unsupported fieldPath: {path}"
                )));
            }
        }
    };
    Ok(v)
}

/// A `resourceFieldRef`: the container's limit or request divided by the divisor and
/// rounded up; a limit that is not set is the node's allocatable.
async fn resource_value(
    client: &Client,
    pod: &Pod,
    container: &str,
    resource: &str,
    divisor: Option<&str>,
) -> Result<String, EnvError> {
    let unsupported =
        || EnvError::Unsupported(format!("unsupported container resource: {resource}"));
    let (kind, name) = resource.split_once('.').ok_or_else(unsupported)?;
    let spec = pod.spec.clone().unwrap_or_default();
    let c = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == container)
        .ok_or_else(|| EnvError::Unsupported(format!("container {container} not found")))?;
    let res = c.resources.clone().unwrap_or_default();
    let get = |m: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        m.as_ref()
            .and_then(|m| m.get(name))
            .and_then(|q| parse_milli(&q.0).ok())
    };
    let milli = match kind {
        "limits" => match get(&res.limits) {
            Some(v) => v,
            None => {
                let node = spec.node_name.clone().unwrap_or_default();
                let n = Api::<Node>::all(client.clone())
                    .get(&node)
                    .await
                    .map_err(|e| EnvError::Api(e.to_string()))?;
                n.status
                    .and_then(|s| s.allocatable)
                    .and_then(|a| a.get(name).cloned())
                    .and_then(|q| parse_milli(&q.0).ok())
                    .unwrap_or(0)
            }
        },
        "requests" => get(&res.requests).or_else(|| get(&res.limits)).unwrap_or(0),
        _ => return Err(unsupported()),
    };
    let div = divisor
        .filter(|d| !d.is_empty())
        .map(parse_milli)
        .transpose()
        .map_err(|e| EnvError::Unsupported(e.to_string()))?
        .filter(|d| *d > 0)
        .unwrap_or(1000);
    Ok(((milli + div - 1) / div).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_like_the_kubelet() {
        let defined = vec![
            ("A".to_owned(), "1".to_owned()),
            ("B".to_owned(), "x".to_owned()),
        ];
        assert_eq!(expand("$(A)-$(B)", &defined), "1-x");
        assert_eq!(expand("$$(A) $(C) $", &defined), "$(A) $(C) $");
        assert_eq!(expand("no refs", &defined), "no refs");
        assert_eq!(expand("$(A", &defined), "$(A");
    }

    #[test]
    fn downward_api_fields() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"team": "a"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}
        }))
        .expect("pod");
        let net = PodNetwork {
            pod_ip: "10.0.0.2".into(),
            host_ip: "192.168.0.1".into(),
        };
        assert_eq!(field_value(&pod, "metadata.name", &net), Ok("p".into()));
        assert_eq!(
            field_value(&pod, "metadata.labels['team']", &net),
            Ok("a".into())
        );
        assert_eq!(
            field_value(&pod, "status.podIP", &net),
            Ok("10.0.0.2".into())
        );
        assert_eq!(field_value(&pod, "spec.nodeName", &net), Ok("n1".into()));
        assert!(field_value(&pod, "spec.bogus", &net).is_err());
    }
}
