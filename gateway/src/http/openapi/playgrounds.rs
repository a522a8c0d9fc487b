//! The playground operations: start, list, read, end and extend an inference server,
//! and its own OpenAI-compatible API relayed through the gateway (see
//! `http/playgrounds.rs`), with the request patterns `playground::request` checks.

use serde_json::{Value, json};

use super::{error_response, id_param};
use crate::config::Config;

/// What a playground's model may not contain: blanks and control characters.
const MODEL_CHAR: &str =
    r"[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";

/// A playground's model as `playground::request` and `playground::model_source` take
/// it: no blanks or control characters, no `.` or `..` segment, and either a model id
/// (not starting with `/`) or a path under the storage mount (when storage is
/// configured; only under its `corpus/` with only the corpus claim).
pub fn model_pattern(cfg: &Config) -> String {
    let st = &cfg.storage;
    let escape = |s: &str| {
        s.chars().fold(String::new(), |mut out, c| {
            if "\\.^$*+?()[]{}|".contains(c) {
                out.push('\\');
            }
            out.push(c);
            out
        })
    };
    let base = if st.pvc.is_some() {
        Some(st.mount_path().trim_end_matches('/').to_string())
    } else {
        st.corpus_pvc.as_ref().map(|_| st.corpus_mount_path())
    };
    let path = base.map_or(String::new(), |b| format!("|{}/{MODEL_CHAR}+", escape(&b)));
    format!(r"^(?!(.*/)?\.\.?(/|$))(?:(?!/){MODEL_CHAR}+{path})$")
}

/// A playground's GPU series: a label value.
const SERIES_PATTERN: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";
/// A vLLM argument: printable, not one the gateway sets (`RESERVED_ARGS`).
const ARG_PATTERN: &str = r"^(?!(--port|--host|--api-key|--served-model-name|--tensor-parallel-size|--model)(=|$))[^\u0000-\u001f\u007f-\u009f]*$";

