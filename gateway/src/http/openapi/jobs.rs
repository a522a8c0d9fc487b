//! The job operations: submit, review, list, read, cancel, and a job's events, logs and
//! changes.

use serde_json::{Value, json};

use super::{error_response, id_param, job_response};

pub(super) fn paths() -> Value {
    let mut paths = json!({
        "/v1/admission/review": {"post": {"summary": "Dry run: the decision the active policy would make now, with a per-plugin trace",
            "parameters": [traceparent("the review is traced (with a span per plugin) only when this is sent and traces are exported")],
            "requestBody": {"required": true, "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}},
                "application/yaml": {"schema": {"$ref": "#/components/schemas/JobSpec"}}}},
            "responses": {"200": {"description": "decision"}, "413": error_response("body-too-large (FORGE_MAX_DOCUMENT_KIB)"), "422": error_response("invalid spec"), "503": error_response("policy failed (fails closed)")}}},
        "/v1/jobs": collection(),
        "/v1/jobs/{id}": {
            "parameters": id_param(),
            "get": {"summary": "A job with queue position, reason, history and decisions, and its Ray dashboard (address, kubectl port-forward command) while it starts or runs",
                "responses": {"200": job_response("the job"), "404": error_response("not found (or another team's)")}},
            "delete": {"summary": "Cancel a job",
                "responses": {"200": job_response("cancelled"), "404": error_response("not found"), "409": error_response("not-cancellable")}}
        },
        "/v1/jobs/{id}/events": {
            "parameters": id_param(),
            "get": {"summary": "Deduplicated Kubernetes events of the job's objects and the structured pending reason",
                "responses": {"200": {"description": "{pending?, events[]}: pending is {code, message, object, count, container?, lastLines?}; a crash-looping container (CrashLoopBackOff) is named with its pod and container, its last exit code and lastLines, the last (at most 10, each at most 200 characters) lines of its previous instance's log"}, "404": error_response("not found"), "503": error_response("cluster-unavailable: the Kubernetes API did not answer within 2 s (Retry-After)")}}
        },
        "/v1/jobs/{id}/checkpoints": {
            "parameters": id_param(),
            "post": {"summary": "A running job acknowledges a checkpoint it can resume from (its step); authorized by the job's own FORGE_JOB_TOKEN, not a team token",
                "security": [{"jobToken": []}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["step"], "additionalProperties": false,
                    "properties": {"step": {"type": "integer", "minimum": 0, "maximum": crate::store::checkpoints::MAX_STEP}}}}}},
                "responses": {
                    "201": {"description": "recorded as the job's last checkpoint", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Checkpoint"}}}},
                    "200": {"description": "the same step was acknowledged before: that record", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Checkpoint"}}}},
                    "400": error_response("invalid-checkpoint (details.field)"),
                    "401": error_response("unauthenticated: not this installation's job token"),
                    "403": error_response("token-for-another-job"),
                    "404": error_response("not found"),
                    "409": error_response("job-not-running (queued) or checkpoint-stale (a step below the last one; details.lastCheckpoint)"),
                    "410": error_response("job-ended: the token ended with the job"),
                    "413": error_response("body-too-large")}}
        },
        "/v1/jobs/{id}/logs": logs(),
        "/v1/jobs/{id}/logs/pods": {
            "parameters": id_param(),
            "get": {"summary": "Every pod's log of the job (head, workers, submitters): archived once the job ended (bytes, truncated), the live pods before",
                "responses": {"200": {"description": "the job's pod logs, head first", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/PodLog"}}}}},
                    "404": error_response("not found (or another team's)"),
                    "410": error_response("logs-expired: the job's archived logs were deleted after FORGE_RETENTION_LOGS_S (details.deletedAtMs)")}}
        }
    });
    if let (Some(p), Value::Object(streams)) = (paths.as_object_mut(), streams()) {
        p.extend(streams);
    }
    paths
}

/// The optional W3C trace-context header. Not a pattern: an invalid value is ignored
/// (a new trace starts), as the W3C Trace Context asks, not refused.
fn traceparent(what: &str) -> Value {
    json!({"name": "traceparent", "in": "header", "required": false,
        "schema": {"type": "string"},
        "description": format!("W3C Trace Context (`00-<trace id>-<parent id>-<flags>`): {what}; an invalid value is ignored")})
}

