//! The Kubernetes adapter: everything Forge reads from or writes to the API server —
//! the typed RayJob and its API, a job's pods and logs, events, the Node/Pod capacity
//! caches, and the labels that tie objects to jobs. Domain modules call these instead of
//! building requests, selectors or JSON paths themselves.

pub mod api_error;
pub mod capacity;
pub mod events;
pub mod labels;
pub mod nodes;
pub mod pods;
pub mod rayjob;
pub mod rayjobs;

pub use capacity::Capacity;
pub use nodes::{NodeConventions, NodeRoom};
pub use pods::{LogSource, Pods};
pub use rayjob::{RayJob, RayJobStatus};
pub use rayjobs::{Created, RayJobs};

/// The cluster as the gateway uses it: one client, the gateway's namespace, its
/// RayJobs and pods, and the capacity caches.
#[derive(Clone)]
pub struct Cluster {
    /// The client (for watchers and anything not wrapped here).
    pub client: kube::Client,
    /// The namespace of every object Forge creates.
    pub namespace: String,
    pub rayjobs: RayJobs,
    pub pods: Pods,
    pub capacity: Capacity,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl Cluster {
    /// The adapter over `client` in `namespace` with running capacity caches.
    pub fn new(client: kube::Client, namespace: &str, capacity: Capacity) -> Self {
        Cluster {
            rayjobs: RayJobs::new(client.clone(), namespace),
            pods: Pods::new(client.clone(), namespace),
            namespace: namespace.to_string(),
            client,
            capacity,
        }
    }
}
