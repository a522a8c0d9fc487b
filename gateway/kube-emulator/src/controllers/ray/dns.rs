//! The pod network that real Ray processes see: every `host:port` a Ray node's
//! command, its environment or a submitter's command names is rewritten to the
//! loopback address that really serves it, since every emulated pod shares the host's
//! network namespace (one `127.0.0.1`) and pod IPs are not routable.
//!
//! - A Service name in any of its DNS forms — `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`,
//!   `<svc>.<ns>.svc.cluster.local` — followed by `:<port>` becomes the address where a
//!   pod the Service selects serves that port (the kubelet registers what Ray nodes
//!   listen on in [`PodEndpoints`]). The Services KubeRay makes are headless, so the
//!   Service port is the container port, as with real DNS A records of pod IPs.
//! - `127.0.0.1:<port>`, `localhost:<port>` and `0.0.0.0:<port>` name the pod itself:
//!   they become the host address of that container port of the same pod, if it has
//!   one registered (a head's `RAY_ADDRESS=127.0.0.1:6379`).
//!
//! A name in a `.svc` form that no ready endpoint serves yet is reported as unresolved,
//! so the kubelet can hold the process back until it resolves (a worker started before
//! its head listens), as a real `ray start --address` keeps retrying its GCS.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::endpoints::PodEndpoints;

/// One `host:port` found in a text: its byte range, host and port.
#[derive(Debug, PartialEq, Eq)]
struct HostPort<'a> {
    start: usize,
    end: usize,
    host: &'a str,
    port: u16,
}

fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'-'
}

/// Every `host:port` of `s`: a maximal run of host characters, a colon and digits not
/// followed by another host character.
fn host_ports(s: &str) -> Vec<HostPort<'_>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    for (i, &c) in b.iter().enumerate() {
        if c != b':' {
            continue;
        }
        let mut start = i;
        while start > 0 && is_host_byte(b[start - 1]) {
            start -= 1;
        }
        let mut end = i + 1;
        while end < b.len() && b[end].is_ascii_digit() {
            end += 1;
        }
        let followed = end < b.len() && is_host_byte(b[end]);
        if start == i || end == i + 1 || followed {
            continue;
        }
        let Ok(port) = s[i + 1..end].parse::<u16>() else {
            continue;
        };
        out.push(HostPort {
            start,
            end,
            host: &s[start..i],
            port,
        });
    }
    out
}

/// What a host names: the pod itself, a Service (name, namespace; `must` when the name
/// is unmistakably one, `.svc`), or something else (left alone).
#[derive(Debug, PartialEq, Eq)]
enum Target<'a> {
    Own,
    Service {
        name: &'a str,
        ns: Option<&'a str>,
        must: bool,
    },
    Other,
}

fn classify(host: &str) -> Target<'_> {
    if matches!(host, "127.0.0.1" | "localhost" | "0.0.0.0") {
        return Target::Own;
    }
    let parts: Vec<&str> = host.split('.').collect();
    if parts.iter().any(|p| p.is_empty())
        || parts.iter().all(|p| p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Target::Other;
    }
    match parts.as_slice() {
        [name] => Target::Service {
            name,
            ns: None,
            must: false,
        },
        [name, ns] => Target::Service {
            name,
            ns: Some(ns),
            must: false,
        },
        [name, ns, "svc"] | [name, ns, "svc", "cluster", "local"] => Target::Service {
            name,
            ns: Some(ns),
            must: true,
        },
        _ => Target::Other,
    }
}

/// A text with its addresses rewritten, and the Service names that did not resolve.
#[derive(Debug, Default)]
pub struct Rewritten {
    /// The text.
    pub text: String,
    /// `host:port`s in a `.svc` form no endpoint serves yet.
    pub unresolved: Vec<String>,
}

/// Rewrites addresses as pod `ns/pod` sees them.
pub struct PodDns<'a> {
    pub client: &'a kube::Client,
    pub endpoints: &'a PodEndpoints,
    pub ns: &'a str,
    pub pod: &'a str,
}

impl PodDns<'_> {
    /// `s` with every address it names rewritten (see the module docs).
    pub async fn rewrite(&self, s: &str) -> Rewritten {
        let mut out = Rewritten::default();
        let mut at = 0;
        let mut cache: BTreeMap<(String, String, u16), Option<SocketAddr>> = BTreeMap::new();
        for hp in host_ports(s) {
            let resolved = match classify(hp.host) {
                Target::Own => self.endpoints.lookup(self.ns, self.pod, hp.port),
                Target::Service { name, ns, must } => {
                    let ns = ns.unwrap_or(self.ns);
                    let key = (ns.to_owned(), name.to_owned(), hp.port);
                    let addr = match cache.get(&key) {
                        Some(a) => *a,
                        None => {
                            let a = self.service(ns, name, hp.port).await;
                            cache.insert(key, a);
                            a
                        }
                    };
                    if addr.is_none() && must {
                        out.unresolved.push(format!("{}:{}", hp.host, hp.port));
                    }
                    addr
                }
                Target::Other => None,
            };
            if let Some(addr) = resolved {
                out.text.push_str(&s[at..hp.start]);
                out.text.push_str(&addr.to_string());
                at = hp.end;
            }
        }
        out.text.push_str(&s[at..]);
        out
    }

    /// Where a pod that Service `ns/name` selects serves `port` (headless: the Service
    /// port is the container port).
    async fn service(&self, ns: &str, name: &str, port: u16) -> Option<SocketAddr> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), ns);
        let svc = services.get_opt(name).await.ok()??;
        let spec = svc.spec?;
        let serves = spec
            .ports
            .iter()
            .flatten()
            .any(|p| u16::try_from(p.port).ok() == Some(port));
        let selector = spec.selector.filter(|s| !s.is_empty())?;
        if !serves {
            return None;
        }
        let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let list = pods
            .list(&ListParams::default().labels(&labels.join(",")))
            .await
            .ok()?;
        list.items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .find_map(|p| self.endpoints.lookup(ns, &p.name_any(), port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_host_ports_and_nothing_else() {
        let s = "ray start --address=c-head-svc.ns.svc.cluster.local:6379 --port=6379 \
                 http://127.0.0.1:8265/api x:y 10.0.0.1:80 a:1b";
        let found: Vec<(&str, u16)> = host_ports(s).iter().map(|h| (h.host, h.port)).collect();
        assert_eq!(
            found,
            vec![
                ("c-head-svc.ns.svc.cluster.local", 6379),
                ("127.0.0.1", 8265),
                ("10.0.0.1", 80)
            ]
        );
    }

    #[test]
    fn classifies_the_dns_forms_of_a_service() {
        assert_eq!(classify("localhost"), Target::Own);
        assert_eq!(classify("10.1.2.3"), Target::Other);
        assert_eq!(
            classify("h-svc.ns.svc.cluster.local"),
            Target::Service {
                name: "h-svc",
                ns: Some("ns"),
                must: true
            }
        );
        assert_eq!(
            classify("h-svc.ns.svc"),
            Target::Service {
                name: "h-svc",
                ns: Some("ns"),
                must: true
            }
        );
        assert_eq!(
            classify("h-svc"),
            Target::Service {
                name: "h-svc",
                ns: None,
                must: false
            }
        );
        assert_eq!(classify("a.b.c"), Target::Other);
    }
}
