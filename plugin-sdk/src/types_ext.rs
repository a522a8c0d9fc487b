//! Convenience methods on the generated contract types, so policies read like the
//! rules they implement.

use crate::{
    Admission, Decision, Hold, Job, NodeSelectorRequirement, NodeSelectorTerm, Placement,
    PoolPlacement, Rejection, Request, SelectorOperator, SeriesCapacity, Taint, Toleration,
    TolerationOperator,
};

impl Decision {
    /// `admit` with the placement this policy was given, unchanged (nothing is copied
    /// back to the host).
    pub fn admit() -> Decision {
        Decision::Admit(Admission {
            placement: None,
            priority_cap: None,
            preemptible: None,
        })
    }

    /// `admit` with a changed placement (start from `request.placement().clone()`).
    pub fn place(placement: Placement) -> Decision {
        Decision::Admit(Admission {
            placement: Some(placement),
            priority_cap: None,
            preemptible: None,
        })
    }

    /// On an admit: the job runs at no more than `cap` (the chain keeps the lowest cap
    /// of its policies). Other decisions are returned unchanged.
    pub fn with_priority_cap(mut self, cap: i32) -> Decision {
        if let Decision::Admit(a) = &mut self {
            a.priority_cap = Some(a.priority_cap.map_or(cap, |c| c.min(cap)));
        }
        self
    }

    /// `admit`, marked as running `gpus` GPUs beyond the team's guaranteed quota
    /// (on idle GPUs): the host may reclaim them — preempting this job, least lost
    /// work first — for a team whose guarantee covers its job. Contract 0.3.0 carries
    /// the mark as the pods' [`BORROWED_GPUS_ANNOTATION`] on every pool of
    /// `placement` (start from `request.placement().clone()`).
    pub fn borrowing(mut placement: Placement, gpus: u32) -> Decision {
        for pool in &mut placement.pools {
            upsert(
                &mut pool.annotations,
                BORROWED_GPUS_ANNOTATION,
                gpus.to_string(),
            );
        }
        Decision::place(placement)
    }

    /// On an admit: the job may not be preempted. Only global policies may say so; a
    /// team's policy that does fails the admission closed.
    pub fn not_preemptible(mut self) -> Decision {
        if let Decision::Admit(a) = &mut self {
            a.preemptible = Some(false);
        }
        self
    }

    /// The placement an admit hands on, given the placement the policy was shown
    /// (`None` for queue and reject).
    pub fn placed<'p>(&'p self, given: &'p Placement) -> Option<&'p Placement> {
        match self {
            Decision::Admit(a) => Some(a.placement.as_ref().unwrap_or(given)),
            _ => None,
        }
    }

    /// `reject` with a stable code, a message saying what to change, and the field.
    pub fn reject(code: &str, message: impl Into<String>, field: Option<&str>) -> Decision {
        Decision::Reject(Rejection {
            code: code.to_string(),
            message: message.into(),
            field: field.map(str::to_string),
        })
    }

    /// `queue` with a stable code and a message.
    pub fn queue(code: &str, message: impl Into<String>) -> Decision {
        Decision::Queue(Hold {
            code: code.to_string(),
            message: message.into(),
        })
    }
}

/// The pod annotation that marks an admission as borrowing (the host's
/// `forge_policy_host::model::BORROWED_GPUS_ANNOTATION`): GPUs beyond the team's
/// guarantee.
pub const BORROWED_GPUS_ANNOTATION: &str = "forge.dev/borrowed-gpus";

impl Job {
    /// Machines over all pools.
    pub fn total_nodes(&self) -> u64 {
        self.pools.iter().map(|p| u64::from(p.nodes)).sum()
    }

    /// Value of a job label.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl Request<'_> {
    /// Capacity of one series, if any node carries it.
    pub fn series(&self, name: &str) -> Option<&SeriesCapacity> {
        self.cluster().series.iter().find(|s| s.series == name)
    }

    /// GPUs the team has running on a series.
    pub fn running_gpus(&self, series: &str) -> u32 {
        self.usage()
            .iter()
            .filter(|u| u.series == series)
            .map(|u| u.running)
            .sum()
    }

    /// GPUs this job needs per series, as placed so far (pools without a series are
    /// counted under their requested series, or `None`).
    pub fn gpus_by_series(&self) -> Vec<(Option<String>, u64)> {
        let mut out: Vec<(Option<String>, u64)> = Vec::new();
        let placement = self.placement();
        for (i, pool) in self.job().pools.iter().enumerate() {
            let series = placement
                .pools
                .get(i)
                .and_then(|p| p.series.clone())
                .or_else(|| pool.series.clone());
            let gpus = u64::from(pool.nodes) * u64::from(pool.gpus_per_node);
            match out.iter_mut().find(|(s, _)| *s == series) {
                Some((_, n)) => *n += gpus,
                None => out.push((series, gpus)),
            }
        }
        out
    }
}

impl Placement {
    /// The placement of the pool named `pool`.
    pub fn pool_mut(&mut self, pool: &str) -> Option<&mut PoolPlacement> {
        self.pools.iter_mut().find(|p| p.pool == pool)
    }
}

impl PoolPlacement {
    /// Set (or replace) a node-selector entry.
    pub fn select(&mut self, key: &str, value: &str) {
        upsert(&mut self.node_selector, key, value.to_string());
    }

    /// Set (or replace) a Ray custom resource.
    pub fn ray_resource(&mut self, name: &str, amount: f64) {
        match self.ray_resources.iter_mut().find(|(k, _)| k == name) {
            Some((_, v)) => *v = amount,
            None => self.ray_resources.push((name.to_string(), amount)),
        }
    }

    /// Set (or replace) a pod label.
    pub fn label(&mut self, key: &str, value: &str) {
        upsert(&mut self.labels, key, value.to_string());
    }

    /// Add a toleration (once). Only global policies may add tolerations; a team
    /// policy that does fails the admission closed.
    pub fn tolerate(&mut self, toleration: Toleration) {
        if !self.tolerations.contains(&toleration) {
            self.tolerations.push(toleration);
        }
    }

    /// Require every pod of the pool to run on nodes whose label `key` is one of
    /// `values` (added to each required term, or as the only term). Narrowing: a team
    /// policy may do this.
    pub fn require_label_in(&mut self, key: &str, values: &[&str]) {
        let requirement = NodeSelectorRequirement {
            key: key.to_string(),
            operator: SelectorOperator::IsIn,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        if self.affinity.required.is_empty() {
            self.affinity.required.push(NodeSelectorTerm {
                match_expressions: vec![requirement],
            });
        } else {
            for term in &mut self.affinity.required {
                term.match_expressions.push(requirement.clone());
            }
        }
    }
}

impl Toleration {
    /// The toleration of exactly `taint` (key, value and effect).
    pub fn of(taint: &Taint) -> Toleration {
        Toleration {
            key: Some(taint.key.clone()),
            operator: if taint.value.is_some() {
                TolerationOperator::Equal
            } else {
                TolerationOperator::Exists
            },
            value: taint.value.clone(),
            effect: Some(taint.effect),
        }
    }
}

fn upsert(map: &mut Vec<(String, String)>, key: &str, value: String) {
    match map.iter_mut().find(|(k, _)| k == key) {
        Some((_, v)) => *v = value,
        None => map.push((key.to_string(), value)),
    }
}
