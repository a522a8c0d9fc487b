//! The exact request constraints of the policy-management operations in the OpenAPI
//! document (`POST /v1/plugins`, `PUT /v1/policy`, `POST /v1/policy/rollback`,
//! `GET /v1/policy/history`), stated from the same constants and configuration the
//! registry and the handlers check — plugin name and version patterns, the plugin
//! limits an operator allows, the rollback body and the history page size — so a
//! request that follows the document is never refused for its shape.

use serde_json::{Value, json};

use crate::config::Config;

/// A plugin name (`policy::registry::valid_name`).
pub const PLUGIN_NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";
/// A plugin version (`policy::registry::valid_version`).
pub const PLUGIN_VERSION_PATTERN: &str = "^[A-Za-z0-9._+-]{1,64}$";
/// A plugin digest as links name it.
pub const PLUGIN_DIGEST_PATTERN: &str = "^sha256:[0-9a-f]{64}$";

/// Applies the constraints to `doc` (built by `openapi::document`).
pub fn constrain(doc: &mut Value, cfg: &Config) {
    let g = &cfg.gateway;
    let max_mib = g.policy_max_memory_mib.max(g.policy_memory_mib);
    let max_ms = g.policy_max_deadline_ms.max(g.policy_deadline_ms);
    let paths = &mut doc["paths"];
    if let Some(schema) =
        paths.pointer_mut("/~1v1~1plugins/post/requestBody/content/multipart~1form-data/schema")
    {
        // Any other part is refused (400 unknown-part).
        schema["additionalProperties"] = json!(false);
    }
    if let Some(parts) = paths.pointer_mut(
        "/~1v1~1plugins/post/requestBody/content/multipart~1form-data/schema/properties",
    ) {
        parts["name"]["pattern"] = json!(PLUGIN_NAME_PATTERN);
        parts["version"]["pattern"] = json!(PLUGIN_VERSION_PATTERN);
        parts["memoryMib"]["maximum"] = json!(max_mib);
        parts["deadlineMs"]["maximum"] = json!(max_ms);
        for text in ["name", "version", "description", "settings"] {
            parts[text]["maxLength"] = json!(64 << 10);
        }
    }
    let link = json!({"type": "object", "additionalProperties": false,
        "description": "a stored plugin, by `digest` or by `name` and `version`, with its settings (checked by its validate-settings)",
        "properties": {
            "name": {"type": "string", "pattern": PLUGIN_NAME_PATTERN},
            "version": {"type": "string", "pattern": PLUGIN_VERSION_PATTERN},
            "digest": {"type": "string", "pattern": PLUGIN_DIGEST_PATTERN},
            "settings": {}},
        "anyOf": [{"required": ["digest"]}, {"required": ["name", "version"]}]});
    for (path, method) in [("/v1/policy", "put"), ("/v1/policy/shadow", "put")] {
        if let Some(body) =
            paths[path][method].pointer_mut("/requestBody/content/application~1json/schema")
        {
            body["additionalProperties"] = json!(false);
            body["properties"]["plugins"]["items"] = link.clone();
            body["properties"]["comment"]["maxLength"] = json!(super::policy::MAX_COMMENT_CHARS);
            if path == "/v1/policy" {
                body["properties"]["expectedVersion"]["minimum"] = json!(0);
                body["properties"]["expectedVersion"]["maximum"] = json!(u64::MAX);
                body["properties"]["replay"]["type"] = json!(["integer", "null"]);
                body["properties"]["replay"]["minimum"] = json!(0);
                body["properties"]["replay"]["maximum"] = json!(u32::MAX);
            }
        }
    }
    paths["/v1/policy/rollback"]["post"]["requestBody"] = json!({
        "required": false,
        "content": {"application/json": {"schema": {"type": "object", "additionalProperties": false,
            "properties": {
                "expectedVersion": {"type": "integer", "minimum": 0, "maximum": u64::MAX, "description": "optimistic concurrency, as for PUT"},
                "toVersion": {"type": "integer", "minimum": 0, "maximum": u64::MAX, "description": "the version whose chain to restore (default: the previous one)"},
                "comment": {"type": "string"}}}}}});
    let forbidden = "forbidden: ?team= names a team the caller is not a member of (or the global chain, for a member's change)";
    for (path, method, status, description) in [
        ("/v1/plugins", "get", "403", forbidden),
        ("/v1/policy", "get", "403", forbidden),
        ("/v1/policy/history", "get", "403", forbidden),
        ("/v1/policy/rollback", "post", "403", forbidden),
        (
            "/v1/policy/rollback",
            "post",
            "404",
            "not-found: no such version to roll back to",
        ),
        (
            "/v1/policy/rollback",
            "post",
            "422",
            "a stored plugin of that version can no longer be loaded",
        ),
        (
            "/v1/policy/rollback",
            "post",
            "503",
            "storage-unavailable: nothing was changed",
        ),
        (
            "/v1/policy/shadow",
            "put",
            "422",
            "policy.unknown-plugin | plugin.invalid-settings",
        ),
        ("/v1/policy/shadow", "delete", "403", "admin only"),
    ] {
        if let Some(responses) = paths[path][method]["responses"].as_object_mut() {
            responses.entry(status).or_insert_with(|| {
                json!({"description": description,
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
            });
        }
    }
    if let Some(params) = paths["/v1/policy/history"]["get"]["parameters"].as_array_mut() {
        params.push(json!({"name": "limit", "in": "query",
            "schema": {"type": "integer", "minimum": 1, "maximum": super::policy::MAX_HISTORY},
            "description": "newest versions first (default 100)"}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::registry::{valid_name, valid_version};

    fn matches(pattern: &str, s: &str) -> bool {
        jsonschema::validator_for(&json!({"type": "string", "pattern": pattern}))
            .expect("pattern")
            .is_valid(&json!(s))
    }

    #[test]
    fn patterns_agree_with_the_registry() {
        let long = "a".repeat(63);
        for s in [
            "a",
            "team-quota",
            "9",
            "-a",
            "a-",
            "A",
            "a_b",
            "",
            long.as_str(),
            "a".repeat(64).as_str(),
        ] {
            assert_eq!(matches(PLUGIN_NAME_PATTERN, s), valid_name(s), "name {s:?}");
        }
        for s in [
            "1.0.0",
            "v1+build.2",
            "1_0",
            "",
            "1 0",
            "1/0",
            "1".repeat(64).as_str(),
            "1".repeat(65).as_str(),
        ] {
            assert_eq!(
                matches(PLUGIN_VERSION_PATTERN, s),
                valid_version(s),
                "version {s:?}"
            );
        }
    }
}
