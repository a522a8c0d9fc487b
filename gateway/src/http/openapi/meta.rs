//! The operations about the service itself: probes and metrics (open), this document,
//! the JobSpec schema, live capacity, the caller's identity, and the orphan report.

use serde_json::{Value, json};

use super::error_response;

/// `GET /v1/fair-share`'s answer (`jobs::fair_shares`).
fn fair_share() -> Value {
    let gpus = json!({"type": "number", "minimum": 0});
    let count = json!({"type": "integer", "minimum": 0});
    let team = json!({"type": "object", "additionalProperties": false,
        "required": ["team", "weight", "decayedGpuSeconds", "usedGpus", "allocatedGpus", "queuedGpus", "shareGpus", "fairShareGpus"],
        "properties": {"team": {"type": "string"}, "weight": {"type": "number", "exclusiveMinimum": 0},
            "decayedGpuSeconds": gpus, "usedGpus": gpus, "allocatedGpus": count, "queuedGpus": count,
            "shareGpus": gpus, "fairShareGpus": gpus}});
    json!({"type": "object", "additionalProperties": false,
        "required": ["halfLifeSeconds", "policyVersion", "series"],
        "properties": {"halfLifeSeconds": count, "policyVersion": count,
            "series": {"type": "array", "items": {"type": "object", "additionalProperties": false,
                "required": ["series", "gpus", "teams"],
                "properties": {"series": {"type": "string"}, "gpus": count,
                    "teams": {"type": "array", "items": team}}}}}})
}

/// `POST /v1/fair-share/replay`'s request and answer (`jobs::dispatch::replay`).
fn replay() -> Value {
    let ms = json!({"type": ["integer", "null"], "minimum": 0, "maximum": crate::http::fair_share::MAX_MS,
        "description": "the window's end, Unix milliseconds (omitted or null: now)"});
    let seconds = json!({"type": ["integer", "null"], "minimum": 1, "maximum": crate::http::fair_share::MAX_WINDOW_S,
        "description": "the window's length up to `to` (omitted or null: a day)"});
    let orders = json!({"type": "array", "items": {"type": "object", "additionalProperties": false,
        "required": ["atMs", "dispatched"],
        "properties": {"atMs": {"type": "integer"}, "dispatched": {"type": "array", "items": {"type": "string"}}}}});
    let sha = json!({"type": "string", "pattern": "^[0-9a-f]{64}$"});
    let request = json!({"type": "object", "additionalProperties": false,
        "properties": {"to": ms, "seconds": seconds,
            "fairShare": {"type": ["object", "null"], "additionalProperties": false,
                "description": "weights to preview the passes with; omitted or null: replay them as they were",
                "properties": {"weights": super::policy::weights()}}}});
    let answer = json!({"type": "object", "additionalProperties": false,
        "required": ["from", "to", "passes", "truncated", "weights", "recorded", "replayed",
            "recordedSha256", "replayedSha256", "identical", "passesChanged"],
        "properties": {"from": {"type": "integer"}, "to": {"type": "integer"},
            "passes": {"type": "integer", "minimum": 0}, "truncated": {"type": "boolean"},
            "weights": {"type": ["object", "null"], "additionalProperties": {"type": "number"}},
            "recorded": orders, "replayed": orders,
            "recordedSha256": sha, "replayedSha256": sha,
            "identical": {"type": "boolean"}, "passesChanged": {"type": "integer", "minimum": 0}}});
    json!({"post": {
        "summary": "The dispatch journal's passes of the window up to to (default: the last day) ordered again: as recorded (identical: byte for byte) or, with fairShare, a preview of other weights; nothing changes (admins)",
        "requestBody": {"required": false, "content": {"application/json": {"schema": request}}},
        "responses": {
            "200": {"description": "the replay", "content": {"application/json": {"schema": answer}}},
            "400": error_response("invalid-replay (to, seconds or a weight out of range; a body that is not an object)"),
            "401": error_response("unauthenticated"),
            "403": error_response("admins only")}}})
}

pub(super) fn paths() -> Value {
    json!({
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
        "/v1/capacity": {"get": {"summary": "Live GPU capacity per series (every fleet summed, and each fleet's own) and the caller's team usage",
            "responses": {"200": {"description": "capacity"}, "401": error_response("unauthenticated")}}},
        "/v1/fair-share": {"get": {"summary": "Every team's share of every series against its fair share (members: their own team's rows)",
            "responses": {"200": {"description": "the table", "content": {"application/json": {"schema": fair_share()}}},
                "401": error_response("unauthenticated")}}},
        "/v1/fair-share/replay": replay(),
        "/v1/whoami": {"get": {"summary": "The caller's team, role and token name",
            "responses": {"200": {"description": "who the token is", "content": {"application/json": {"schema": {
                "type": "object", "required": ["team", "role"], "properties": {
                    "team": {"type": "string"}, "role": {"type": "string", "enum": ["member", "admin"]},
                    "name": {"type": ["string", "null"]}}}}}}}}},
        "/v1/admin/orphans": {"get": {
            "summary": "Forge-managed RayJobs this installation did not create (another or no instance label) or whose job its store does not know; reported, never deleted (admins)",
            "responses": {
                "200": {"description": "a fresh scan", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OrphanReport"}}}},
                "401": error_response("unauthenticated"),
                "403": error_response("admins only")}}}
    })
}
