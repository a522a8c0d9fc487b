//! The document's shared schemas (`components.schemas`): the JobSpec as this gateway
//! publishes it (with its own definitions, `#/$defs/X` rewritten to components), the
//! error answer, jobs and their pages, and the operational answers (readiness, pod
//! logs, the orphan report).

use serde_json::{Value, json};

use crate::config::Config;

/// Every shared schema.
pub(super) fn all(cfg: &Config) -> Value {
    let mut jobspec = crate::jobspec::published_schema(cfg);
    let defs = jobspec
        .as_object_mut()
        .and_then(|o| o.remove("$defs"))
        .unwrap_or_else(|| json!({}));
    if let Some(o) = jobspec.as_object_mut() {
        o.remove("$schema");
    }
    let mut schemas = api();
    schemas["JobSpec"] = rewrite_refs(jobspec);
    if let (Some(s), Some(d), Value::Object(ops)) =
        (schemas.as_object_mut(), defs.as_object(), operations())
    {
        for (k, v) in d {
            s.insert(k.clone(), rewrite_refs(v.clone()));
        }
        s.extend(ops);
    }
    schemas
}

/// The error answer, a job, a page of jobs, a JSON submission.
fn api() -> Value {
    json!({
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
        "Job": job(),
        "Preemption": {
            "type": "object",
            "required": ["attempt", "byJob", "atMs", "noticeMs", "gpus", "series"],
            "properties": {
                "attempt": {"type": "integer", "minimum": 0, "description": "the attempt it preempted"},
                "byJob": {"type": "string", "description": "the job the GPUs were freed for"},
                "atMs": {"type": "integer", "description": "Unix milliseconds of the notice (SIGTERM)"},
                "noticeMs": {"type": "integer", "description": "the grace the notice gave, in milliseconds"},
                "releasedMs": {"type": ["integer", "null"], "description": "when it released its GPUs (null: the notice runs)"},
                "checkpointStep": {"type": ["integer", "null"], "description": "the step it resumes from"},
                "lostGpuSeconds": {"type": ["number", "null"], "description": "GPU-seconds of work lost (since its last acknowledged checkpoint), known at the release"},
                "releasedBy": {"type": ["string", "null"], "enum": ["exited", "checkpointed", "grace-ended", "rayjob-gone", null], "description": "what released it: its Ray job ended (exited), it acknowledged a checkpoint after the notice (checkpointed), its grace ended (grace-ended), or its RayJob was gone (rayjob-gone); null while the notice runs, when it left the notice another way (cancelled, succeeded), and for releases recorded before this field"},
                "gpus": {"type": "integer", "minimum": 0},
                "series": {"type": "string"}
            }
        },
        "Checkpoint": {
            "type": "object",
            "required": ["step", "atMs"],
            "properties": {
                "step": {"type": "integer", "minimum": 0},
                "atMs": {"type": "integer", "description": "Unix milliseconds of the acknowledgement"}
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
        "JsonSubmission": {
            "type": "object",
            "required": ["spec", "capsule"],
            "additionalProperties": false,
            "properties": {
                "spec": {"$ref": "#/components/schemas/JobSpec"},
                "capsule": {"type": "string", "pattern": "^[0-9a-f]{64}$"}
            }
        }
    })
}

/// A job as `GET /v1/jobs/{id}` answers it.
fn job() -> Value {
    json!({
        "type": "object",
        "required": ["id", "team", "name", "state", "spec"],
        "properties": {
            "id": {"type": "string"},
            "team": {"type": "string"},
            "name": {"type": "string"},
            "state": {"type": "string", "enum": ["queued", "dispatched", "initializing", "running", "preempting", "succeeded", "failed", "cancelled", "timed-out", "rejected"]},
            "attempt": {"type": "integer", "minimum": 0, "description": "its current run: 0, plus one per release after a preemption"},
            "terms": {"type": "object", "required": ["priority", "preemptible"], "description": "what it was admitted on (set with its dispatch)",
                "properties": {"priority": {"type": "integer", "description": "its spec's priority, capped by the policy"},
                    "preemptible": {"type": "boolean"},
                    "borrowedGpus": {"type": "integer", "minimum": 1, "description": "GPUs beyond its team's guaranteed quota, reclaimable by teams within theirs (absent: none)"}}},
            "preemptions": {"type": "array", "items": {"$ref": "#/components/schemas/Preemption"}},
            "attempts": {"type": "array", "items": {"type": "object", "required": ["attempt", "logs"],
                "properties": {"attempt": {"type": "integer", "minimum": 0},
                    "releasedMs": {"type": ["integer", "null"], "description": "when a preempted attempt was released (null: the current one)"},
                    "logs": {"type": "string", "description": "its driver log"}}}},
            "reason": {"type": ["string", "null"]},
            "capsuleSha256": {"type": ["string", "null"]},
            "rayjobName": {"type": ["string", "null"]},
            "fleet": {"type": "string", "description": "the fleet (cluster) it was dispatched to, committed before its RayJob is created there (absent: not dispatched yet, or dispatched before fleets were recorded)"},
            "observed": {"type": "string", "enum": ["unknown"], "description": "present while the job holds a place in a fleet marked unavailable: its state is the last one seen (not failed) until the fleet answers again"},
            "queue": {"type": "object", "properties": {
                "series": {"type": "string"}, "position": {"type": "integer"},
                "code": {"type": "string"}, "reason": {"type": "string"},
                "standing": {"type": "object", "description": "where it stands against the other teams of its series (fair share; numbers only, never another team's job)",
                    "required": ["teamShare", "fairShare", "othersAhead", "sentence"],
                    "properties": {
                        "teamShare": {"type": "number", "description": "its team's share of the series in GPUs: decayed past use plus the GPUs it holds"},
                        "fairShare": {"type": "number", "description": "the series' GPUs divided among the teams that hold or want some"},
                        "othersAhead": {"type": "object", "required": ["jobs", "gpus"], "properties": {
                            "jobs": {"type": "integer", "minimum": 0}, "gpus": {"type": "integer", "minimum": 0}}},
                        "sentence": {"type": "string"}}}}},
            "spec": {"$ref": "#/components/schemas/JobSpec"},
            "admission": {"type": "object", "description": "Decision and per-plugin trace (on submission)"},
            "history": {"type": "array", "items": {"type": "object"}},
            "decisions": {"type": "array", "items": {"type": "object"}},
            "lastCheckpoint": {"oneOf": [{"$ref": "#/components/schemas/Checkpoint"}, {"type": "null"}],
                "description": "the last checkpoint the job acknowledged (POST /v1/jobs/{id}/checkpoints)"}
        }
    })
}

/// Readiness, pod logs, the orphan report.
fn operations() -> Value {
    json!({
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
                "managed": {"type": "integer", "description": "Forge-managed RayJobs in the fleets' namespaces"},
                "orphans": {"type": "array", "items": {"type": "object", "required": ["fleet", "name", "reason"], "properties": {
                    "fleet": {"type": "string", "description": "the fleet (cluster) it is in"},
                    "name": {"type": "string"},
                    "instance": {"type": ["string", "null"]},
                    "jobId": {"type": ["string", "null"]},
                    "reason": {"type": "string", "enum": ["other-instance", "no-instance", "unknown-job", "other-fleet"]},
                    "created": {"type": ["string", "null"]}}}}
            }
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
