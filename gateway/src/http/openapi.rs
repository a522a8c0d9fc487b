//! The OpenAPI 3.1 document served at `/v1/openapi.json`, and the JobSpec schema at
//! `/v1/schemas/jobspec`. Schemas of the request bodies come from the code (`schemars`
//! for the JobSpec, with the semantic rules a schema can state: `jobspec::published`),
//! so the document cannot drift from what the gateway validates; a test holds the
//! document against the router's route table in both directions. The answers every
//! operation shares (401, 400 invalid-query, 413, 408) are added by
//! [`super::openapi_shared`], the policy operations' constraints by
//! [`super::openapi_policy`]; `tests/schemathesis/run.sh` holds a running gateway to
//! the document.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::config::Config;
use crate::state::AppState;

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

/// `GET /v1/openapi.json`.
pub async fn serve(State(state): State<AppState>, _caller: Caller) -> Json<Value> {
    Json(document(&state.config))
}

/// `GET /v1/schemas/jobspec`: the schema as published (this gateway's frameworks and
/// storage).
pub async fn jobspec_schema(State(state): State<AppState>, _caller: Caller) -> Json<Value> {
    Json(crate::jobspec::published_schema(&state.config))
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

fn job_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}
    })
}

/// The document (the JobSpec as this gateway's configuration accepts it).
pub fn document(cfg: &Config) -> Value {
    let mut jobspec = crate::jobspec::published_schema(cfg);
    let defs = jobspec
        .as_object_mut()
        .and_then(|o| o.remove("$defs"))
        .unwrap_or_else(|| json!({}));
    if let Some(o) = jobspec.as_object_mut() {
        o.remove("$schema");
    }
    let jobspec = rewrite_refs(jobspec);
    let mut schemas = json!({
        "JobSpec": jobspec,
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "description": "Stable, machine-readable code"},
                    "message": {"type": "string"},
                    "details": {"type": "object", "description": "Code-specific details: the request `field`; for invalid-spec `fields` (the first FORGE_MAX_FIELD_ERRORS problems), `total` and `omitted`"}
                }
            }}
        },
        "Job": {
            "type": "object",
            "required": ["id", "team", "name", "state", "spec"],
            "properties": {
                "id": {"type": "string"},
                "team": {"type": "string"},
                "name": {"type": "string"},
                "state": {"type": "string", "enum": ["queued", "dispatched", "initializing", "running", "succeeded", "failed", "cancelled", "timed-out", "rejected"]},
                "reason": {"type": ["string", "null"]},
                "capsuleSha256": {"type": ["string", "null"]},
                "rayjobName": {"type": ["string", "null"]},
                "queue": {"type": "object", "properties": {
                    "series": {"type": "string"}, "position": {"type": "integer"},
                    "code": {"type": "string"}, "reason": {"type": "string"}}},
                "spec": {"$ref": "#/components/schemas/JobSpec"},
                "admission": {"type": "object", "description": "Decision and per-plugin trace (on submission)"},
                "history": {"type": "array", "items": {"type": "object"}},
                "decisions": {"type": "array", "items": {"type": "object"}}
            }
        },
        "JobPage": {
            "type": "object",
            "required": ["jobs"],
            "properties": {
                "jobs": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}},
                "next": {"type": "string", "description": "cursor of the next page (absent on the last)"}
            }
        },
        "Readiness": {
            "type": "object",
            "required": ["ready", "role", "replica", "checks"],
            "properties": {
                "ready": {"type": "boolean"},
                "failing": {"type": "string", "enum": ["store", "caches", "policy"]},
                "role": {"type": "string", "enum": ["leader", "follower"]},
                "epoch": {"type": "integer", "description": "leader: the term's fencing token"},
                "leader": {"type": ["string", "null"], "description": "follower: the lease holder last seen"},
                "replica": {"type": "string"},
                "checks": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                    "ok": {"type": "boolean"}, "detail": {"type": "string"}}}}
            }
        },
        "PodLog": {
            "type": "object",
            "required": ["pod", "role", "container", "bytes", "truncated", "cutBytes", "archived"],
            "properties": {
                "pod": {"type": "string"},
                "role": {"type": "string", "enum": ["head", "worker", "submitter"]},
                "container": {"type": "string"},
                "bytes": {"type": ["integer", "null"], "minimum": 0, "description": "bytes of the archived log (its marker line included); null while live"},
                "truncated": {"type": "boolean", "description": "the log was over FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD: its tail is archived after a marker line"},
                "cutBytes": {"type": "integer", "minimum": 0, "description": "bytes cut from the log's start"},
                "archived": {"type": "boolean", "description": "false: live (the job runs) or the container never started"}
            }
        },
        "OrphanReport": {
            "type": "object",
            "required": ["instance", "managed", "orphans"],
            "properties": {
                "instance": {"type": "string", "description": "this installation's identity (label forge.dev/instance)"},
                "managed": {"type": "integer", "description": "Forge-managed RayJobs in the namespace"},
                "orphans": {"type": "array", "items": {"type": "object", "required": ["name", "reason"], "properties": {
                    "name": {"type": "string"},
                    "instance": {"type": ["string", "null"]},
                    "jobId": {"type": ["string", "null"]},
                    "reason": {"type": "string", "enum": ["other-instance", "no-instance", "unknown-job"]},
                    "created": {"type": ["string", "null"]}}}}
            }
        },
        "JsonSubmission": {
            "type": "object",
            "required": ["spec", "capsule"],
            "additionalProperties": false,
            "properties": {
                "spec": {"$ref": "#/components/schemas/JobSpec"},
                "capsule": {"type": "string", "pattern": "^[0-9a-f]{64}$"}
            }
        }
    });
    if let (Some(s), Some(d)) = (schemas.as_object_mut(), defs.as_object()) {
        for (k, v) in d {
            s.insert(k.clone(), rewrite_refs(v.clone()));
        }
    }
    let id_param =
        json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
    let job_states: Vec<&str> = crate::domain::JobState::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Forge gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Submit GPU training jobs; admission by WebAssembly policy plugins; runs as KubeRay RayJobs."
        },
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas
        },
        "paths": {
            "/livez": {"get": {"summary": "Liveness: the process serves HTTP (nothing else is checked)", "security": [], "responses": {"200": {"description": "ok"}}}},
            "/healthz": {"get": {"summary": "Liveness (alias of /livez)", "security": [], "responses": {"200": {"description": "ok"}}}},
            "/readyz": {"get": {"summary": "Readiness: store reachable, Node/Pod caches synced, a policy chain active; the replica's role",
                "security": [],
                "responses": {
                    "200": {"description": "ready", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Readiness"}}}},
                    "503": {"description": "not ready: `failing` names the first failed check", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Readiness"}}}}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics: aggregates without a token; with FORGE_METRICS_TOKEN or an admin token also the per-plugin series (which name teams)",
                "security": [{}, {"bearer": []}],
                "responses": {"200": {"description": "text exposition format"}, "401": error_response("a token that is neither the metrics token nor a known one")}}},
            "/v1/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}},
            "/v1/schemas/jobspec": {"get": {"summary": "JobSpec JSON Schema", "responses": {"200": {"description": "schema"}}}},
            "/v1/capacity": {"get": {"summary": "Live GPU capacity per series and the caller's team usage",
                "responses": {"200": {"description": "capacity"}, "401": error_response("unauthenticated")}}},
            "/v1/admission/review": {"post": {"summary": "Dry run: the decision the active policy would make now, with a per-plugin trace",
                "requestBody": {"required": true, "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}},
                    "application/yaml": {"schema": {"$ref": "#/components/schemas/JobSpec"}}}},
                "responses": {"200": {"description": "decision"}, "413": error_response("body-too-large (FORGE_MAX_DOCUMENT_KIB)"), "422": error_response("invalid spec"), "503": error_response("policy failed (fails closed)")}}},
            "/v1/jobs": {
                "post": {"summary": "Submit a job",
                    "requestBody": {"required": true, "content": {
                        "multipart/form-data": {"schema": {"type": "object", "required": ["spec", "code"], "additionalProperties": false, "properties": {
                            "spec": {"$ref": "#/components/schemas/JobSpec"},
                            "code": {"type": "string", "format": "binary", "description": ".zip or .tar.gz"}}}},
                        "application/json": {"schema": {"$ref": "#/components/schemas/JsonSubmission"}}}},
                    "responses": {
                        "202": job_response("accepted: queued (durably) with the admission decision"),
                        "400": error_response("malformed request or hostile archive (capsule.*)"),
                        "403": error_response("policy-rejected"),
                        "413": error_response("body or archive too large"),
                        "422": error_response("invalid-spec (every field problem) or unknown-capsule"),
                        "429": error_response("rate-limited (FORGE_SUBMISSIONS_PER_MINUTE) or queue-full (FORGE_MAX_QUEUED_PER_TEAM); Retry-After says when to try again"),
                        "503": error_response("policy or storage unavailable")}},
                "get": {"summary": "List jobs (newest first)",
                    "parameters": [
                        {"name": "state", "in": "query", "schema": {"type": "string", "enum": job_states}},
                        {"name": "team", "in": "query", "schema": {"type": "string"}, "description": "admins only (members: their own team)"},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": crate::store::MAX_PAGE}, "description": "page size (default 50)"},
                        {"name": "cursor", "in": "query", "schema": {"type": "string", "pattern": crate::http::jobs::CURSOR_PATTERN}, "description": "`next` of the previous page"}],
                    "responses": {"200": {"description": "a page of jobs and the next cursor", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobPage"}}}},
                        "403": error_response("forbidden-team: members list their own team only")}}
            },
            "/v1/jobs/{id}": {
                "parameters": id_param.clone(),
                "get": {"summary": "A job with queue position, reason, history and decisions, and its Ray dashboard (address, kubectl port-forward command) while it starts or runs",
                    "responses": {"200": job_response("the job"), "404": error_response("not found (or another team's)")}},
                "delete": {"summary": "Cancel a job",
                    "responses": {"200": job_response("cancelled"), "404": error_response("not found"), "409": error_response("not-cancellable")}}
            },
            "/v1/jobs/{id}/events": {
                "parameters": id_param.clone(),
                "get": {"summary": "Deduplicated Kubernetes events of the job's objects and the structured pending reason",
                    "responses": {"200": {"description": "{pending?, events[]}: pending is {code, message, object, count, container?, lastLines?}; a crash-looping container (CrashLoopBackOff) is named with its pod and container, its last exit code and lastLines, the last (at most 10, each at most 200 characters) lines of its previous instance's log"}, "404": error_response("not found")}}
            },
            "/v1/jobs/{id}/logs": {
                "parameters": id_param.clone(),
                "get": {"summary": "The driver (default), head or one pod's log: archived once the job ended (each pod's tail, bounded by FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD), live before; from a byte offset or the last lines; with follow, live until the job ends, then the archived rest. Streamed, never held whole",
                    "parameters": [
                        {"name": "name", "in": "query", "schema": {"type": "string", "enum": ["driver", "head"]}, "description": "not with pod"},
                        {"name": "pod", "in": "query", "schema": {"type": "string"}, "description": "one pod of the job, as GET /v1/jobs/{id}/logs/pods lists it (not with name)"},
                        {"name": "container", "in": "query", "schema": {"type": "string"}, "description": "with pod: its container (default: the Ray or submitter container)"},
                        {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": u64::MAX}, "description": "start at this byte (a reconnecting follower passes the offset it reached)"},
                        {"name": "tail", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": u64::MAX}, "description": "start at the last N lines (not with offset: both is 400 invalid-query)"},
                        {"name": "follow", "in": "query", "schema": {"type": "boolean"}}],
                    "responses": {"200": {"description": "text/plain; header x-forge-log-offset: the offset of the body's first byte"},
                        "400": error_response("invalid-query (name with pod, container without pod, offset with tail)"),
                        "404": error_response("no log yet (logs-not-archived), no such pod of the job, or no such job (or another team's)"),
                        "410": error_response("logs-expired: the job's archived logs were deleted after FORGE_RETENTION_LOGS_S (details.deletedAtMs)")}}
            },
            "/v1/jobs/{id}/logs/pods": {
                "parameters": id_param.clone(),
                "get": {"summary": "Every pod's log of the job (head, workers, submitters): archived once the job ended (bytes, truncated), the live pods before",
                    "responses": {"200": {"description": "the job's pod logs, head first", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/PodLog"}}}}},
                        "404": error_response("not found (or another team's)"),
                        "410": error_response("logs-expired: the job's archived logs were deleted after FORGE_RETENTION_LOGS_S (details.deletedAtMs)")}}
            },
            "/v1/jobs/{id}/watch": {
                "parameters": id_param,
                "get": {"summary": "The job's changes as server-sent events: snapshot, then state / standing / pending events; ends after the terminal state",
                    "responses": {"200": {"description": "text/event-stream; each event's data is JSON (`type`: snapshot | State | Standing | pending reason)"},
                        "404": error_response("not found (or another team's)")}}
            },
            "/v1/admin/orphans": {"get": {
                "summary": "Forge-managed RayJobs this installation did not create (another or no instance label) or whose job its store does not know; reported, never deleted (admins)",
                "responses": {
                    "200": {"description": "a fresh scan", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OrphanReport"}}}},
                    "401": error_response("unauthenticated"),
                    "403": error_response("admins only")}}}
        }
    });
    for more in [policy_paths(), client_paths(), playground_paths(cfg)] {
        if let (Some(paths), Value::Object(more)) = (doc["paths"].as_object_mut(), more) {
            paths.extend(more);
        }
    }
    super::openapi_policy::constrain(&mut doc, cfg);
    super::openapi_shared::complete(&mut doc);
    doc
}

/// Playgrounds: inference servers a team starts (see `http/playgrounds.rs`).
fn playground_paths(cfg: &Config) -> Value {
    use crate::playground::request::{MAX_ARGS, MAX_GPUS, MAX_LIFETIME_SECS};
    let min_ttl = cfg.gateway.playground_min_ttl_s;
    let id = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
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
                            "idleSeconds": {"type": ["integer", "null"], "minimum": min_ttl, "maximum": MAX_LIFETIME_SECS, "description": "at most ttlSeconds"},
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
                        "properties": {"seconds": {"type": "integer", "minimum": 1, "maximum": MAX_LIFETIME_SECS}}}}}},
                    "responses": {"200": one("the playground"), "404": error_response("not found"),
                        "409": error_response("playground-ended"), "422": error_response("invalid-playground")}}
            }
    })
}

