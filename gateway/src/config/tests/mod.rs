//! Tests of the configuration: defaults, one test per rejection, the config file
//! (TOML and YAML, budgets, no secrets in errors) and the table's own consistency.

use std::collections::HashMap;
use std::path::PathBuf;

use super::descriptor::{Fallback, Name};
use super::draft::Draft;
use super::model::{
    DatabaseConfig, GatewayConfig, K8sConfig, KubeRayConfig, LeaderConfig, PodsConfig,
    StorageConfig,
};
use super::reading::MAX_FILE_BYTES;
use super::vars::VARS;
use super::*;

mod fleets;

fn base() -> HashMap<String, String> {
    HashMap::from([
        (
            "FORGE_IMAGE_NEMO_RL".to_string(),
            "registry.internal/starforge/nemo-rl:v0.7.0".to_string(),
        ),
        (
            "FORGE_KUBERAY_RAY_VERSION".to_string(),
            "2.55.1".to_string(),
        ),
    ])
}

fn with(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    let mut m = base();
    for (k, v) in pairs {
        m.insert(k.to_string(), v.to_string());
    }
    m
}

fn errors(pairs: &[(&str, &str)]) -> Vec<ConfigError> {
    match Config::from_env_map(with(pairs)) {
        Ok(c) => panic!("expected errors, got {c:?}"),
        Err(ConfigErrors(e)) => e,
    }
}

fn only_error_var(pairs: &[(&str, &str)]) -> String {
    let e = errors(pairs);
    assert_eq!(e.len(), 1, "{e:?}");
    e[0].var().to_string()
}

/// Loads [`base`] plus `pairs`, with `FORGE_CONFIG_FILE` naming a file `name` that
/// holds `text` (in a temporary directory).
fn load_with_file(name: &str, text: &str, pairs: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    let mut env = with(pairs);
    env.insert(
        CONFIG_FILE.to_string(),
        path.to_str().expect("utf-8").to_string(),
    );
    Config::from_env_map(env)
}

/// The problems of loading with a config file (see [`load_with_file`]).
fn file_errors(name: &str, text: &str) -> Vec<ConfigError> {
    match load_with_file(name, text, &[]) {
        Ok(c) => panic!("expected errors from {name}, got {c:?}"),
        Err(ConfigErrors(e)) => e,
    }
}

#[test]
fn defaults_apply() {
    let c = Config::from_env_map(base()).expect("valid");
    let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    let expected = Config {
        fleet_kind: FleetKind::Kuberay,
        fleets: None,
        images: [(
            "nemo-rl".to_string(),
            "registry.internal/starforge/nemo-rl:v0.7.0".to_string(),
        )]
        .into(),
        nemo_rl_dir: None,
        k8s: K8sConfig {
            api_server: None,
            token: None,
            ca_file: None,
            insecure_skip_tls_verify: false,
            namespace: "starforge".into(),
            gpu_node_label: "starforge/gpu-series".into(),
            shm_size: "64Gi".into(),
            gpu_passthrough: true,
            operator_namespace: "kuberay-system".into(),
            run_as_user: Some(1000),
        },
        pods: PodsConfig {
            cpus_per_node: PerSeries {
                fallback: Some(8),
                series: Default::default(),
            },
            memory_per_node: PerSeries {
                fallback: Some(32 << 30),
                series: Default::default(),
            },
            object_store_memory: PerSeries::default(),
            tolerations: Vec::new(),
            gpu_count_label: "starforge/gpu-count".into(),
            gpus_per_node: PerSeries::default(),
        },
        storage: StorageConfig {
            root: "/starforge".into(),
            pvc: None,
            shared: true,
            corpus_pvc: None,
            mount: None,
            common_subpath: None,
        },
        kuberay: KubeRayConfig {
            ray_version: Some("2.55.1".into()),
            ttl_seconds: 600,
            prerunning_deadline_s: 1800,
        },
        s3: None,
        database: DatabaseConfig {
            url: None,
            instance: None,
            replica: None,
        },
        leader: LeaderConfig {
            lease_ms: 15_000,
            renew_deadline_ms: 10_000,
            retry_ms: 2_000,
        },
        gateway: GatewayConfig {
            listen: "127.0.0.1:8080".parse().expect("addr"),
            data_dir: PathBuf::from("./forge-data"),
            tokens_file: None,
            metrics_token: None,
            policy_deadline_ms: 50,
            policy_memory_mib: 32,
            policy_max_memory_mib: 256,
            policy_max_deadline_ms: 1000,
            policy_concurrency: cpus,
            policy_isolation: forge_policy_host::Isolation::Warm,
            policy_verify_every: 0,
            policy_sync_ms: 1000,
            plugin_max_kib: 32768,
            team_plugin_max_count: 20,
            team_plugin_max_mib: 256,
            plugin_failed_uploads_per_hour: 20,
            plugin_compile_workers: 1,
            plugin_compile_timeout_s: 120,
            policy_max_chain_links: 16,
            max_body_mib: 256,
            max_document_kib: 1024,
            max_field_errors: 20,
            submissions_per_minute: 600,
            max_queued_per_team: 1000,
            body_idle_timeout_s: 60,
            log_archive_max_bytes_per_pod: 16 << 20,
            retention_rejected_s: 2_592_000,
            retention_logs_s: 2_592_000,
            retention_capsules_s: 1_209_600,
            retention_sweep_s: 3600,
            preemption_max_grace_s: 600,
            preemption_window_s: 3600,
            preemption_max_in_window: 3,
            fair_share_half_life_s: 604_800,
            playground_min_ttl_s: 60,
            playground_startup_s: 1800,
            upload_max_sessions: 4,
            upload_ttl_s: 86400,
            capsule_init_image: "busybox:1.36".into(),
            public_url: None,
            policy_chain_file: None,
        },
    };
    assert_eq!(c, expected);
    assert_eq!(c.storage.mount_path(), "/starforge");
    assert_eq!(
        c.gateway.tokens_path(),
        PathBuf::from("./forge-data/tokens.yaml")
    );
    assert_eq!(
        c.image_for("nemo-rl"),
        Some("registry.internal/starforge/nemo-rl:v0.7.0")
    );
}

