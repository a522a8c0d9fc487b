//! What `forge` uses besides jobs: whether a team may name a capsule, and resumable
//! uploads of client-built capsules.

use serde_json::{Value, json};

use super::{error_response, id_param};

/// A SHA-256 in hex (a capsule's name).
const DIGEST_PATTERN: &str = "^[0-9a-f]{64}$";

pub(super) fn paths() -> Value {
    let session = session();
    json!({
        "/v1/team-capsules/{digest}": {
            "parameters": [{"name": "digest", "in": "path", "required": true, "schema": {"type": "string", "pattern": DIGEST_PATTERN}}],
            "get": {"summary": "Whether the caller's team may name this capsule in a submission (HEAD works too)",
                "responses": {"200": {"description": "present", "content": {"application/json": {"schema": {"type": "object",
                        "required": ["digest"], "properties": {"digest": {"type": "string", "pattern": DIGEST_PATTERN}}}}}},
                    "400": error_response("invalid-capsule"), "404": error_response("unknown-capsule")}}},
        "/v1/uploads": {"post": {"summary": "Start (or resume: same digest and size) a resumable upload of a client-built capsule",
            "requestBody": {"required": true, "content": {"application/json": {"schema": {
                "type": "object", "required": ["size", "digest"], "additionalProperties": false, "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": crate::uploads::max_upload_size()},
                    "digest": {"type": "string", "pattern": DIGEST_PATTERN},
                    "partBytes": {"type": "integer", "minimum": 1, "maximum": crate::uploads::MAX_CHUNK_BYTES,
                        "description": "the part size wished for (every part but the last; each PUT sends one whole part), default 8 MiB: the session's `partBytes` is the nearest size within the body limit, at least 5 MiB on S3 unless there is one part, and large enough for at most 10 000 parts"}}}}}},
            "responses": {"201": session.clone(), "200": session.clone(),
                "400": error_response("invalid-digest | upload.bad-size (0, or over the largest capsule) | upload.bad-part-size (outside 1 to 64 MiB)"),
                "429": error_response("upload.too-many-sessions (details.open lists them)")}}},
        "/v1/uploads/{id}": {
            "parameters": id_param(),
            "get": {"summary": "Which byte ranges are present and missing (where to resume)",
                "responses": {"200": session.clone(), "404": error_response("upload.not-found")}},
            "put": {"summary": "One chunk, one whole part of the session (Content-Range: bytes first-last/size, first a multiple of partBytes, partBytes long but the last); idempotent, any order",
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
            "parameters": id_param(),
            "post": {"summary": "Verify (every byte present, SHA-256, a canonical capsule) and store it; name it in POST /v1/jobs as `capsule`",
                "responses": {"200": {"description": "stored", "content": {"application/json": {"schema": {"type": "object",
                        "required": ["capsule", "size", "deduplicated"], "properties": {
                            "capsule": {"type": "string", "pattern": DIGEST_PATTERN}, "size": {"type": "integer"},
                            "deduplicated": {"type": "boolean"}}}}}},
                    "404": error_response("upload.not-found"),
                    "409": error_response("upload.incomplete (details.missing) | upload.completing (another request completes it: wait for the capsule)"),
                    "422": error_response("upload.digest-mismatch | upload.not-canonical"),
                    "400": error_response("capsule.* (hostile content)")}}}
    })
}

/// An upload session's answer.
fn session() -> Value {
    let range = json!({"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2});
    json!({"description": "the session: received / missing byte ranges are [start, end)",
        "content": {"application/json": {"schema": {"type": "object",
            "required": ["id", "digest", "size", "received", "receivedBytes", "missing", "partBytes", "maxChunkBytes", "expiresAtMs", "resumed"],
            "properties": {
                "id": {"type": "string"}, "digest": {"type": "string", "pattern": DIGEST_PATTERN},
                "size": {"type": "integer", "minimum": 1},
                "received": {"type": "array", "items": range.clone()}, "receivedBytes": {"type": "integer", "minimum": 0},
                "missing": {"type": "array", "items": range},
                "partBytes": {"type": "integer", "minimum": 1}, "maxChunkBytes": {"type": "integer", "minimum": 1},
                "expiresAtMs": {"type": "integer"}, "resumed": {"type": "boolean"}}}}}})
}
