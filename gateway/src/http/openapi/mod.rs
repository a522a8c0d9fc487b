//! The OpenAPI 3.1 document served at `/v1/openapi.json`, and the JobSpec schema at
//! `/v1/schemas/jobspec`. Each resource declares its operations in its own file
//! (`meta.rs`, `jobs.rs`, `uploads.rs`, `playgrounds.rs`, `policy.rs`), stating its
//! constraints from the same constants and configuration the handlers check; the
//! shared components are `schemas.rs`' (the JobSpec's from the code, `schemars` plus
//! the rules a schema can state: `jobspec::published`), and the answers every operation
//! shares (401, 400 invalid-query, 413, 408) are added by `shared.rs` from the route
//! table. A test holds the document against the route table in both directions;
//! `tests/schemathesis/run.sh` holds a running gateway to it.

mod jobs;
mod meta;
mod playgrounds;
mod policy;
mod schemas;
mod shared;
mod uploads;

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};

use crate::auth::Caller;
use crate::config::Config;
use crate::state::AppState;

pub use playgrounds::model_pattern;

/// `GET /v1/openapi.json`.
pub async fn serve(State(state): State<AppState>, _caller: Caller) -> Json<Value> {
    Json(document(&state.config))
}

/// `GET /v1/schemas/jobspec`: the schema as published (this gateway's frameworks and
/// storage).
pub async fn jobspec_schema(State(state): State<AppState>, _caller: Caller) -> Json<Value> {
    Json(crate::jobspec::published_schema(&state.config))
}

/// An error answer (the `Error` schema) described by `description`.
fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

/// A job answer (the `Job` schema).
fn job_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}
    })
}

/// The `{id}` path parameter.
fn id_param() -> Value {
    json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}])
}

/// The document (the JobSpec as this gateway's configuration accepts it).
pub fn document(cfg: &Config) -> Value {
    let mut paths = Map::new();
    for part in [
        meta::paths(),
        jobs::paths(),
        uploads::paths(),
        playgrounds::paths(cfg),
        policy::paths(cfg),
    ] {
        if let Value::Object(part) = part {
            paths.extend(part);
        }
    }
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Forge gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Submit GPU training jobs; admission by WebAssembly policy plugins; runs as KubeRay RayJobs."
        },
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "jobToken": {"type": "http", "scheme": "bearer",
                    "description": "a job's own token (FORGE_JOB_TOKEN in its processes): good for that job while it holds GPUs"}},
            "schemas": schemas::all(cfg)
        },
        "paths": paths
    });
    shared::complete(&mut doc);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_config() -> Config {
        let mut env = crate::config::dev_defaults();
        env.insert("FORGE_DATA_DIR".into(), "/tmp/forge-openapi-test".into());
        env.insert("FORGE_IMAGE_NEMO_RL".into(), "rayproject/ray:2.55.1".into());
        Config::from_env_map(env).expect("config")
    }

    #[test]
    fn documents_exactly_the_routes_and_resolves_refs() {
        let doc = document(&test_config());
        for crate::http::Route { method, path, .. } in crate::http::ROUTES {
            assert!(
                doc["paths"][path][method].is_object(),
                "{method} {path} is routed but not documented"
            );
        }
        let paths = doc["paths"].as_object().expect("paths");
        for (path, item) in paths {
            let methods = item.as_object().expect("path item").keys();
            for method in methods.filter(|k| *k != "parameters") {
                assert!(
                    crate::http::ROUTES
                        .iter()
                        .any(|r| r.method == method && r.path == path),
                    "{method} {path} is documented but not routed"
                );
            }
        }
        let text = doc.to_string();
        assert!(!text.contains("#/$defs/"));
        for r in text.split("\"#/components/schemas/").skip(1) {
            let name = r.split('"').next().unwrap_or_default();
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "dangling $ref {name}"
            );
        }
    }
}