#[test]
fn every_default_parses() {
    for var in VARS {
        let Name::Exact(name) = var.name else {
            continue;
        };
        let value = match var.fallback {
            Fallback::Unset(_) => continue,
            Fallback::Value(v) => v.to_string(),
            Fallback::Computed { value, .. } => value(),
        };
        let mut draft = Draft::blank();
        assert_eq!(
            (var.apply)(&mut draft, name, &value),
            Ok(()),
            "{name}: default `{value}`"
        );
    }
}

#[test]
fn full_seed_config_is_accepted() {
    let c = Config::from_env_map(with(&[
        ("FORGE_DEFAULT_FLEET_KIND", "kuberay"),
        ("FORGE_IMAGE_VERL", "registry.internal/verl:1"),
        ("FORGE_NEMO_RL_DIR", "/opt/nemo-rl"),
        ("FORGE_K8S_API_SERVER", "https://10.0.0.1:6443"),
        ("FORGE_K8S_TOKEN", "sa-token-value"),
        ("FORGE_K8S_NAMESPACE", "team-a"),
        ("FORGE_K8S_SHM_SIZE", "16Gi"),
        ("FORGE_STORAGE_ROOT", "/starforge"),
        ("FORGE_K8S_STORAGE_PVC", "starforge-storage"),
        ("FORGE_K8S_STORAGE_SHARED", "false"),
        ("FORGE_K8S_CORPUS_PVC", "starforge-corpus"),
        ("FORGE_K8S_STORAGE_MOUNT", "/storage/"),
        ("FORGE_KUBERAY_TTL_SECONDS", "0"),
        ("FORGE_K8S_GPU_PASSTHROUGH", "0"),
        ("FORGE_S3_ENDPOINT", "http://127.0.0.1:9000"),
        ("FORGE_S3_BUCKET", "starforge"),
        ("FORGE_S3_ACCESS_KEY", "AKIAEXAMPLE"),
        ("FORGE_S3_SECRET_KEY", "very-secret-key"),
        ("FORGE_LISTEN", "0.0.0.0:9090"),
        ("FORGE_PUBLIC_URL", "https://forge.example"),
    ]))
    .expect("valid");
    assert_eq!(c.images.len(), 2);
    assert_eq!(c.image_for("verl"), Some("registry.internal/verl:1"));
    assert!(!c.storage.shared);
    assert!(!c.k8s.gpu_passthrough);
    assert_eq!(c.storage.mount_path(), "/storage");
    assert_eq!(c.storage.corpus_mount_path(), "/storage/corpus");
    assert_eq!(c.kuberay.ttl_seconds, 0);
    let s3 = c.s3.as_ref().expect("s3");
    assert_eq!(s3.secret_key.expose(), "very-secret-key");
    let debug = format!("{c:?}");
    for secret in ["sa-token-value", "AKIAEXAMPLE", "very-secret-key"] {
        assert!(!debug.contains(secret), "secret leaked in Debug: {debug}");
    }
    assert!(debug.contains("<redacted>"));
}

#[test]
fn no_secret_variable_shows_in_debug() {
    let env = with(&[
        ("FORGE_K8S_API_SERVER", "https://10.0.0.1:6443"),
        ("FORGE_K8S_TOKEN", "secret-token-value"),
        ("FORGE_S3_ENDPOINT", "http://127.0.0.1:9000"),
        ("FORGE_S3_BUCKET", "starforge"),
        ("FORGE_S3_ACCESS_KEY", "secret-access-value"),
        ("FORGE_S3_SECRET_KEY", "secret-key-value"),
        (
            "FORGE_DATABASE_URL",
            "postgres://forge:secret-db-password@db:5432/forge",
        ),
        ("FORGE_METRICS_TOKEN", "secret-metrics-value"),
    ]);
    let debug = format!("{:?}", Config::from_env_map(env.clone()).expect("valid"));
    for var in VARS.iter().filter(|v| v.secret) {
        let name = var.name.shown();
        let value = env
            .get(name)
            .unwrap_or_else(|| panic!("add a value for the secret {name} to this test"));
        assert!(
            !debug.contains(value.as_str()),
            "{name} leaked in Debug: {debug}"
        );
    }
}

