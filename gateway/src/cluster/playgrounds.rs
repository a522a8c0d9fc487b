//! The Kubernetes objects of playgrounds (built by [`crate::playground::objects`]):
//! create the pod (adopting one of its name: a retried create finds its own), its key
//! Secret and NetworkPolicy, read the pod and the key, call the server through the
//! pod proxy, delete the pod (its owned objects go with it
//! through the garbage collector). Transient API failures are retried here.

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

use super::api_error::{Failure, classify, with_retry};
use super::pod_proxy::{ProxiedResponse, send};

/// Playground objects in the gateway's namespace.
#[derive(Clone)]
pub struct PlaygroundObjects {
    client: Client,
    namespace: String,
    pods: Api<Pod>,
    secrets: Api<Secret>,
    network_policies: Api<NetworkPolicy>,
}

impl std::fmt::Debug for PlaygroundObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlaygroundObjects")
    }
}

async fn create_or_adopt<K>(api: &Api<K>, obj: &K) -> Result<K, kube::Error>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let pp = PostParams::default();
    match with_retry(|| api.create(&pp, obj)).await {
        Ok(created) => Ok(created),
        Err(e) if classify(&e) == Failure::AlreadyExists => with_retry(|| api.get(&name)).await,
        Err(e) => Err(e),
    }
}

impl PlaygroundObjects {
    /// The objects of `namespace`.
    pub fn new(client: Client, namespace: &str) -> Self {
        PlaygroundObjects {
            client: client.clone(),
            namespace: namespace.to_string(),
            pods: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client.clone(), namespace),
            network_policies: Api::namespaced(client, namespace),
        }
    }

    /// Creates the server pod (or adopts the one of its name); the stored pod (with
    /// its uid, for owner references).
    pub async fn create_pod(&self, pod: &Pod) -> Result<Pod, kube::Error> {
        create_or_adopt(&self.pods, pod).await
    }

    /// Creates the key Secret (or adopts the one of its name).
    pub async fn create_secret(&self, secret: &Secret) -> Result<(), kube::Error> {
        create_or_adopt(&self.secrets, secret).await.map(|_| ())
    }

    /// Creates the NetworkPolicy; an API server that does not serve NetworkPolicies
    /// (404 for the collection) enforces none, which is not an error.
    pub async fn create_network_policy(&self, np: &NetworkPolicy) -> Result<(), kube::Error> {
        match create_or_adopt(&self.network_policies, np).await {
            Ok(_) => Ok(()),
            Err(e) if classify(&e) == Failure::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The value of `entry` in Secret `name` (the playground's API key), if both exist.
    pub async fn secret_value(
        &self,
        name: &str,
        entry: &str,
    ) -> Result<Option<String>, kube::Error> {
        let secret = with_retry(|| self.secrets.get_opt(name)).await?;
        Ok(secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove(entry))
            .and_then(|v| String::from_utf8(v.0).ok()))
    }

    /// Sends a request to `port` of pod `pod` through the API server's pod proxy.
    pub async fn proxy(
        &self,
        pod: &str,
        port: u16,
        method: http::Method,
        path: &str,
        headers: http::HeaderMap,
        body: bytes::Bytes,
    ) -> Result<ProxiedResponse, kube::Error> {
        send(
            &self.client,
            &self.namespace,
            pod,
            port,
            method,
            path,
            headers,
            body,
        )
        .await
    }

    /// The pods of the namespace (their logs: a crash-looping server's last lines).
    pub fn pods(&self) -> super::Pods {
        super::Pods::new(self.client.clone(), &self.namespace)
    }

    /// The events about pod `name`.
    pub async fn events_of_pod(
        &self,
        name: &str,
    ) -> Result<Vec<super::events::ObjectEvent>, kube::Error> {
        super::events::events_of(
            &self.client,
            &self.namespace,
            &[("Pod".to_string(), name.to_string())],
        )
        .await
    }

    /// The pod `name`, if it exists.
    pub async fn get_pod(&self, name: &str) -> Result<Option<Pod>, kube::Error> {
        with_retry(|| self.pods.get_opt(name)).await
    }

    /// Deletes the pod `name` (its Secret and NetworkPolicy follow); a pod that is
    /// already gone is not an error.
    pub async fn delete_pod(&self, name: &str) -> Result<(), kube::Error> {
        let dp = DeleteParams::background();
        match with_retry(|| self.pods.delete(name, &dp)).await {
            Ok(_) => Ok(()),
            Err(e) if classify(&e) == Failure::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}
