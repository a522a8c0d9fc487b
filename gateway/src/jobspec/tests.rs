//! Tests of spec parsing and validation: every problem at once, with paths and codes.

use std::collections::HashMap;

use super::schema::field_path;
use super::*;
use crate::config::Config;

fn cfg() -> Config {
    Config::from_env_map(HashMap::from([
        ("FORGE_IMAGE_NEMO_RL".to_string(), "nemo:1".to_string()),
        (
            "FORGE_KUBERAY_RAY_VERSION".to_string(),
            "2.55.1".to_string(),
        ),
        (
            "FORGE_K8S_STORAGE_PVC".to_string(),
            "starforge-storage".to_string(),
        ),
    ]))
    .expect("valid config")
}

const GOOD: &str = r#"{
    "name": "grpo-7b",
    "framework": "nemo-rl",
    "entrypoint": "python train.py",
    "pools": [
        {"name": "trainer", "nodes": 2, "gpusPerNode": 8, "series": "h200"},
        {"name": "rollout", "nodes": 1, "gpusPerNode": 4}
    ],
    "env": {"WANDB_MODE": "offline"},
    "sharedStorage": true,
    "deadlines": {"preRunningSeconds": 600},
    "priority": 5,
    "labels": {"project": "rl"}
}"#;

fn errors_of(json: &str) -> Vec<FieldError> {
    match parse_and_validate(json.as_bytes(), SpecFormat::Json, &cfg(), "team-a") {
        Ok(s) => panic!("expected errors, got {s:?}"),
        Err(SpecErrors { errors: e, .. }) => e,
    }
}

fn has(errors: &[FieldError], field: &str, code: FieldCode) -> bool {
    errors.iter().any(|e| e.field == field && e.code == code)
}

fn patched(patch: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(GOOD).expect("json");
    patch(&mut v);
    v.to_string()
}

#[test]
fn accepts_a_good_spec_in_json_and_yaml() {
    let spec =
        parse_and_validate(GOOD.as_bytes(), SpecFormat::Json, &cfg(), "team-a").expect("valid");
    assert_eq!(spec.pools.len(), 2);
    assert_eq!(spec.primary().map(|p| p.name.as_str()), Some("trainer"));
    assert_eq!(spec.total_gpus(), 20);
    let yaml = "name: grpo-7b\nframework: nemo-rl\nentrypoint: python train.py\npools:\n  - name: trainer\n    nodes: 1\n    gpusPerNode: 8\n";
    let spec =
        parse_and_validate(yaml.as_bytes(), SpecFormat::Yaml, &cfg(), "team-a").expect("valid");
    assert_eq!(spec.pools[0].gpus_per_node, 8);
    assert!(spec.env.is_empty());
    assert_eq!(spec.deadlines, Deadlines::default());
}

#[test]
fn yaml_is_read_as_yaml_1_2_so_no_and_on_stay_strings() {
    // YAML 1.1 made `n`, `no`, `on`, `y` booleans (the "Norway problem"); a pool named
    // that, written plain by any YAML 1.2 tool, must stay its name.
    for name in ["n", "no", "on", "y", "off"] {
        let yaml = format!(
            "name: grpo-7b\nframework: nemo-rl\nentrypoint: python train.py\npools:\n  - name: {name}\n    nodes: 1\n    gpusPerNode: 8\n"
        );
        let spec = parse_and_validate(yaml.as_bytes(), SpecFormat::Yaml, &cfg(), "team-a")
            .unwrap_or_else(|e| panic!("pool `{name}`: {e:?}"));
        assert_eq!(spec.pools[0].name, name);
    }
    // `true` is still a boolean: a string field given one is a type error.
    let yaml = "name: grpo-7b\nframework: nemo-rl\nentrypoint: python train.py\npools:\n  - name: true\n    nodes: 1\n    gpusPerNode: 8\n";
    let e = parse_and_validate(yaml.as_bytes(), SpecFormat::Yaml, &cfg(), "team-a")
        .expect_err("a boolean name");
    assert!(has(&e.errors, "pools[0].name", FieldCode::Type), "{e:?}");
}

#[test]
fn team_in_body_is_an_unknown_field() {
    let e = errors_of(&patched(|v| v["team"] = "other-team".into()));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(has(&e, "team", FieldCode::UnknownField));
    assert!(e[0].message.contains("credentials"));
}