#[test]
fn image_var_maps_to_framework_name() {
    assert_eq!(
        framework_of_image_var("FORGE_IMAGE_NEMO_RL").as_deref(),
        Some("nemo-rl")
    );
    assert_eq!(framework_of_image_var("FORGE_LISTEN"), None);
}

#[test]
fn all_problems_reported_at_once() {
    let e = errors(&[
        ("FORGE_POLICY_DEADLINE_MS", "0"),
        ("FORGE_K8S_SHM_SIZE", "lots"),
        ("FORGE_K8S_TOKEN", "t"),
        ("FORGE_S3_BUCKET", "b"),
    ]);
    let vars: Vec<&str> = e.iter().map(ConfigError::var).collect();
    assert_eq!(e.len(), 4, "{e:?}");
    for v in [
        "FORGE_POLICY_DEADLINE_MS",
        "FORGE_K8S_SHM_SIZE",
        "FORGE_K8S_TOKEN",
        "FORGE_S3_*",
    ] {
        assert!(vars.contains(&v), "{v} missing in {vars:?}");
    }
    let text = ConfigErrors(e).to_string();
    assert!(text.contains("4 problem(s)"), "{text}");
    assert_eq!(
        text.lines().count(),
        5,
        "a count, then one problem a line: {text}"
    );
}

#[test]
fn one_problem_is_one_line() {
    let e = errors(&[("FORGE_POLICY_DEADLINE_MS", "soon")]);
    assert_eq!(e.len(), 1, "{e:?}");
    let text = ConfigErrors(e).to_string();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("invalid configuration: ") && text.contains("FORGE_POLICY_DEADLINE_MS"),
        "{text}"
    );
}

#[test]
fn rejects_partial_s3() {
    let e = errors(&[
        ("FORGE_S3_ENDPOINT", "http://127.0.0.1:9000"),
        ("FORGE_S3_SECRET_KEY", "hunter2"),
    ]);
    assert_eq!(
        e,
        vec![ConfigError::Partial {
            group: "FORGE_S3_*".to_string(),
            missing: vec![
                "FORGE_S3_BUCKET".to_string(),
                "FORGE_S3_ACCESS_KEY".to_string()
            ],
        }]
    );
    assert!(!format!("{e:?}").contains("hunter2"));
}

#[test]
fn rejects_bad_s3_endpoint() {
    let var = only_error_var(&[
        ("FORGE_S3_ENDPOINT", "ftp://x"),
        ("FORGE_S3_BUCKET", "bucket"),
        ("FORGE_S3_ACCESS_KEY", "a"),
        ("FORGE_S3_SECRET_KEY", "s"),
    ]);
    assert_eq!(var, "FORGE_S3_ENDPOINT");
}

#[test]
fn rejects_a_body_limit_below_an_s3_part() {
    let var = only_error_var(&[
        ("FORGE_S3_ENDPOINT", "http://x:9000"),
        ("FORGE_S3_BUCKET", "bucket"),
        ("FORGE_S3_ACCESS_KEY", "a"),
        ("FORGE_S3_SECRET_KEY", "s"),
        ("FORGE_MAX_BODY_MIB", "4"),
    ]);
    assert_eq!(var, "FORGE_MAX_BODY_MIB");
}

#[test]
fn rejects_bad_s3_bucket() {
    let var = only_error_var(&[
        ("FORGE_S3_ENDPOINT", "http://x:9000"),
        ("FORGE_S3_BUCKET", "Bad_Bucket"),
        ("FORGE_S3_ACCESS_KEY", "a"),
        ("FORGE_S3_SECRET_KEY", "s"),
    ]);
    assert_eq!(var, "FORGE_S3_BUCKET");
}

#[test]
fn rejects_token_without_api_server() {
    let e = errors(&[("FORGE_K8S_TOKEN", "secret-token")]);
    assert!(
        matches!(&e[..], [ConfigError::Requires { var, requires, .. }]
        if var == "FORGE_K8S_TOKEN" && requires == "FORGE_K8S_API_SERVER")
    );
    assert!(!e[0].to_string().contains("secret-token"));
}

