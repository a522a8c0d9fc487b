//! Worker-group sizing and the `ray start` command line KubeRay generates
//! (`util` GetWorkerGroupDesiredReplicas, `pod.go` convertParamMap /
//! generateRayStartCommand / updateRayStartParamsResources; `SEMANTICS.md` §6).

use std::collections::BTreeMap;

use serde_json::Value;

use super::quantity::{ceil_units, parse_milli};

/// Desired pods of a worker group: clamp(replicas, min, max) × numOfHosts; 0 when the
/// group is suspended. Defaults follow the CRD (replicas 0, min 0, max MaxInt32,
/// numOfHosts 1).
pub fn desired_worker_pods(group: &Value) -> i64 {
    if group
        .get("suspend")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        return 0;
    }
    let min = group
        .get("minReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let max = group
        .get("maxReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(i64::from(i32::MAX));
    let replicas = group.get("replicas").and_then(Value::as_i64).unwrap_or(0);
    let hosts = group
        .get("numOfHosts")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(1);
    let clamped = if min > max {
        max
    } else {
        replicas.clamp(min, max)
    };
    clamped.max(0) * hosts
}

/// Sum of desired worker pods over all groups of a RayCluster spec.
pub fn desired_workers_total(cluster_spec: &Value) -> i64 {
    cluster_spec
        .get("workerGroupSpecs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(desired_worker_pods)
        .sum()
}

fn is_gpu_key(key: &str) -> bool {
    key.ends_with("gpu") || (key.starts_with("nvidia.com/mig-") && key.ends_with("gb"))
}

/// Resource quantities of container[0] (`limits` first, then `requests`).
fn container_quantity(container: &Value, key: &str, limits_only: bool) -> Option<i128> {
    let from = |section: &str| {
        container
            .pointer(&format!("/resources/{section}"))
            .and_then(Value::as_object)
            .and_then(|m| m.get(key))
            .and_then(|q| match q {
                Value::String(s) => parse_milli(s).ok(),
                Value::Number(n) => n.as_f64().map(|f| (f * 1000.0).ceil() as i128),
                _ => None,
            })
    };
    from("limits").or_else(|| if limits_only { None } else { from("requests") })
}

/// The effective rayStartParams of a group: the user's map, the group `resources` map
/// translated, and the derived/added defaults.
pub fn effective_params(
    group: &Value,
    is_head: bool,
    head_service_fqdn: &str,
) -> BTreeMap<String, String> {
    let mut params: BTreeMap<String, String> = group
        .get("rayStartParams")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    // Group `resources` map → num-cpus / memory / num-gpus / resources JSON.
    if let Some(res) = group.get("resources").and_then(Value::as_object) {
        let mut custom = serde_json::Map::new();
        for (k, v) in res {
            let q = v.as_str().and_then(|s| parse_milli(s).ok()).unwrap_or(0);
            match k.as_str() {
                "cpu" => {
                    params.insert("num-cpus".into(), ceil_units(q).to_string());
                }
                "memory" => {
                    params.insert("memory".into(), (q / 1000).to_string());
                }
                key if is_gpu_key(key) => {
                    params.insert("num-gpus".into(), ceil_units(q).to_string());
                }
                key => {
                    custom.insert(key.to_owned(), Value::from(ceil_units(q) as i64));
                }
            }
        }
        if !custom.is_empty() {
            params.insert("resources".into(), format!("'{}'", Value::Object(custom)));
        }
    }
    let container = group
        .pointer("/template/spec/containers/0")
        .cloned()
        .unwrap_or(Value::Null);
    if !params.contains_key("num-cpus")
        && let Some(cpu) = container_quantity(&container, "cpu", false)
    {
        params.insert("num-cpus".into(), ceil_units(cpu).to_string());
    }
    if !params.contains_key("memory")
        && let Some(mem) = container_quantity(&container, "memory", true)
    {
        params.insert("memory".into(), (mem / 1000).to_string());
    }
    if !params.contains_key("num-gpus") {
        let limits = container
            .pointer("/resources/limits")
            .and_then(Value::as_object);
        if let Some((_, q)) = limits.into_iter().flatten().find(|(k, _)| is_gpu_key(k))
            && let Some(q) = q.as_str().and_then(|s| parse_milli(s).ok())
            && q > 0
        {
            params.insert("num-gpus".into(), ceil_units(q).to_string());
        }
    }
    params
        .entry("metrics-export-port".into())
        .or_insert_with(|| "8080".into());
    params
        .entry("dashboard-agent-listen-port".into())
        .or_insert_with(|| "52365".into());
    if is_head {
        params
            .entry("dashboard-host".into())
            .or_insert_with(|| "0.0.0.0".into());
    } else {
        params
            .entry("address".into())
            .or_insert_with(|| format!("{head_service_fqdn}:6379"));
    }
    params.insert("block".into(), "true".into());
    params
}

/// convertParamMap: sorted `--key=value` flags; `"true"` → bare flag, `"false"` dropped
/// except for the three flags that take an explicit boolean.
pub fn convert_params(params: &BTreeMap<String, String>) -> String {
    let mut out = Vec::new();
    for (k, v) in params {
        match v.to_lowercase().as_str() {
            "true" => out.push(format!("--{k}")),
            "false" => {
                if matches!(
                    k.as_str(),
                    "log-color" | "include-dashboard" | "include-log-monitor"
                ) {
                    out.push(format!("--{k}={v}"));
                }
            }
            _ => out.push(format!("--{k}={v}")),
        }
    }
    out.join(" ")
}

/// The Ray container's shell command: `ulimit -n 65536; ray start [--head] <flags>`.
pub fn ray_start_command(params: &BTreeMap<String, String>, is_head: bool) -> String {
    let head = if is_head { " --head" } else { "" };
    format!(
        "ulimit -n 65536; ray start{head} {}",
        convert_params(params)
    )
}

/// Σ of a resource over the desired pods of a cluster (`status.desiredCPU` & co).
pub fn desired_resource(cluster_spec: &Value, key: &str) -> i128 {
    let of = |group: &Value, n: i64| {
        let c = group
            .pointer("/template/spec/containers/0")
            .cloned()
            .unwrap_or(Value::Null);
        let q = if is_gpu_key(key) {
            container_quantity(&c, key, true)
        } else {
            container_quantity(&c, key, false)
        };
        q.unwrap_or(0) * i128::from(n)
    };
    let head = cluster_spec
        .get("headGroupSpec")
        .map(|h| of(h, 1))
        .unwrap_or(0);
    let workers: i128 = cluster_spec
        .get("workerGroupSpecs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|g| of(g, desired_worker_pods(g)))
        .sum();
    head + workers
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn desired_replicas_clamp_and_multiply() {
        assert_eq!(
            desired_worker_pods(&json!({"replicas": 3, "minReplicas": 1, "maxReplicas": 5})),
            3
        );
        assert_eq!(
            desired_worker_pods(&json!({"replicas": 9, "minReplicas": 1, "maxReplicas": 5})),
            5
        );
        assert_eq!(
            desired_worker_pods(&json!({"replicas": 0, "minReplicas": 2, "maxReplicas": 5})),
            2
        );
        assert_eq!(
            desired_worker_pods(
                &json!({"replicas": 2, "minReplicas": 1, "maxReplicas": 5, "numOfHosts": 4})
            ),
            8
        );
        assert_eq!(
            desired_worker_pods(&json!({"replicas": 2, "suspend": true})),
            0
        );
        assert_eq!(desired_worker_pods(&json!({})), 0);
    }

    #[test]
    fn params_become_sorted_flags() {
        let group = json!({
            "rayStartParams": {"num-cpus": "1", "log-color": "false", "disable-usage-stats": "true", "foo": "false"},
            "template": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}}}]}}
        });
        let p = effective_params(&group, false, "c-head-svc.ns.svc.cluster.local");
        assert_eq!(
            convert_params(&p),
            "--address=c-head-svc.ns.svc.cluster.local:6379 --block --dashboard-agent-listen-port=52365 \
             --disable-usage-stats --log-color=false --memory=1073741824 --metrics-export-port=8080 \
             --num-cpus=1 --num-gpus=2"
        );
        let head = effective_params(&json!({"rayStartParams": {}}), true, "x");
        assert_eq!(
            head.get("dashboard-host").map(String::as_str),
            Some("0.0.0.0")
        );
        assert!(
            ray_start_command(&head, true).starts_with("ulimit -n 65536; ray start --head --block")
        );
    }

    #[test]
    fn group_resources_map_translates() {
        let group = json!({"resources": {"cpu": "500m", "nvidia.com/gpu": "1", "custom": "2"}, "rayStartParams": {}});
        let p = effective_params(&group, true, "x");
        assert_eq!(p.get("num-cpus").map(String::as_str), Some("1"));
        assert_eq!(p.get("num-gpus").map(String::as_str), Some("1"));
        assert_eq!(
            p.get("resources").map(String::as_str),
            Some("'{\"custom\":2}'")
        );
    }

    #[test]
    fn desired_gpu_sums_limits() {
        let spec = json!({
            "headGroupSpec": {"template": {"spec": {"containers": [{"resources": {"limits": {"cpu": "2"}}}]}}},
            "workerGroupSpecs": [{"replicas": 2, "minReplicas": 0, "maxReplicas": 4,
                "template": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "4", "cpu": "8"}}}]}}}]
        });
        assert_eq!(desired_resource(&spec, "nvidia.com/gpu"), 8000);
        assert_eq!(desired_resource(&spec, "cpu"), 18000);
        assert_eq!(desired_workers_total(&spec), 2);
    }
}
