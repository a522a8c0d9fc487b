//! The fleets the gateway drives (issue 42): one [`Cluster`] per configured fleet, in
//! the configured order, found by name. The dispatcher creates a job's RayJob in the
//! cluster of the fleet its gang fit chose; what follows a job (its lifecycle, logs,
//! cancel, clean-up) addresses the fleet the job records. Their capacities read as one
//! ([`Capacities`]).

use std::sync::Arc;

use super::{Capacities, Cluster};

/// Why a set of clusters is not a fleet list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetsError {
    #[error("no fleet is configured")]
    Empty,
    #[error("fleet {0:?} is configured twice")]
    Duplicate(String),
}

/// The clusters of the configured fleets, first to last (cheap to clone).
#[derive(Clone, Debug)]
pub struct Fleets {
    clusters: Arc<[Cluster]>,
    capacity: Capacities,
}

impl Fleets {
    /// The fleets of `clusters`, in that order: at least one, names unique.
    pub fn new(clusters: Vec<Cluster>) -> Result<Self, FleetsError> {
        if clusters.is_empty() {
            return Err(FleetsError::Empty);
        }
        for (i, c) in clusters.iter().enumerate() {
            if clusters[..i].iter().any(|o| o.fleet == c.fleet) {
                return Err(FleetsError::Duplicate(c.fleet.clone()));
            }
        }
        let capacity = Capacities::new(clusters.iter().map(|c| c.capacity.clone()).collect());
        Ok(Fleets {
            clusters: clusters.into(),
            capacity,
        })
    }

    /// The first fleet configured (playgrounds run there).
    pub fn first(&self) -> &Cluster {
        &self.clusters[0]
    }

    /// The cluster of fleet `name`.
    pub fn get(&self, name: &str) -> Option<&Cluster> {
        self.clusters.iter().find(|c| c.fleet == name)
    }

    /// The cluster of a job recorded in `fleet`. A job recorded without one was
    /// dispatched when the gateway drove one cluster: the first. `None`: a fleet no
    /// longer configured.
    pub fn of_job(&self, fleet: Option<&str>) -> Option<&Cluster> {
        match fleet {
            Some(name) => self.get(name),
            None => Some(self.first()),
        }
    }

    /// Every fleet's cluster, first to last.
    pub fn iter(&self) -> impl Iterator<Item = &Cluster> {
        self.clusters.iter()
    }

    /// How many fleets there are.
    pub fn len(&self) -> usize {
        self.clusters.len()
    }

    /// Never: there is at least one fleet.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Every fleet's capacity, read as one.
    pub fn capacity(&self) -> &Capacities {
        &self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> crate::config::Config {
        crate::config::Config::from_env_map(std::collections::HashMap::from([
            ("FORGE_IMAGE_NEMO_RL".to_string(), "img".to_string()),
            (
                "FORGE_KUBERAY_RAY_VERSION".to_string(),
                "2.55.1".to_string(),
            ),
        ]))
        .expect("config")
    }

    /// A cluster of fleet `name` whose client points nowhere (nothing here calls it).
    fn cluster(name: &str) -> Cluster {
        let kube_config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = kube::Client::try_from(kube_config).expect("client");
        let capacity = super::super::Capacity::start(
            client.clone(),
            super::super::NodeConventions {
                gpu_label: "starforge/gpu-series".into(),
                pods: config().pods,
            },
            forge_policy_host::model::FleetView {
                name: name.into(),
                ..Default::default()
            },
        );
        Cluster::new(name, client, "forge", capacity, "inst")
    }

    #[tokio::test]
    async fn fleets_are_unique_found_by_name_and_an_unnamed_job_is_the_firsts() {
        assert_eq!(Fleets::new(Vec::new()).err(), Some(FleetsError::Empty));
        assert_eq!(
            Fleets::new(vec![cluster("eu"), cluster("eu")]).err(),
            Some(FleetsError::Duplicate("eu".into()))
        );
        let fleets = Fleets::new(vec![cluster("eu"), cluster("us")]).expect("two fleets");
        assert_eq!(fleets.len(), 2);
        assert_eq!(fleets.get("us").map(|c| c.fleet.as_str()), Some("us"));
        assert!(fleets.get("ap").is_none());
        assert_eq!(fleets.of_job(None).map(|c| c.fleet.as_str()), Some("eu"));
        assert!(
            fleets.of_job(Some("ap")).is_none(),
            "a fleet no longer configured"
        );
        assert_eq!(fleets.capacity().each().len(), 2);
    }
}