#[test]
fn rejects_tls_options_without_api_server() {
    let e = errors(&[
        ("FORGE_K8S_CA_FILE", "/etc/ca.pem"),
        ("FORGE_K8S_INSECURE_SKIP_TLS_VERIFY", "true"),
    ]);
    let vars: Vec<&str> = e.iter().map(ConfigError::var).collect();
    assert_eq!(
        vars,
        ["FORGE_K8S_CA_FILE", "FORGE_K8S_INSECURE_SKIP_TLS_VERIFY"]
    );
    assert_eq!(
        only_error_var(&[
            ("FORGE_K8S_API_SERVER", "https://10.0.0.1:6443"),
            ("FORGE_K8S_CA_FILE", "ca.pem"),
        ]),
        "FORGE_K8S_CA_FILE",
        "a relative CA path"
    );
    let c = Config::from_env_map(with(&[
        ("FORGE_K8S_API_SERVER", "https://10.0.0.1:6443"),
        ("FORGE_K8S_TOKEN", "t"),
        ("FORGE_K8S_CA_FILE", "/etc/forge/ca.pem"),
    ]))
    .expect("valid");
    assert_eq!(c.k8s.ca_file, Some(PathBuf::from("/etc/forge/ca.pem")));
}

#[test]
fn database_url_and_identities() {
    let c = Config::from_env_map(with(&[
        (
            "FORGE_DATABASE_URL",
            "postgresql://forge:pw@db.internal/forge?sslmode=verify-full",
        ),
        ("FORGE_INSTANCE", "prod-eu"),
        ("FORGE_REPLICA", "forge-gateway-7d9f-abcde"),
    ]))
    .expect("valid");
    assert!(c.database.url.is_some());
    assert_eq!(c.database.instance.as_deref(), Some("prod-eu"));
    assert_eq!(
        c.database.replica.as_deref(),
        Some("forge-gateway-7d9f-abcde")
    );
    let e = errors(&[("FORGE_DATABASE_URL", "mysql://forge:hunter2@db/forge")]);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].var(), "FORGE_DATABASE_URL");
    assert!(!e[0].to_string().contains("hunter2"), "{}", e[0]);
    for bad in ["-prod", "has space", &"x".repeat(64)] {
        assert_eq!(only_error_var(&[("FORGE_INSTANCE", bad)]), "FORGE_INSTANCE");
    }
    assert_eq!(
        only_error_var(&[("FORGE_REPLICA", "two words")]),
        "FORGE_REPLICA"
    );
}

#[test]
fn leader_timings_must_nest() {
    let c = Config::from_env_map(with(&[
        ("FORGE_LEADER_LEASE_MS", "3000"),
        ("FORGE_LEADER_RENEW_DEADLINE_MS", "2000"),
        ("FORGE_LEADER_RETRY_MS", "250"),
    ]))
    .expect("valid");
    assert_eq!(
        (
            c.leader.lease_ms,
            c.leader.renew_deadline_ms,
            c.leader.retry_ms
        ),
        (3000, 2000, 250)
    );
    assert_eq!(
        only_error_var(&[("FORGE_LEADER_RENEW_DEADLINE_MS", "15000")]),
        "FORGE_LEADER_RENEW_DEADLINE_MS"
    );
    assert_eq!(
        only_error_var(&[("FORGE_LEADER_RETRY_MS", "10000")]),
        "FORGE_LEADER_RETRY_MS"
    );
    assert_eq!(
        only_error_var(&[("FORGE_LEADER_LEASE_MS", "0")]),
        "FORGE_LEADER_LEASE_MS"
    );
}

#[test]
fn rejects_api_server_that_is_not_a_url() {
    assert_eq!(
        only_error_var(&[("FORGE_K8S_API_SERVER", "10.0.0.1:6443")]),
        "FORGE_K8S_API_SERVER"
    );
}

#[test]
fn an_invalid_variable_is_not_reported_again_by_the_cross_checks() {
    // The token needs the API server; the server is set, just invalid: one problem.
    let e = errors(&[
        ("FORGE_K8S_API_SERVER", "10.0.0.1:6443"),
        ("FORGE_K8S_TOKEN", "t"),
    ]);
    assert!(
        matches!(&e[..], [ConfigError::Invalid { var, .. }] if var == "FORGE_K8S_API_SERVER"),
        "{e:?}"
    );
}

#[test]
fn rejects_storage_mount_without_pvc() {
    let e = errors(&[("FORGE_K8S_STORAGE_MOUNT", "/storage")]);
    assert!(
        matches!(&e[..], [ConfigError::Requires { var, requires, .. }]
        if var == "FORGE_K8S_STORAGE_MOUNT" && requires == "FORGE_K8S_STORAGE_PVC")
    );
}

#[test]
fn rejects_relative_storage_paths() {
    assert_eq!(
        only_error_var(&[("FORGE_STORAGE_ROOT", "starforge")]),
        "FORGE_STORAGE_ROOT"
    );
    assert_eq!(
        only_error_var(&[
            ("FORGE_K8S_STORAGE_PVC", "claim"),
            ("FORGE_K8S_STORAGE_MOUNT", "storage")
        ]),
        "FORGE_K8S_STORAGE_MOUNT"
    );
    assert_eq!(
        only_error_var(&[("FORGE_NEMO_RL_DIR", "opt/nemo")]),
        "FORGE_NEMO_RL_DIR"
    );
}