#[test]
fn reports_every_problem_at_once_with_paths() {
    let e = errors_of(&patched(|v| {
        v["name"] = "Bad Name".into();
        v["framework"] = "megatron".into();
        v["pools"][1]["gpusPerNode"] = 17.into();
        v["pools"][1]["name"] = "trainer".into();
        v["env"]["RAY_ADDRESS"] = "x".into();
        v["env"]["1BAD"] = "x".into();
        v["labels"]["forge.dev/team"] = "x".into();
        v["deadlines"]["activeSeconds"] = 0.into();
    }));
    for (field, code) in [
        ("name", FieldCode::Format),
        ("framework", FieldCode::UnknownFramework),
        ("pools[1].gpusPerNode", FieldCode::Range),
        ("pools[1].name", FieldCode::Duplicate),
        ("env[\"RAY_ADDRESS\"]", FieldCode::Reserved),
        ("env[\"1BAD\"]", FieldCode::Format),
        ("labels[\"forge.dev/team\"]", FieldCode::Reserved),
        ("deadlines.activeSeconds", FieldCode::Range),
    ] {
        assert!(has(&e, field, code), "missing {field} {code}: {e:#?}");
    }
}

#[test]
fn missing_fields_are_required_once() {
    let e = errors_of(r#"{"pools": [{"gpusPerNode": 1}]}"#);
    for field in [
        "name",
        "framework",
        "entrypoint",
        "pools[0].name",
        "pools[0].nodes",
    ] {
        let n = e.iter().filter(|x| x.field == field).count();
        assert_eq!(n, 1, "{field}: {e:#?}");
        assert!(has(&e, field, FieldCode::Required), "{field}: {e:#?}");
    }
}

#[test]
fn empty_pools_and_zero_nodes() {
    let e = errors_of(&patched(|v| v["pools"] = serde_json::json!([])));
    assert!(
        has(&e, "pools", FieldCode::Required) || has(&e, "pools", FieldCode::Range),
        "{e:?}"
    );
    let e = errors_of(&patched(|v| v["pools"][0]["nodes"] = 0.into()));
    assert!(has(&e, "pools[0].nodes", FieldCode::Range), "{e:?}");
}

#[test]
fn type_errors_and_unknown_nested_fields() {
    let e = errors_of(&patched(|v| {
        v["pools"][0]["nodes"] = "two".into();
        v["pools"][1]["gpu"] = 1.into();
        v["priority"] = "high".into();
    }));
    assert!(has(&e, "pools[0].nodes", FieldCode::Type), "{e:#?}");
    assert!(has(&e, "pools[1].gpu", FieldCode::UnknownField), "{e:#?}");
    assert!(has(&e, "priority", FieldCode::Type), "{e:#?}");
    let e = errors_of(&patched(|v| v["pools"][0]["nodes"] = (-1).into()));
    assert!(has(&e, "pools[0].nodes", FieldCode::Range), "{e:#?}");
}

#[test]
fn syntax_errors() {
    let e = errors_of("{not json");
    assert_eq!(e[0].code, FieldCode::Syntax);
    let Err(SpecErrors { errors: e, .. }) =
        parse_and_validate(b"name: [", SpecFormat::Yaml, &cfg(), "team-a")
    else {
        panic!("expected a syntax error");
    };
    assert_eq!(e[0].code, FieldCode::Syntax);
}

#[test]
fn name_length_and_series_format() {
    let e = errors_of(&patched(|v| {
        v["name"] = "a".repeat(64).into();
        v["pools"][0]["series"] = "h200 sxm".into();
    }));
    assert!(
        has(&e, "name", FieldCode::Format) || has(&e, "name", FieldCode::Range),
        "{e:?}"
    );
    assert!(has(&e, "pools[0].series", FieldCode::Format), "{e:?}");
}

#[test]
fn storage_not_offered() {
    let cfg = Config::from_env_map(HashMap::from([
        ("FORGE_IMAGE_NEMO_RL".to_string(), "nemo:1".to_string()),
        (
            "FORGE_KUBERAY_RAY_VERSION".to_string(),
            "2.55.1".to_string(),
        ),
    ]))
    .expect("valid config");
    let doc = patched(|v| v["corpus"] = true.into());
    let Err(SpecErrors { errors: e, .. }) =
        parse_and_validate(doc.as_bytes(), SpecFormat::Json, &cfg, "team-a")
    else {
        panic!("expected errors");
    };
    assert!(has(&e, "sharedStorage", FieldCode::Unavailable), "{e:?}");
    assert!(has(&e, "corpus", FieldCode::Unavailable), "{e:?}");
}

#[test]
fn reserved_env_names_and_bad_labels() {
    let e = errors_of(&patched(|v| {
        v["env"]["CUDA_VISIBLE_DEVICES"] = "0".into();
        v["env"]["FORGE_CAPSULE_URL"] = "x".into();
        v["labels"]["bad key!"] = "x".into();
        v["labels"]["ok"] = "-bad-value".into();
    }));
    assert!(has(
        &e,
        "env[\"CUDA_VISIBLE_DEVICES\"]",
        FieldCode::Reserved
    ));
    assert!(has(&e, "env[\"FORGE_CAPSULE_URL\"]", FieldCode::Reserved));
    assert!(has(&e, "labels[\"bad key!\"]", FieldCode::Format));
    assert!(has(&e, "labels[\"ok\"]", FieldCode::Format));
}

#[test]
fn schema_is_exported_and_strict() {
    let schema = json_schema();
    assert_eq!(
        schema["additionalProperties"],
        serde_json::Value::Bool(false)
    );
    let required = schema["required"].as_array().expect("required list");
    for f in ["name", "framework", "entrypoint", "pools"] {
        assert!(required.contains(&f.into()), "{f} not required: {schema}");
    }
    assert!(schema["properties"]["pools"].is_object());
}

#[test]
fn content_types() {
    assert_eq!(
        SpecFormat::from_content_type("application/yaml"),
        SpecFormat::Yaml
    );
    assert_eq!(
        SpecFormat::from_content_type("text/x-yaml; charset=utf-8"),
        SpecFormat::Yaml
    );
    assert_eq!(
        SpecFormat::from_content_type("application/json"),
        SpecFormat::Json
    );
}

#[test]
fn field_paths() {
    assert_eq!(field_path("/pools/1/gpusPerNode"), "pools[1].gpusPerNode");
    assert_eq!(field_path(""), "");
    assert_eq!(field_path("/labels/a~1b"), "labels[\"a/b\"]");
}

#[test]
fn secret_env_names_the_teams_own_secrets_only() {
    let ok = patched(|v| {
        v["secretEnv"] =
            serde_json::json!({"WANDB_API_KEY": {"secret": "team-a.wandb", "key": "api-key"}});
    });
    let spec =
        parse_and_validate(ok.as_bytes(), SpecFormat::Json, &cfg(), "team-a").expect("valid");
    assert_eq!(spec.secret_env["WANDB_API_KEY"].secret, "team-a.wandb");
    // The same spec from another team names a Secret that is not its own.
    let Err(SpecErrors { errors: e, .. }) =
        parse_and_validate(ok.as_bytes(), SpecFormat::Json, &cfg(), "team-b")
    else {
        panic!("team-b may not use team-a's Secret");
    };
    assert!(
        has(
            &e,
            r#"secretEnv["WANDB_API_KEY"].secret"#,
            FieldCode::Forbidden
        ),
        "{e:?}"
    );
    // `team-a.` is not a prefix of `team-a-b.`: team names have no dot.
    let e = errors_of(&patched(|v| {
        v["secretEnv"] = serde_json::json!({"K": {"secret": "team-a-b.x", "key": "k"}});
    }));
    assert!(
        has(&e, r#"secretEnv["K"].secret"#, FieldCode::Forbidden),
        "{e:?}"
    );

    let e = errors_of(&patched(|v| {
        v["secretEnv"] = serde_json::json!({
            "WANDB_MODE": {"secret": "team-a.x", "key": "k"},
            "RAY_ADDRESS": {"secret": "team-a.x", "key": "k"},
            "BAD_SECRET": {"secret": "Team_A.x", "key": "k"},
            "BAD_KEY": {"secret": "team-a.x", "key": "a/b"},
            "NO_KEY": {"secret": "team-a.x"},
        });
    }));
    assert!(
        has(&e, r#"secretEnv["WANDB_MODE"]"#, FieldCode::Duplicate),
        "{e:?}"
    );
    assert!(
        has(&e, r#"secretEnv["RAY_ADDRESS"]"#, FieldCode::Reserved),
        "{e:?}"
    );
    assert!(
        has(&e, r#"secretEnv["BAD_SECRET"].secret"#, FieldCode::Format),
        "{e:?}"
    );
    assert!(
        has(&e, r#"secretEnv["BAD_KEY"].key"#, FieldCode::Format),
        "{e:?}"
    );
    assert!(
        has(&e, r#"secretEnv["NO_KEY"].key"#, FieldCode::Required),
        "{e:?}"
    );
    let e = errors_of(&patched(|v| {
        v["secretEnv"] =
            serde_json::json!({"K": {"secret": "team-a.x", "key": "k", "value": "leak"}});
    }));
    assert!(e.iter().any(|e| e.code == FieldCode::UnknownField), "{e:?}");
}

#[test]
fn pool_resources_are_checked() {
    let ok = patched(|v| {
        v["pools"][0]["cpusPerNode"] = serde_json::json!(32);
        v["pools"][0]["memoryPerNode"] = serde_json::json!("256Gi");
        v["pools"][0]["objectStoreMemory"] = serde_json::json!("64Gi");
    });
    let spec =
        parse_and_validate(ok.as_bytes(), SpecFormat::Json, &cfg(), "team-a").expect("valid");
    assert_eq!(spec.pools[0].memory_bytes(), Some(256 << 30));
    assert_eq!(spec.pools[0].object_store_bytes(), Some(64 << 30));

    let e = errors_of(&patched(|v| {
        v["pools"][0]["cpusPerNode"] = serde_json::json!(0);
        v["pools"][0]["memoryPerNode"] = serde_json::json!("lots");
        v["pools"][1]["memoryPerNode"] = serde_json::json!("100Mi");
        v["pools"][1]["objectStoreMemory"] = serde_json::json!("1Gi");
    }));
    assert!(has(&e, "pools[0].cpusPerNode", FieldCode::Range), "{e:?}");
    assert!(
        has(&e, "pools[0].memoryPerNode", FieldCode::Format),
        "{e:?}"
    );
    assert!(has(&e, "pools[1].memoryPerNode", FieldCode::Range), "{e:?}");

    let e = errors_of(&patched(|v| {
        v["pools"][1]["memoryPerNode"] = serde_json::json!("8Gi");
        v["pools"][1]["objectStoreMemory"] = serde_json::json!("8Gi");
    }));
    assert!(
        has(&e, "pools[1].objectStoreMemory", FieldCode::Range),
        "{e:?}"
    );
}

#[test]
fn pip_entries_are_checked_one_by_one() {
    let errors = errors_of(&patched(|v| {
        v["pip"] = serde_json::json!([
            "torch==2.4.0",
            "--index-url https://bob:s3cret@pypi.internal/simple",
            "-r other.txt",
            " ",
            "--index-url https://${PIP_USER}:${PIP_TOKEN}@pypi.internal/simple"
        ]);
    }));
    assert!(has(&errors, "pip[1]", FieldCode::Format), "{errors:?}");
    assert!(has(&errors, "pip[2]", FieldCode::Format), "{errors:?}");
    assert!(has(&errors, "pip[3]", FieldCode::Required), "{errors:?}");
    assert_eq!(errors.len(), 3, "{errors:?}");
    let credentials = errors.iter().find(|e| e.field == "pip[1]").expect("pip[1]");
    assert!(
        credentials.message.contains("credentials"),
        "{credentials:?}"
    );
}

#[test]
fn a_label_bomb_gets_a_small_answer() {
    let doc = patched(|v| {
        let labels: serde_json::Map<String, serde_json::Value> = (0..20_000)
            .map(|i| (format!("bad key {i}!"), serde_json::Value::from("x")))
            .collect();
        v["labels"] = labels.into();
    });
    let Err(errors) = parse_and_validate(doc.as_bytes(), SpecFormat::Json, &cfg(), "team-a") else {
        panic!("expected errors");
    };
    assert!(
        has(&errors.errors, "labels", FieldCode::Range),
        "{errors:?}"
    );
    assert_eq!(errors.errors.len(), 20, "listed: FORGE_MAX_FIELD_ERRORS");
    // The count error plus the first 64 keys, not 20 000 of them.
    assert_eq!(errors.total, 1 + super::MAX_LABELS);
    assert_eq!(errors.omitted(), errors.total - 20);
    let answer = serde_json::to_string(&errors.errors).expect("json");
    assert!(answer.len() < 8 * 1024, "a {} byte answer", answer.len());
}

#[test]
fn env_total_size_is_bounded() {
    let e = errors_of(&patched(|v| {
        for i in 0..10 {
            v["env"][format!("BIG_{i}")] = "x".repeat(30 * 1024).into();
        }
    }));
    assert!(has(&e, "env", FieldCode::Range), "{e:?}");
    let e = errors_of(&patched(|v| {
        for i in 0..=super::MAX_ENV {
            v["env"][format!("V{i}")] = "1".into();
        }
    }));
    assert!(has(&e, "env", FieldCode::Range), "{e:?}");
}

#[test]
fn the_checkpoint_grace_defaults_to_60_and_is_bounded_by_the_gateway() {
    let spec: JobSpec = serde_json::from_str(&patched(|_| {})).expect("spec");
    assert_eq!(spec.deadlines.checkpoint_grace_s(), 60);
    // The issue's spelling is accepted as well.
    let short: JobSpec = serde_json::from_str(&patched(|v| {
        v["deadlines"]["checkpointGraceS"] = 5.into();
    }))
    .expect("alias");
    assert_eq!(short.deadlines.checkpoint_grace_s(), 5);
    for bad in [0, 601] {
        let e = errors_of(&patched(|v| {
            v["deadlines"]["checkpointGraceSeconds"] = bad.into();
        }));
        assert!(
            has(&e, "deadlines.checkpointGraceSeconds", FieldCode::Range),
            "{bad}: {e:#?}"
        );
        if bad > 0 {
            assert!(
                e.iter()
                    .any(|f| f.message.contains("FORGE_PREEMPTION_MAX_GRACE_S")),
                "{e:#?}"
            );
        }
    }
}