pub(super) fn paths(cfg: &Config) -> Value {
    use crate::playground::request::{MAX_ARGS, MAX_GPUS, MAX_LIFETIME_SECS};
    let min_ttl = cfg.gateway.playground_min_ttl_s;
    let id = id_param();
    let playground = json!({"type": "object",
        "required": ["id", "team", "model", "gpus", "state", "endpoint", "createdAtMs", "expiresAtMs"],
        "properties": {
            "id": {"type": "string"}, "team": {"type": "string"}, "createdBy": {"type": "string"},
            "model": {"type": "string"}, "series": {"type": ["string", "null"]},
            "gpus": {"type": "integer"}, "args": {"type": "array", "items": {"type": "string"}},
            "state": {"type": "string"}, "reason": {"type": ["string", "null"]},
            "createdAtMs": {"type": "integer"}, "expiresAtMs": {"type": "integer"},
            "idleSeconds": {"type": ["integer", "null"]}, "endpoint": {"type": "string"},
            "pod": {"type": "object"}, "reclaim": {"type": "object"}}});
    let one = |description: &str| {
        json!({"description": description,
        "content": {"application/json": {"schema": playground.clone()}}})
    };
    json!({
            "/v1/playgrounds": {
                "post": {"summary": "Start a playground: an inference server (vLLM) for a model on the team's GPUs, admitted as workload kind `inference`",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
                        "required": ["model", "gpus", "ttlSeconds"], "additionalProperties": false, "properties": {
                            "model": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": model_pattern(cfg),
                                "description": "a model id (`org/name`), or a directory on the team's storage as its jobs see it (under the storage mount): no blanks or control characters, no `.` or `..` segment (at most 512 bytes)"},
                            "series": {"type": ["string", "null"], "pattern": SERIES_PATTERN}, "gpus": {"type": "integer", "minimum": 1, "maximum": MAX_GPUS},
                            "ttlSeconds": {"type": "integer", "minimum": min_ttl, "maximum": MAX_LIFETIME_SECS},
                            "idleSeconds": {"type": ["integer", "null"], "minimum": min_ttl, "maximum": MAX_LIFETIME_SECS, "description": "ends the playground after this long without a request; one longer than ttlSeconds is ttlSeconds"},
                            "args": {"type": "array", "maxItems": MAX_ARGS, "items": {"type": "string", "maxLength": 256, "pattern": ARG_PATTERN,
                                "description": "printable, at most 256 bytes; not a flag the gateway sets"}}}}}}},
                    "responses": {"201": one("the playground (pending)"),
                        "400": error_response("invalid-body"),
                        "403": error_response("policy-rejected"),
                        "422": error_response("invalid-playground (the field)"),
                        "429": error_response("policy-queued: no room now, retry later"),
                        "409": error_response("playgrounds-disabled (no FORGE_IMAGE_VLLM on this installation)"),
                        "503": error_response("policy or cluster view unavailable")}},
                "get": {"summary": "The team's playgrounds (admins: every team's), newest first",
                    "responses": {"200": {"description": "the playgrounds", "content": {"application/json": {"schema": {
                        "type": "object", "required": ["items"], "properties": {"items": {"type": "array", "items": playground.clone()}}}}}}}}
            },
            "/v1/playgrounds/{id}": {
                "parameters": id.clone(),
                "get": {"summary": "A playground: state, pod phase and pending reason, endpoint, next reclaim",
                    "responses": {"200": one("the playground"), "404": error_response("not found (or another team's)")}},
                "delete": {"summary": "End a playground (deleted; an admin ending another team's: reclaimed-by-admin)",
                    "responses": {"200": one("the ended playground"), "404": error_response("not found")}}
            },
            "/v1/playgrounds/{id}/v1/{*rest}": {
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "rest", "in": "path", "required": true, "schema": {"type": "string"}, "description": "the OpenAI API path, e.g. chat/completions"}],
                "get": {"summary": "The playground's OpenAI-compatible API (e.g. v1/models), through the gateway",
                    "responses": {"200": {"description": "the server's answer, passed on as it arrives"},
                        "404": error_response("not found (or another team's)"), "409": error_response("playground-ended"),
                        "503": error_response("playground-not-ready")}},
                "post": {"summary": "The playground's OpenAI-compatible API (chat/completions, completions; `stream: true` is relayed as SSE chunk by chunk with keep-alives, an idle timeout and an error event if the stream breaks)",
                    "responses": {"200": {"description": "the server's answer (JSON or text/event-stream)"},
                        "404": error_response("not found (or another team's)"), "409": error_response("playground-ended"),
                        "503": error_response("playground-not-ready")}}
            },
            "/v1/playgrounds/{id}/extend": {
                "parameters": id.clone(),
                "post": {"summary": "Add seconds to the hard TTL (at most 24 h of life in all)",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
                        "required": ["seconds"], "additionalProperties": false,
                        "properties": {"seconds": {"type": "integer", "minimum": 1, "maximum": MAX_LIFETIME_SECS - min_ttl,
                            "description": "at most what keeps the playground within 24 h of its creation (details.maxSeconds of a 409 says how much)"}}}}}},
                    "responses": {"200": one("the playground"), "404": error_response("not found"),
                        "409": error_response("playground-ended | playground-lifetime: the playground may live at most 24 h in all"),
                        "422": error_response("invalid-playground: seconds below 1")}}
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_pattern_is_the_playground_check() {
        for storage in [false, true] {
            let mut env = crate::config::dev_defaults();
            env.insert("FORGE_IMAGE_NEMO_RL".into(), "rayproject/ray:2.55.1".into());
            if storage {
                env.insert("FORGE_K8S_STORAGE_PVC".into(), "forge-storage".into());
                env.insert("FORGE_K8S_STORAGE_MOUNT".into(), "/star.forge".into());
            }
            let cfg = Config::from_env_map(env).expect("config");
            let schema = json!({"type": "string", "pattern": model_pattern(&cfg)});
            let validator = jsonschema::validator_for(&schema).expect("a valid pattern");
            for model in [
                "meta/llama-3-8b",
                "m",
                "org/./x",
                "../x",
                "a/..",
                "a b",
                "/star.forge/ckpt/run-7",
                "/starXforge/ckpt",
                "/star.forge",
                "/star.forge/",
                "/etc/passwd",
                "/star.forge/../x",
                "/star.forge/ckpt/.",
            ] {
                let body = json!({"model": model, "gpus": 1, "ttlSeconds": 600});
                let req: crate::playground::CreatePlayground =
                    serde_json::from_value(body).expect("shape");
                assert_eq!(
                    validator.is_valid(&json!(model)),
                    req.validate(&cfg).is_ok(),
                    "storage {storage}: {model}"
                );
            }
        }
    }
}