#[test]
fn rejects_bad_claim_names() {
    assert_eq!(
        only_error_var(&[("FORGE_K8S_STORAGE_PVC", "Bad_Claim")]),
        "FORGE_K8S_STORAGE_PVC"
    );
    assert_eq!(
        only_error_var(&[("FORGE_K8S_CORPUS_PVC", "-corpus")]),
        "FORGE_K8S_CORPUS_PVC"
    );
}

#[test]
fn rejects_non_numeric_and_zero_deadlines() {
    assert_eq!(
        only_error_var(&[("FORGE_POLICY_DEADLINE_MS", "fast")]),
        "FORGE_POLICY_DEADLINE_MS"
    );
    assert_eq!(
        only_error_var(&[("FORGE_POLICY_DEADLINE_MS", "0")]),
        "FORGE_POLICY_DEADLINE_MS"
    );
    assert_eq!(
        only_error_var(&[("FORGE_KUBERAY_PRERUNNING_DEADLINE_S", "0")]),
        "FORGE_KUBERAY_PRERUNNING_DEADLINE_S"
    );
    assert_eq!(
        only_error_var(&[("FORGE_KUBERAY_PRERUNNING_DEADLINE_S", "1h")]),
        "FORGE_KUBERAY_PRERUNNING_DEADLINE_S"
    );
}

#[test]
fn rejects_negative_or_huge_ttl() {
    assert_eq!(
        only_error_var(&[("FORGE_KUBERAY_TTL_SECONDS", "-1")]),
        "FORGE_KUBERAY_TTL_SECONDS"
    );
    assert_eq!(
        only_error_var(&[("FORGE_KUBERAY_TTL_SECONDS", "99999999999")]),
        "FORGE_KUBERAY_TTL_SECONDS"
    );
}

#[test]
fn rejects_zero_policy_limits_and_body() {
    for var in [
        "FORGE_POLICY_MEMORY_MIB",
        "FORGE_POLICY_CONCURRENCY",
        "FORGE_MAX_BODY_MIB",
        "FORGE_MAX_DOCUMENT_KIB",
        "FORGE_MAX_FIELD_ERRORS",
    ] {
        assert_eq!(only_error_var(&[(var, "0")]), var);
    }
}

#[test]
fn rejects_a_sweep_slower_than_a_retention() {
    for var in [
        "FORGE_RETENTION_REJECTED_S",
        "FORGE_RETENTION_LOGS_S",
        "FORGE_RETENTION_CAPSULES_S",
    ] {
        let e = errors(&[(var, "60"), ("FORGE_RETENTION_SWEEP_S", "61")]);
        assert!(
            matches!(&e[..], [ConfigError::Requires { var: v, requires, .. }]
            if v == "FORGE_RETENTION_SWEEP_S" && requires == var),
            "{var}: {e:?}"
        );
        // Kept forever (0) needs no sweep at all; a sweep as often as the period is fine.
        assert!(
            Config::from_env_map(with(&[(var, "0"), ("FORGE_RETENTION_SWEEP_S", "86400")])).is_ok()
        );
        assert!(
            Config::from_env_map(with(&[(var, "60"), ("FORGE_RETENTION_SWEEP_S", "60")])).is_ok()
        );
    }
}

#[test]
fn rejects_playground_settings_out_of_range() {
    for (var, bad) in [
        ("FORGE_PLAYGROUND_MIN_TTL_S", "0"),
        ("FORGE_PLAYGROUND_MIN_TTL_S", "3601"),
        ("FORGE_PLAYGROUND_STARTUP_S", "59"),
        ("FORGE_PLAYGROUND_STARTUP_S", "14401"),
        ("FORGE_PLAYGROUND_STARTUP_S", "30m"),
    ] {
        assert_eq!(only_error_var(&[(var, bad)]), var, "{var}={bad}");
    }
}

#[test]
fn rejects_retention_settings_out_of_range() {
    for (var, bad) in [
        ("FORGE_RETENTION_REJECTED_S", "-1"),
        ("FORGE_RETENTION_LOGS_S", "315360001"),
        ("FORGE_RETENTION_CAPSULES_S", "14d"),
        ("FORGE_RETENTION_SWEEP_S", "0"),
        ("FORGE_RETENTION_SWEEP_S", "86401"),
    ] {
        assert_eq!(only_error_var(&[(var, bad)]), var, "{var}={bad}");
    }
}

#[test]
fn rejects_a_fair_share_half_life_of_zero_or_out_of_range() {
    for bad in ["0", "-1", "31536001", "7d"] {
        assert_eq!(
            only_error_var(&[("FORGE_FAIR_SHARE_HALF_LIFE_S", bad)]),
            "FORGE_FAIR_SHARE_HALF_LIFE_S",
            "{bad}"
        );
    }
    let c = Config::from_env_map(with(&[("FORGE_FAIR_SHARE_HALF_LIFE_S", "1")]))
        .expect("the shortest half-life");
    assert_eq!(c.gateway.fair_share_half_life_s, 1);
}

