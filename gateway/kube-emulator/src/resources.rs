//! The table of API resources the emulator serves: group/version, plural, kind,
//! scope, short names, subresources and the field selectors each one supports, and
//! the NotFound / Conflict / Invalid errors about one of its objects.

use crate::error::{ApiError, Cause};

/// One served resource type.
#[derive(Debug)]
pub struct Resource {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural (URL segment).
    pub plural: &'static str,
    /// Singular name.
    pub singular: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for discovery (`kubectl get po`).
    pub short_names: &'static [&'static str],
    /// Discovery categories.
    pub categories: &'static [&'static str],
    /// Has a `/status` subresource (main resource ignores status changes and vice versa).
    pub status_subresource: bool,
    /// A ray.io custom resource validated against the embedded CRD schema.
    pub crd: bool,
    /// Extra field selector keys besides `metadata.name` / `metadata.namespace`.
    pub field_selectors: &'static [&'static str],
}

impl Resource {
    /// `apiVersion` string (`v1`, `batch/v1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `<Kind>List`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether `metadata.generation` is maintained (bumped on spec changes); the real
    /// registry strategies of these kinds leave it unset.
    pub fn tracks_generation(&self) -> bool {
        !matches!(
            self.kind,
            "Event"
                | "Namespace"
                | "Node"
                | "Lease"
                | "ConfigMap"
                | "Secret"
                | "PersistentVolumeClaim"
        )
    }

    /// 404 NotFound for object `name` of this resource.
    pub fn not_found(&self, name: &str) -> ApiError {
        ApiError::NotFound {
            resource: self.plural.into(),
            group: self.group.into(),
            name: name.into(),
        }
    }

    /// 409 Conflict on object `name` of this resource.
    pub fn conflict(&self, name: &str, detail: impl Into<String>) -> ApiError {
        ApiError::Conflict {
            resource: self.plural.into(),
            group: self.group.into(),
            name: name.into(),
            detail: detail.into(),
        }
    }

    /// 422 Invalid for object `name` of this resource.
    pub fn invalid(&self, name: &str, causes: Vec<Cause>) -> ApiError {
        ApiError::Invalid {
            kind: self.kind.into(),
            group: self.group.into(),
            name: name.into(),
            causes,
        }
    }
}

const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingComponent",
    "reportingController",
    "source",
    "type",
];

/// All served resources. Indices into this table identify a resource in the store.
pub static RESOURCES: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        status_subresource: true,
        crd: false,
        field_selectors: &["status.phase"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        categories: &[],
        status_subresource: true,
        crd: false,
        field_selectors: &["spec.unschedulable"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        categories: &["all"],
        status_subresource: true,
        crd: false,
        field_selectors: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        status_subresource: false,
        crd: false,
        field_selectors: EVENT_FIELDS,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        categories: &["all"],
        status_subresource: true,
        crd: false,
        field_selectors: &["spec.clusterIP", "spec.type"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        categories: &[],
        status_subresource: false,
        crd: false,
        field_selectors: &[],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        categories: &[],
        status_subresource: false,
        crd: false,
        field_selectors: &["type"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        short_names: &["pvc"],
        categories: &[],
        status_subresource: true,
        crd: false,
        field_selectors: &[],
    },
    Resource {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        status_subresource: false,
        crd: false,
        field_selectors: EVENT_FIELDS,
    },
    Resource {
        group: "batch",
        version: "v1",
        plural: "jobs",
        singular: "job",
        kind: "Job",
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        status_subresource: true,
        crd: false,
        field_selectors: &["status.successful"],
    },
    Resource {
        group: "ray.io",
        version: "v1",
        plural: "rayjobs",
        singular: "rayjob",
        kind: "RayJob",
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        status_subresource: true,
        crd: true,
        field_selectors: &[],
    },
    Resource {
        group: "ray.io",
        version: "v1",
        plural: "rayclusters",
        singular: "raycluster",
        kind: "RayCluster",
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        status_subresource: true,
        crd: true,
        field_selectors: &[],
    },
    // Leader election (`kubectl get lease`): stored as written, no controller.
    Resource {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        categories: &[],
        status_subresource: false,
        crd: false,
        field_selectors: &[],
    },
    Resource {
        group: "networking.k8s.io",
        version: "v1",
        plural: "networkpolicies",
        singular: "networkpolicy",
        kind: "NetworkPolicy",
        namespaced: true,
        short_names: &["netpol"],
        categories: &[],
        status_subresource: false,
        crd: false,
        field_selectors: &[],
    },
];

/// Index of a resource in [`RESOURCES`].
pub type ResId = usize;

/// Finds a resource by group, version and plural.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<ResId> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource with this index.
pub fn res(id: ResId) -> &'static Resource {
    &RESOURCES[id]
}

/// Index of a resource by kind and apiVersion (used for ownerReferences).
pub fn by_kind(api_version: &str, kind: &str) -> Option<ResId> {
    RESOURCES
        .iter()
        .position(|r| r.kind == kind && r.api_version() == api_version)
}

/// Well-known index of namespaces.
pub const NAMESPACES: ResId = 0;
/// Well-known index of nodes.
pub const NODES: ResId = 1;
/// Well-known index of pods.
pub const PODS: ResId = 2;
