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

/// The environment of container `c` of `pod`, in the order the kubelet builds it
/// (later entries win when names repeat).
pub async fn resolve(
    client: &Client,
    pod: &Pod,
    c: &Container,
    net: &PodNetwork,
) -> Result<Vec<(String, String)>, EnvError> {
    let ns = pod.namespace().unwrap_or_default();
    let mut src = Sources {
        client,
        ns: ns.clone(),
        config_maps: HashMap::new(),
        secrets: HashMap::new(),
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let entries = if let Some(r) = &from.config_map_ref {
            match src.config_map(&r.name).await? {
                Some(cm) => config_map_data(cm),
                None if r.optional == Some(true) => Vec::new(),
                None => {
                    return Err(EnvError::Missing {
                        kind: "configmap",
                        name: r.name.clone(),
                    });
                }
            }
        } else if let Some(r) = &from.secret_ref {
            match src.secret(&r.name).await? {
                Some(s) => secret_data(s),
                None if r.optional == Some(true) => Vec::new(),
                None => {
                    return Err(EnvError::Missing {
                        kind: "secret",
                        name: r.name.clone(),
                    });
                }
            }
        } else {
            Vec::new()
        };
        for (k, v) in entries {
            let name = format!("{prefix}{k}");
            if valid_env_name(&name) {
                out.push((name, v));
            }
        }
    }
    for e in c.env.iter().flatten() {
        let value = match &e.value_from {
            None => Some(expand(e.value.as_deref().unwrap_or(""), &out)),
            Some(from) => {
                if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional == Some(true);
                    match src.config_map(&r.name).await? {
                        None if optional => None,
                        None => {
                            return Err(EnvError::Missing {
                                kind: "configmap",
                                name: r.name.clone(),
                            });
                        }
                        Some(cm) => {
                            match config_map_data(cm).into_iter().find(|(k, _)| *k == r.key) {
                                Some((_, v)) => Some(v),
                                None if optional => None,
                                None => {
                                    return Err(EnvError::MissingKey {
                                        key: r.key.clone(),
                                        kind: "ConfigMap",
                                        namespace: ns.clone(),
                                        name: r.name.clone(),
                                    });
                                }
                            }
                        }
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional == Some(true);
                    match src.secret(&r.name).await? {
                        None if optional => None,
                        None => {
                            return Err(EnvError::Missing {
                                kind: "secret",
                                name: r.name.clone(),
                            });
                        }
                        Some(s) => match secret_data(s).into_iter().find(|(k, _)| *k == r.key) {
                            Some((_, v)) => Some(v),
                            None if optional => None,
                            None => {
                                return Err(EnvError::MissingKey {
                                    key: r.key.clone(),
                                    kind: "Secret",
                                    namespace: ns.clone(),
                                    name: r.name.clone(),
                                });
                            }
                        },
                    }
                } else if let Some(f) = &from.field_ref {
                    Some(field_value(pod, &f.field_path, net)?)
                } else if let Some(r) = &from.resource_field_ref {
                    let container = r.container_name.as_deref().unwrap_or(&c.name);
                    Some(
                        resource_value(
                            client,
                            pod,
                            container,
                            &r.resource,
                            r.divisor.as_ref().map(|d| d.0.as_str()),
                        )
                        .await?,
                    )
                } else {
                    None
                }
            }
        };
        if let Some(v) = value {
            out.push((e.name.clone(), v));
        }
    }
    Ok(out)
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