#[test]
fn rejects_a_log_archive_bound_out_of_range() {
    for v in ["0", "1023", "1073741825", "lots"] {
        assert_eq!(
            only_error_var(&[("FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD", v)]),
            "FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD",
            "{v}"
        );
    }
    let c = Config::from_env_map(with(&[("FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD", "1024")]))
        .expect("the lowest bound");
    assert_eq!(c.gateway.log_archive_max_bytes_per_pod, 1024);
}

#[test]
fn rejects_out_of_range_plugin_limits() {
    for (var, v) in [
        ("FORGE_POLICY_SYNC_MS", "0"),
        ("FORGE_PLUGIN_MAX_KIB", "0"),
        ("FORGE_PLUGIN_MAX_KIB", "262145"),
        ("FORGE_TEAM_PLUGIN_MAX_COUNT", "0"),
        ("FORGE_POLICY_MAX_MEMORY_MIB", "0"),
        ("FORGE_POLICY_MAX_DEADLINE_MS", "0"),
    ] {
        assert_eq!(only_error_var(&[(var, v)]), var, "{var}={v}");
    }
}

#[test]
fn rejects_plugin_maxima_below_the_defaults() {
    assert_eq!(
        only_error_var(&[("FORGE_POLICY_MAX_MEMORY_MIB", "16")]),
        "FORGE_POLICY_MAX_MEMORY_MIB"
    );
    assert_eq!(
        only_error_var(&[
            ("FORGE_POLICY_DEADLINE_MS", "200"),
            ("FORGE_POLICY_MAX_DEADLINE_MS", "100")
        ]),
        "FORGE_POLICY_MAX_DEADLINE_MS"
    );
    assert!(
        Config::from_env_map(with(&[
            ("FORGE_POLICY_MEMORY_MIB", "64"),
            ("FORGE_POLICY_MAX_MEMORY_MIB", "64")
        ]))
        .is_ok()
    );
}

#[test]
fn rejects_team_plugin_budget_below_one_plugin() {
    assert_eq!(
        only_error_var(&[
            ("FORGE_TEAM_PLUGIN_MAX_MIB", "1"),
            ("FORGE_PLUGIN_MAX_KIB", "2048")
        ]),
        "FORGE_TEAM_PLUGIN_MAX_MIB"
    );
    assert!(
        Config::from_env_map(with(&[
            ("FORGE_TEAM_PLUGIN_MAX_MIB", "2"),
            ("FORGE_PLUGIN_MAX_KIB", "2048")
        ]))
        .is_ok()
    );
}

#[test]
fn rejects_shm_size_that_is_not_a_quantity() {
    assert_eq!(
        only_error_var(&[("FORGE_K8S_SHM_SIZE", "64GB")]),
        "FORGE_K8S_SHM_SIZE"
    );
    assert_eq!(
        only_error_var(&[("FORGE_K8S_SHM_SIZE", "0")]),
        "FORGE_K8S_SHM_SIZE"
    );
}

#[test]
fn rejects_invalid_label_key() {
    assert_eq!(
        only_error_var(&[("FORGE_K8S_GPU_NODE_LABEL", "Star Forge/gpu")]),
        "FORGE_K8S_GPU_NODE_LABEL"
    );
}

#[test]
fn rejects_invalid_namespace() {
    assert_eq!(
        only_error_var(&[("FORGE_K8S_NAMESPACE", "Star_Forge")]),
        "FORGE_K8S_NAMESPACE"
    );
}

#[test]
fn rejects_kuberay_without_ray_version() {
    let mut env = base();
    env.remove("FORGE_KUBERAY_RAY_VERSION");
    let Err(ConfigErrors(e)) = Config::from_env_map(env) else {
        panic!("expected an error");
    };
    assert!(
        matches!(&e[..], [ConfigError::Missing { var, .. }] if var == "FORGE_KUBERAY_RAY_VERSION")
    );
}

#[test]
fn local_fleet_needs_no_ray_version_and_dev_defaults_are_valid() {
    let mut env = base();
    env.remove("FORGE_KUBERAY_RAY_VERSION");
    env.insert("FORGE_DEFAULT_FLEET_KIND".into(), "local".into());
    assert_eq!(
        Config::from_env_map(env).expect("valid").fleet_kind,
        FleetKind::Local
    );
    assert!(Config::from_env_map(dev_defaults()).is_ok());
}

#[test]
fn rejects_bad_ray_version() {
    assert_eq!(
        only_error_var(&[("FORGE_KUBERAY_RAY_VERSION", "latest")]),
        "FORGE_KUBERAY_RAY_VERSION"
    );
}