/// `/v1/jobs`: submit and list.
fn collection() -> Value {
    let job_states: Vec<&str> = crate::domain::JobState::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    json!({
        "post": {"summary": "Submit a job",
            "parameters": [traceparent("the parent of the job's trace (its submission span); the job's spans, the RayJob's `forge.dev/traceparent` annotation and the Ray processes' `TRACEPARENT` follow from it")],
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
                "503": error_response("policy or storage unavailable; not-ready: the cluster view (Node/Pod caches) is still syncing (Retry-After)")}},
        "get": {"summary": "List jobs (newest first)",
            "parameters": [
                {"name": "state", "in": "query", "schema": {"type": "string", "enum": job_states}},
                {"name": "team", "in": "query", "schema": {"type": "string"}, "description": "admins only (members: their own team)"},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": crate::store::MAX_PAGE}, "description": "page size (default 50)"},
                {"name": "cursor", "in": "query", "schema": {"type": "string", "pattern": crate::http::jobs::CURSOR_PATTERN}, "description": "`next` of the previous page"}],
            "responses": {"200": {"description": "a page of jobs and the next cursor", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobPage"}}}},
                "403": error_response("forbidden-team: members list their own team only")}}
    })
}

/// `/v1/jobs/{id}/logs`. Which log and where to start are one exploded query object
/// (each property is its own query parameter, as before), so the document can state
/// what excludes what: `name` or `pod`, `container` only with `pod`, `offset` or
/// `tail`.
fn logs() -> Value {
    json!({
        "parameters": id_param(),
        "get": {"summary": "The driver (default), head or one pod's log: archived once the job ended (each pod's tail, bounded by FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD), live before; from a byte offset or the last lines; with follow, live until the job ends, then the archived rest. Streamed, never held whole",
            "parameters": [
                {"name": "source", "in": "query", "style": "form", "explode": true,
                    "description": "which log and where to start, each its own query parameter: `name` or `pod` (not both; `container` only with `pod`), `offset` or `tail` (not both)",
                    "schema": {"type": "object", "additionalProperties": false,
                        "properties": {
                            "name": {"type": "string", "enum": ["driver", "head"], "description": "driver (default) or head; not with pod"},
                            "pod": {"type": "string", "description": "one pod of the job, as GET /v1/jobs/{id}/logs/pods lists it (not with name)"},
                            "container": {"type": "string", "description": "with pod only: its container (default: the Ray or submitter container)"},
                            "offset": {"type": "integer", "minimum": 0, "maximum": u64::MAX, "description": "start at this byte (a reconnecting follower passes the offset it reached)"},
                            "tail": {"type": "integer", "minimum": 0, "maximum": u64::MAX, "description": "start at the last N lines (not with offset)"}},
                        "dependentSchemas": {"pod": {"not": {"required": ["name"]}}, "offset": {"not": {"required": ["tail"]}}},
                        "dependentRequired": {"container": ["pod"]}}},
                {"name": "follow", "in": "query", "schema": {"type": "boolean"}},
                {"name": "attempt", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": u32::MAX},
                    "description": "an earlier (preempted) attempt's archived logs, not with follow; default: the current attempt"}],
            "responses": {"200": {"description": "text/plain; header x-forge-log-offset: the offset of the body's first byte"},
                "400": error_response("invalid-query (name with pod, container without pod, offset with tail, follow with an earlier attempt)"),
                "404": error_response("no log yet (logs-not-archived), no such pod of the job, an attempt the job has not had (attempt-not-found), or no such job (or another team's)"),
                "410": error_response("logs-expired: the job's archived logs were deleted after FORGE_RETENTION_LOGS_S (details.deletedAtMs)")}}
    })
}

/// The server-sent event streams: one job's changes, and a team's.
fn streams() -> Value {
    json!({
        "/v1/jobs/{id}/watch": {
            "parameters": id_param(),
            "get": {"summary": "The job's changes as server-sent events: snapshot, then state / standing / pending events; ends after the terminal state",
                "responses": {"200": {"description": "text/event-stream; each event's data is JSON (`type`: snapshot | State | Standing | pending reason)"},
                    "404": error_response("not found (or another team's)")}}
        },
        "/v1/jobs/watch": {"get": {"summary": "Every change of the caller's team's jobs (admins: all, or ?team=) as server-sent events: state, standing, resync",
            "parameters": [{"name": "team", "in": "query", "schema": {"type": "string"}, "description": "admins only"}],
            "responses": {"200": {"description": "text/event-stream"}, "403": error_response("forbidden-team")}}}
    })
}
