//! Operator-side RayJob validation (`val` ValidateRayJobMetadata / ValidateRayJobSpec in
//! KubeRay v1.7.0, `SEMANTICS.md` §1). These run on every reconcile; a failure makes the
//! RayJob `ValidationFailed` for good, with a Warning event.

use serde_json::Value;

/// `MaxRayJobNameLength` = 53 − 6 (the RayCluster gets a `-xxxxx` suffix and its head
/// pods another suffix).
pub const MAX_RAYJOB_NAME_LENGTH: usize = 47;

/// rayStartParams keys that describe resources; they conflict with the group
/// `resources` map.
const RESOURCE_PARAMS: [&str; 4] = ["num-cpus", "num-gpus", "memory", "resources"];

/// Which check failed; decides the Warning event's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// `InvalidRayJobMetadata`.
    #[error("{0}")]
    Metadata(String),
    /// `InvalidRayJobSpec`.
    #[error("{0}")]
    Spec(String),
}

impl ValidationError {
    /// The event reason (`const`).
    pub fn event_reason(&self) -> &'static str {
        match self {
            Self::Metadata(_) => "InvalidRayJobMetadata",
            Self::Spec(_) => "InvalidRayJobSpec",
        }
    }
}

/// Whether `name` is a DNS-1035 label: `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 chars.
pub fn is_dns1035_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-'
}

/// ValidateRayJobMetadata.
pub fn validate_metadata(name: &str) -> Result<(), ValidationError> {
    if name.len() > MAX_RAYJOB_NAME_LENGTH {
        return Err(ValidationError::Metadata(format!(
            "RayJob name should be no more than {MAX_RAYJOB_NAME_LENGTH} characters"
        )));
    }
    if !is_dns1035_label(name) {
        return Err(ValidationError::Metadata(format!(
            "RayJob name should be a valid DNS1035 label: [a lowercase RFC 1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')] (name {name:?})"
        )));
    }
    Ok(())
}

fn spec_err(msg: impl Into<String>) -> Result<(), ValidationError> {
    Err(ValidationError::Spec(msg.into()))
}

/// ValidateRayJobSpec (the subset that matters for the modes the emulator supports).
pub fn validate_spec(spec: &Value) -> Result<(), ValidationError> {
    let cluster_spec = spec.get("rayClusterSpec").filter(|v| !v.is_null());
    let selector = spec
        .get("clusterSelector")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty());
    let mode = spec
        .get("submissionMode")
        .and_then(Value::as_str)
        .unwrap_or("K8sJobMode");
    let shutdown = spec
        .get("shutdownAfterJobFinishes")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let suspend = spec
        .get("suspend")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let backoff = spec
        .get("backoffLimit")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let ttl = spec
        .get("ttlSecondsAfterFinished")
        .and_then(Value::as_i64)
        .unwrap_or(0);

    if !matches!(
        mode,
        "K8sJobMode" | "HTTPMode" | "InteractiveMode" | "SidecarMode"
    ) {
        return spec_err(format!("invalid SubmissionMode {mode:?}"));
    }
    if cluster_spec.is_none() && selector.is_none() {
        return spec_err("one of RayClusterSpec or ClusterSelector must be set");
    }
    if selector.is_some() && (suspend || mode == "SidecarMode" || backoff > 0) {
        return spec_err(
            "clusterSelector cannot be combined with suspend, SidecarMode or backoffLimit > 0",
        );
    }
    if suspend && !shutdown {
        return spec_err(
            "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended",
        );
    }
    if ttl < 0 {
        return spec_err("TTLSecondsAfterFinished must be a non-negative integer");
    }
    if !shutdown && ttl > 0 {
        return spec_err(
            "a RayJob with shutdownAfterJobFinishes set to false cannot have TTLSecondsAfterFinished",
        );
    }
    if backoff < 0 {
        return spec_err("backoffLimit must be a non-negative integer");
    }
    if mode == "InteractiveMode" && backoff > 0 {
        return spec_err("BackoffLimit is incompatible with InteractiveMode");
    }
    for key in ["activeDeadlineSeconds", "preRunningDeadlineSeconds"] {
        if let Some(v) = spec.get(key).and_then(Value::as_i64)
            && v <= 0
        {
            return spec_err(format!("{key} must be a positive integer"));
        }
    }
    if let Some(yaml) = spec.get("runtimeEnvYAML").and_then(Value::as_str)
        && let Err(e) = serde_yaml::from_str::<serde_yaml::Value>(yaml)
    {
        return spec_err(format!("failed to unmarshal RuntimeEnvYAML: {e}"));
    }
    let has_rules = spec
        .pointer("/deletionStrategy/deletionRules")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty());
    if has_rules && shutdown {
        return spec_err(
            "The RayJob spec is invalid: spec.shutdownAfterJobFinishes and spec.deletionStrategy.deletionRules are mutually exclusive",
        );
    }
    if let Some(cs) = cluster_spec {
        validate_cluster_spec(cs)?;
    }
    Ok(())
}