#[test]
fn rejects_unknown_fleet_kind() {
    assert_eq!(
        only_error_var(&[("FORGE_DEFAULT_FLEET_KIND", "slurm")]),
        "FORGE_DEFAULT_FLEET_KIND"
    );
}

#[test]
fn rejects_bad_booleans() {
    assert_eq!(
        only_error_var(&[("FORGE_K8S_GPU_PASSTHROUGH", "maybe")]),
        "FORGE_K8S_GPU_PASSTHROUGH"
    );
    assert_eq!(
        only_error_var(&[("FORGE_K8S_STORAGE_SHARED", "rwx")]),
        "FORGE_K8S_STORAGE_SHARED"
    );
}

#[test]
fn rejects_bad_listen_and_public_url() {
    assert_eq!(
        only_error_var(&[("FORGE_LISTEN", "localhost")]),
        "FORGE_LISTEN"
    );
    assert_eq!(
        only_error_var(&[("FORGE_PUBLIC_URL", "forge.example")]),
        "FORGE_PUBLIC_URL"
    );
}

#[test]
fn rejects_bad_image_vars() {
    assert_eq!(
        only_error_var(&[("FORGE_IMAGE_VERL", "  ")]),
        "FORGE_IMAGE_VERL"
    );
    assert_eq!(only_error_var(&[("FORGE_IMAGE_", "x:1")]), "FORGE_IMAGE_");
    assert_eq!(
        only_error_var(&[("FORGE_IMAGE_VERL", "a b")]),
        "FORGE_IMAGE_VERL"
    );
    assert_eq!(
        only_error_var(&[("FORGE_CAPSULE_INIT_IMAGE", "busy box")]),
        "FORGE_CAPSULE_INIT_IMAGE"
    );
}

#[test]
fn file_layers_under_env() {
    let c = load_with_file(
        "forge.toml",
        "FORGE_K8S_NAMESPACE = \"from-file\"\nFORGE_KUBERAY_TTL_SECONDS = 42\nFORGE_K8S_GPU_PASSTHROUGH = false\n",
        &[("FORGE_KUBERAY_TTL_SECONDS", "7")],
    )
    .expect("valid");
    assert_eq!(c.k8s.namespace, "from-file");
    assert_eq!(c.kuberay.ttl_seconds, 7, "env wins over the file");
    assert!(!c.k8s.gpu_passthrough);

    let c = load_with_file(
        "forge.yaml",
        "FORGE_K8S_SHM_SIZE: 8Gi\nFORGE_IMAGE_VERL: verl:2\n",
        &[],
    )
    .expect("valid");
    assert_eq!(c.k8s.shm_size, "8Gi");
    assert_eq!(c.image_for("verl"), Some("verl:2"));
}

#[test]
fn rejects_bad_files() {
    let e = file_errors("forge.toml", "FORGE_K8S_NAMESPAEC = \"typo\"\n");
    assert!(
        matches!(&e[..], [ConfigError::UnknownKey { key, .. }] if key == "FORGE_K8S_NAMESPAEC")
    );
    let e = file_errors("forge.json", "{}");
    assert!(matches!(&e[..], [ConfigError::File { .. }]));
    let e = file_errors("broken.yaml", "FORGE_K8S_NAMESPACE: [unclosed");
    assert!(matches!(&e[..], [ConfigError::File { .. }]));
    let e = errors(&[(CONFIG_FILE, "/nonexistent/forge-missing.toml")]);
    assert!(matches!(&e[..], [ConfigError::File { .. }]));
    let e = file_errors("nested.yaml", "FORGE_K8S_NAMESPACE: {a: 1}\n");
    assert!(matches!(&e[..], [ConfigError::Invalid { var, .. }] if var == "FORGE_K8S_NAMESPACE"));
}

#[test]
fn every_table_variable_is_a_valid_file_key() {
    // `rejects_bad_files` covers the rejection of other keys.
    for var in VARS {
        let key = match var.name {
            Name::Exact(name) => name.to_string(),
            Name::Prefix { prefix, .. } => format!("{prefix}VERL"),
        };
        assert!(is_known(&key), "{key}");
    }
    assert!(!is_known("FORGE_SWAP_SECS"));
}

#[test]
fn policy_chain_file_comes_from_env_or_file() {
    let file = "FORGE_POLICY_CHAIN_FILE: /etc/forge/chain.yaml\n";
    let c = load_with_file("forge.yaml", file, &[]).expect("valid");
    assert_eq!(
        c.gateway.policy_chain_file,
        Some(PathBuf::from("/etc/forge/chain.yaml"))
    );
    let c = load_with_file(
        "forge.yaml",
        file,
        &[("FORGE_POLICY_CHAIN_FILE", "chain.json")],
    )
    .expect("valid");
    assert_eq!(
        c.gateway.policy_chain_file,
        Some(PathBuf::from("chain.json")),
        "env wins over the file"
    );
}

