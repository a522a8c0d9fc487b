//! The Kubernetes adapter: everything Forge reads from or writes to the API server —
//! the typed RayJob and its API, each RayJob's NetworkPolicy, a job's pods and logs,
//! playground pods (with their key Secrets and NetworkPolicies) and requests to them
//! through the API server's pod proxy,
//! events, the Node/Pod capacity caches, the labels that tie objects to jobs and
//! installations, the leader Lease mirror, and how the client connects ([`connect`]).
//! Domain modules call these instead of building requests, selectors or JSON paths
//! themselves.

pub mod api_error;
pub mod availability;
pub mod capacities;
pub mod capacity;
pub mod connect;
pub mod events;
pub mod fleets;
pub mod labels;
pub mod lease;
pub mod network_policies;
pub mod nodes;
pub mod playgrounds;
pub mod pod_proxy;
pub mod pods;
pub mod ray_stop;
pub mod rayjob_api;
pub mod rayjob_crd;

pub use capacities::Capacities;
pub use capacity::Capacity;
pub use fleets::Fleets;
pub use network_policies::{Applied, NetworkPolicies};
pub use nodes::{NodeConventions, NodeRoom};
pub use playgrounds::PlaygroundObjects;
pub use pods::{LogSource, Pods};
pub use rayjob_api::{CreateError, Created, RayJobs};
pub use rayjob_crd::{RayJob, RayJobStatus};

/// The cluster as the gateway uses it: one client, the gateway's namespace, its
/// RayJobs and pods, and the capacity caches.
#[derive(Clone)]
pub struct Cluster {
    /// The fleet it is (`FORGE_FLEETS_FILE`'s name, or `default`): recorded on every
    /// job dispatched here.
    pub fleet: String,
    /// The client (for watchers and anything not wrapped here).
    pub client: kube::Client,
    /// The namespace of every object Forge creates.
    pub namespace: String,
    pub rayjobs: RayJobs,
    /// One NetworkPolicy per RayJob.
    pub network_policies: NetworkPolicies,
    pub pods: Pods,
    /// Playground pods, their key Secrets and NetworkPolicies.
    pub playgrounds: PlaygroundObjects,
    pub capacity: Capacity,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("fleet", &self.fleet)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl Cluster {
    /// The adapter of fleet `fleet` over `client` in `namespace` with running
    /// capacity caches, for installation `instance`.
    pub fn new(
        fleet: &str,
        client: kube::Client,
        namespace: &str,
        capacity: Capacity,
        instance: &str,
    ) -> Self {
        Cluster {
            fleet: fleet.to_string(),
            rayjobs: RayJobs::new(client.clone(), namespace, instance),
            network_policies: NetworkPolicies::new(client.clone(), namespace, instance),
            pods: Pods::new(client.clone(), namespace),
            playgrounds: PlaygroundObjects::new(client.clone(), namespace),
            namespace: namespace.to_string(),
            client,
            capacity,
        }
    }
}