/// Identity, capsule presence and resumable uploads (what `forge` uses besides jobs).
fn client_paths() -> Value {
    let id = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
    let range = json!({"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2});
    let session = json!({"description": "the session: received / missing byte ranges are [start, end)",
        "content": {"application/json": {"schema": {"type": "object",
            "required": ["id", "digest", "size", "received", "receivedBytes", "missing", "maxChunkBytes", "expiresAtMs", "resumed"],
            "properties": {
                "id": {"type": "string"}, "digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "size": {"type": "integer", "minimum": 1},
                "received": {"type": "array", "items": range.clone()}, "receivedBytes": {"type": "integer", "minimum": 0},
                "missing": {"type": "array", "items": range}, "maxChunkBytes": {"type": "integer", "minimum": 1},
                "expiresAtMs": {"type": "integer"}, "resumed": {"type": "boolean"}}}}}});
    json!({
        "/v1/jobs/watch": {"get": {"summary": "Every change of the caller's team's jobs (admins: all, or ?team=) as server-sent events: state, standing, resync",
            "parameters": [{"name": "team", "in": "query", "schema": {"type": "string"}, "description": "admins only"}],
            "responses": {"200": {"description": "text/event-stream"}, "403": error_response("forbidden-team")}}},
        "/v1/whoami": {"get": {"summary": "The caller's team, role and token name",
            "responses": {"200": {"description": "who the token is", "content": {"application/json": {"schema": {
                "type": "object", "required": ["team", "role"], "properties": {
                    "team": {"type": "string"}, "role": {"type": "string", "enum": ["member", "admin"]},
                    "name": {"type": ["string", "null"]}}}}}}}}},
        "/v1/team-capsules/{digest}": {
            "parameters": [{"name": "digest", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}],
            "get": {"summary": "Whether the caller's team may name this capsule in a submission (HEAD works too)",
                "responses": {"200": {"description": "present", "content": {"application/json": {"schema": {"type": "object",
                        "required": ["digest"], "properties": {"digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}}}}},
                    "400": error_response("invalid-capsule"), "404": error_response("unknown-capsule")}}},
        "/v1/uploads": {"post": {"summary": "Start (or resume: same digest and size) a resumable upload of a client-built capsule",
            "requestBody": {"required": true, "content": {"application/json": {"schema": {
                "type": "object", "required": ["size", "digest"], "additionalProperties": false, "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": crate::uploads::max_upload_size()},
                    "digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}}}}},
            "responses": {"201": session.clone(), "200": session.clone(),
                "400": error_response("invalid-digest | upload.bad-size (size 0)"), "413": error_response("upload.bad-size (over the largest capsule)"),
                "429": error_response("upload.too-many-sessions (details.open lists them)")}}},
        "/v1/uploads/{id}": {
            "parameters": id.clone(),
            "get": {"summary": "Which byte ranges are present and missing (where to resume)",
                "responses": {"200": session.clone(), "404": error_response("upload.not-found")}},
            "put": {"summary": "One chunk at its offset (Content-Range: bytes first-last/size); idempotent, any order",
                "parameters": [{"name": "Content-Range", "in": "header", "required": true,
                    "schema": {"type": "string", "pattern": "^bytes [0-9]{1,19}-[0-9]{1,19}/([0-9]{1,19}|\\*)$"},
                    "description": "the chunk's bytes: first-last (inclusive, first <= last) of the capsule's size"}],
                "requestBody": {"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
                "responses": {"200": session,
                    "400": error_response("upload.bad-range | upload.body-length | upload.interrupted"),
                    "404": error_response("upload.not-found"), "413": error_response("upload.chunk-too-large")}},
            "delete": {"summary": "Abort: the session and its bytes are removed",
                "responses": {"204": {"description": "removed"}, "404": error_response("upload.not-found")}}},
        "/v1/uploads/{id}/complete": {
            "parameters": id,
            "post": {"summary": "Verify (every byte present, SHA-256, a canonical capsule) and store it; name it in POST /v1/jobs as `capsule`",
                "responses": {"200": {"description": "stored", "content": {"application/json": {"schema": {"type": "object",
                        "required": ["capsule", "size", "deduplicated"], "properties": {
                            "capsule": {"type": "string", "pattern": "^[0-9a-f]{64}$"}, "size": {"type": "integer"},
                            "deduplicated": {"type": "boolean"}}}}}},
                    "404": error_response("upload.not-found"),
                    "409": error_response("upload.incomplete (details.missing)"),
                    "422": error_response("upload.digest-mismatch | upload.not-canonical"),
                    "400": error_response("capsule.* (hostile content)")}}}
    })
}

/// The policy-management operations (`http::policy`, `http::plugins`, `http::shadow`).
fn policy_paths() -> Value {
    let team = json!({"name": "team", "in": "query", "schema": {"type": "string"},
        "description": "address this team's chain (members: their own team) instead of the global one"});
    let link = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "version": {"type": "string"},
        "digest": {"type": "string", "description": "sha256:<hex>; or name + version"},
        "settings": {"description": "JSON settings checked by the plugin's validate-settings"}}});
    json!({
        "/v1/plugins": {
            "post": {"summary": "Upload a policy plugin (checked before it is stored)",
                "requestBody": {"required": true, "content": {"multipart/form-data": {"schema": {
                    "type": "object", "required": ["component", "name", "version"], "properties": {
                        "component": {"type": "string", "format": "binary"},
                        "name": {"type": "string"}, "version": {"type": "string"},
                        "description": {"type": "string"},
                        "settings": {"type": "string", "description": "JSON, checked with validate-settings"},
                        "scope": {"type": "string", "enum": ["team", "global"]},
                        "memoryMib": {"type": "integer", "minimum": 1, "description": "memory cap of the plugin's instances (default FORGE_POLICY_MEMORY_MIB, at most FORGE_POLICY_MAX_MEMORY_MIB)"},
                        "deadlineMs": {"type": "integer", "minimum": 1, "description": "per-call deadline (default FORGE_POLICY_DEADLINE_MS, at most FORGE_POLICY_MAX_DEADLINE_MS)"}}}}}},
                "responses": {"201": {"description": "registered"}, "200": {"description": "identical re-upload"},
                    "403": error_response("global plugins are admin-only"),
                    "409": error_response("plugin.version-exists"),
                    "413": error_response("plugin.too-large"),
                    "422": error_response("plugin.not-a-component | plugin.wrong-world | plugin.forbidden-import | plugin.too-complex | plugin.compile-failed | plugin.compile-timeout | plugin.invalid-settings | plugin.team-limit | plugin.limit-too-high"),
                    "429": error_response("rate-limited: the team's failed uploads are over FORGE_PLUGIN_FAILED_UPLOADS_PER_HOUR (Retry-After)"),
                    "503": error_response("plugin.compiler-busy (Retry-After) | storage-unavailable")}},
            "get": {"summary": "Plugins the caller may use (global and the team's; admins: all)",
                "parameters": [team.clone()], "responses": {"200": {"description": "{plugins[]}"}}}
        },
        "/v1/policy": {
            "get": {"summary": "The active global chain and the team's chain", "parameters": [team.clone()],
                "responses": {"200": {"description": "{global, team}"}}},
            "put": {"summary": "Replace a chain (optimistic concurrency on expectedVersion); built and warmed before an atomic swap",
                "parameters": [team.clone()],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["expectedVersion", "plugins"], "properties": {
                        "expectedVersion": {"type": "integer"}, "plugins": {"type": "array", "items": link.clone()},
                        "comment": {"type": "string"}, "replay": {"type": "integer", "description": "replay against the last N decisions"},
                        "dryRun": {"type": "boolean"}}}}}},
                "responses": {"200": {"description": "{activated?, replay?, dryRun}"},
                    "403": error_response("the global chain is admin-only"),
                    "409": error_response("policy.version-conflict"),
                    "422": error_response("policy.unknown-plugin | policy.chain-too-long | plugin.invalid-settings")}}
        },
        "/v1/policy/rollback": {"post": {"summary": "Activate the previous (or a given) version's exact chain as a new version",
            "parameters": [team.clone()],
            "responses": {"200": {"description": "the activation"}, "409": error_response("policy.no-previous-version | policy.version-conflict")}}},
        "/v1/policy/history": {"get": {"summary": "Versions of a chain: who, when, from → to, comment",
            "parameters": [team], "responses": {"200": {"description": "{scope, versions[]}"}}}},
        "/v1/policy/shadow": {
            "get": {"summary": "The shadow candidate, its agreement rate and the differing cases",
                "responses": {"200": {"description": "report"}}},
            "put": {"summary": "Shadow a candidate global chain on real submissions (never enforced; admin)",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["plugins"], "properties": {
                        "plugins": {"type": "array", "items": link}, "comment": {"type": "string"}}}}}},
                "responses": {"200": {"description": "report"}, "403": error_response("admin only")}},
            "delete": {"summary": "Stop shadowing (final report)",
                "responses": {"200": {"description": "report"}, "404": error_response("no candidate")}}
        }
    })
}

/// `#/$defs/X` → `#/components/schemas/X`.
fn rewrite_refs(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = match (&*k, v) {
                        ("$ref", Value::String(s)) => {
                            Value::String(s.replace("#/$defs/", "#/components/schemas/"))
                        }
                        (_, other) => rewrite_refs(other),
                    };
                    (k, v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(rewrite_refs).collect()),
        other => other,
    }
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
        for (method, path) in crate::http::ROUTES {
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
                    crate::http::ROUTES.contains(&(method.as_str(), path.as_str())),
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