#[test]
fn yaml_scalars_are_read_as_written() {
    // YAML 1.2: `no` is a string (not `false`), `0755` and `1_000` keep their spelling.
    let c = load_with_file(
        "forge.yml",
        "FORGE_K8S_NAMESPACE: no\nFORGE_K8S_STORAGE_SHARED: off\nFORGE_IMAGE_VERL: 0755\nFORGE_IMAGE_X_Y: 1_000\nFORGE_KUBERAY_TTL_SECONDS: 30\n",
        &[],
    )
    .expect("valid");
    assert_eq!(c.k8s.namespace, "no");
    assert!(!c.storage.shared);
    assert_eq!(c.image_for("verl"), Some("0755"));
    assert_eq!(c.image_for("x-y"), Some("1_000"));
    assert_eq!(c.kuberay.ttl_seconds, 30);
}

#[test]
fn rejects_hostile_yaml() {
    // An alias bomb: each level doubles the nodes an expansion would build.
    let mut bomb = String::from("a0: &a0 [x, x]\n");
    for i in 1..40 {
        bomb.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}]\n", p = i - 1));
    }
    // Deeper than the file's budget allows (8), well within the library's default (64).
    let deep = format!(
        "FORGE_K8S_NAMESPACE: {}x{}\n",
        "[".repeat(20),
        "]".repeat(20)
    );
    for (name, text) in [("bomb.yaml", bomb), ("deep.yaml", deep)] {
        let e = file_errors(name, &text);
        assert!(
            matches!(&e[..], [ConfigError::File { .. }]),
            "{name}: {e:?}"
        );
    }
}

#[test]
fn rejects_oversized_files() {
    let pad = usize::try_from(MAX_FILE_BYTES).expect("fits");
    let e = file_errors("big.toml", &format!("# {}\n", "x".repeat(pad)));
    assert!(
        matches!(&e[..], [ConfigError::File { reason, .. }] if reason.contains("larger than")),
        "{e:?}"
    );
}

#[test]
fn file_syntax_errors_do_not_quote_secrets() {
    for (name, text) in [
        (
            "broken.toml",
            "FORGE_S3_SECRET_KEY = \"hunter2-secret\" oops\n",
        ),
        (
            "broken.yaml",
            "FORGE_S3_SECRET_KEY: hunter2-secret\n  - oops: [\n",
        ),
    ] {
        let e = file_errors(name, text);
        assert!(
            matches!(&e[..], [ConfigError::File { .. }]),
            "{name}: {e:?}"
        );
        let shown = ConfigErrors(e).to_string();
        assert!(
            !shown.contains("hunter2"),
            "{name}: secret quoted in {shown}"
        );
    }
}

#[test]
fn table_is_well_formed() {
    let mut seen = std::collections::HashSet::new();
    for var in VARS {
        let name = var.name.shown();
        assert!(name.starts_with("FORGE_"), "{name}");
        assert!(seen.insert(name), "{name} is listed twice");
        assert!(!var.meaning.is_empty(), "{name} has no meaning");
        assert!(
            !var.meaning.contains('|') && !var.meaning.contains('\n'),
            "{name}: the meaning must be one Markdown table cell"
        );
        if var.group.is_some() {
            assert!(
                matches!(var.name, Name::Exact(_)),
                "{name}: group members are exact names"
            );
            assert!(
                matches!(var.fallback, Fallback::Unset(_)),
                "{name}: group members have no default"
            );
        }
    }
}

#[test]
fn a_secret_is_read_from_its_file_without_the_line_break() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cr3t-value\n").expect("write");
    let cfg = Config::from_env_map(with(&[(
        "FORGE_METRICS_TOKEN_FILE",
        path.to_str().expect("utf-8"),
    )]))
    .expect("valid");
    let token = cfg.gateway.metrics_token.expect("read from the file");
    assert_eq!(token.expose(), "s3cr3t-value");
}

#[test]
fn rejects_a_secret_set_both_as_itself_and_as_a_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("token");
    std::fs::write(&path, "from-the-file").expect("write");
    let errors = Config::from_env_map(with(&[
        ("FORGE_METRICS_TOKEN", "from-the-env"),
        ("FORGE_METRICS_TOKEN_FILE", path.to_str().expect("utf-8")),
    ]))
    .expect_err("both set")
    .to_string();
    assert!(
        errors.contains("FORGE_METRICS_TOKEN_FILE: set FORGE_METRICS_TOKEN or"),
        "{errors}"
    );
    assert!(
        !errors.contains("from-the"),
        "a secret in an error: {errors}"
    );
}

#[test]
fn rejects_a_secret_file_that_cannot_be_read() {
    let errors = Config::from_env_map(with(&[(
        "FORGE_METRICS_TOKEN_FILE",
        "/nonexistent/forge/token",
    )]))
    .expect_err("unreadable")
    .to_string();
    assert!(
        errors.contains("FORGE_METRICS_TOKEN_FILE: cannot read /nonexistent/forge/token"),
        "{errors}"
    );
}