fn validate_group(
    params: Option<&Value>,
    resources: Option<&Value>,
    what: &str,
) -> Result<(), ValidationError> {
    let params = params.and_then(Value::as_object);
    if params.is_some_and(|p| p.contains_key("labels")) {
        return spec_err(format!(
            "rayStartParams['labels'] is not supported for {what}. Please use the labels field instead"
        ));
    }
    let has_resources = resources
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty());
    if has_resources
        && let Some(p) = params
        && let Some(k) = RESOURCE_PARAMS.iter().find(|k| p.contains_key(**k))
    {
        return spec_err(format!(
            "rayStartParams['{k}'] is not allowed together with the resources field for {what}"
        ));
    }
    Ok(())
}

/// ValidateRayClusterSpec (the parts a RayJob's `rayClusterSpec` is checked for).
pub fn validate_cluster_spec(cs: &Value) -> Result<(), ValidationError> {
    let autoscaling = cs
        .get("enableInTreeAutoscaling")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let head = cs
        .get("headGroupSpec")
        .ok_or_else(|| ValidationError::Spec("headGroupSpec is required".into()))?;
    let head_containers = head
        .pointer("/template/spec/containers")
        .and_then(Value::as_array);
    if head_containers.is_none_or(Vec::is_empty) {
        return spec_err("headGroupSpec should have at least one container");
    }
    validate_group(
        head.get("rayStartParams"),
        head.get("resources"),
        "the head group",
    )?;
    let mut names = std::collections::BTreeSet::new();
    for g in cs
        .get("workerGroupSpecs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = g.get("groupName").and_then(Value::as_str).unwrap_or("");
        if !names.insert(name.to_owned()) {
            return spec_err(format!(
                "worker group names must be unique, found duplicate {name:?}"
            ));
        }
        if g.pointer("/template/spec/containers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            return spec_err(format!(
                "workerGroupSpec {name} should have at least one container"
            ));
        }
        validate_group(
            g.get("rayStartParams"),
            g.get("resources"),
            &format!("worker group {name}"),
        )?;
        let min = g.get("minReplicas").and_then(Value::as_i64);
        let max = g.get("maxReplicas").and_then(Value::as_i64);
        if !autoscaling && (min.is_none() || max.is_none()) {
            return spec_err(format!(
                "worker group {name} must set both minReplicas and maxReplicas when autoscaling is disabled"
            ));
        }
        if let (Some(min), Some(max)) = (min, max)
            && min > max
        {
            return spec_err(format!(
                "worker group {name} has minReplicas {min} greater than maxReplicas {max}"
            ));
        }
        if g.get("numOfHosts")
            .and_then(Value::as_i64)
            .is_some_and(|n| n <= 0)
        {
            return spec_err(format!("worker group {name} has numOfHosts <= 0"));
        }
    }
    if !autoscaling {
        let v2_env = head_containers.into_iter().flatten().any(|c| {
            c.get("env")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|e| e.get("name").and_then(Value::as_str) == Some("RAY_enable_autoscaler_v2"))
        });
        if v2_env {
            return spec_err(
                "RAY_enable_autoscaler_v2 env var is set but enableInTreeAutoscaling is false",
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "entrypoint": "python /home/ray/samples/sample_code.py",
            "shutdownAfterJobFinishes": true,
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}},
                "workerGroupSpecs": [{"groupName": "small-group", "replicas": 1, "minReplicas": 1, "maxReplicas": 5,
                    "rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.46.0"}]}}}]
            }
        })
    }

    #[test]
    fn name_limits() {
        assert!(validate_metadata(&"a".repeat(47)).is_ok());
        let e = validate_metadata(&"a".repeat(48)).expect_err("48 chars");
        assert_eq!(e.event_reason(), "InvalidRayJobMetadata");
        assert!(e.to_string().contains("47"), "{e}");
        assert!(validate_metadata("1abc").is_err());
        assert!(validate_metadata("Abc").is_err());
        assert!(validate_metadata("abc-").is_err());
        assert!(validate_metadata("rayjob-sample").is_ok());
    }

    #[test]
    fn sample_is_valid() {
        assert_eq!(validate_spec(&sample()), Ok(()));
    }

    #[test]
    fn rejects_conflicts() {
        let mut s = sample();
        s["rayClusterSpec"]["workerGroupSpecs"][0]["resources"] = json!({"nvidia.com/gpu": "1"});
        s["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"] = json!({"num-gpus": "1"});
        let e = validate_spec(&s).expect_err("conflict");
        assert_eq!(e.event_reason(), "InvalidRayJobSpec");
        assert!(e.to_string().contains("num-gpus"), "{e}");

        let mut s = sample();
        s["rayClusterSpec"]["headGroupSpec"]["rayStartParams"] = json!({"labels": "a=b"});
        assert!(validate_spec(&s).is_err());

        let mut s = sample();
        s["rayClusterSpec"]["workerGroupSpecs"][0]
            .as_object_mut()
            .expect("object")
            .remove("maxReplicas");
        assert!(validate_spec(&s).is_err());
        s["rayClusterSpec"]["enableInTreeAutoscaling"] = json!(true);
        assert!(validate_spec(&s).is_ok());

        let mut s = sample();
        s["shutdownAfterJobFinishes"] = json!(false);
        s["ttlSecondsAfterFinished"] = json!(10);
        assert!(validate_spec(&s).is_err());

        let mut s = sample();
        s["runtimeEnvYAML"] = json!("a: [unclosed");
        assert!(validate_spec(&s).is_err());

        let mut s = sample();
        s.as_object_mut().expect("object").remove("rayClusterSpec");
        assert!(validate_spec(&s).is_err());
    }
}
