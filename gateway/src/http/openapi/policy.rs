//! The policy-management operations (`POST /v1/plugins`, `PUT /v1/policy`, rollback,
//! history, shadow mode), with their exact request constraints stated from the same
//! constants and configuration the registry and the handlers check — plugin name and
//! version patterns, the plugin limits an operator allows, the chain's length, the
//! comment's, the history page size — so a request that follows the document is never
//! refused for its shape.

use serde_json::{Value, json};

use super::error_response;
use crate::config::Config;
use crate::domain::fair_weights::MAX_WEIGHT;
use crate::http::policy::{MAX_COMMENT_CHARS, MAX_HISTORY};

/// A plugin name (`policy::registry::valid_name`).
pub const PLUGIN_NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";
/// A plugin version (`policy::registry::valid_version`).
pub const PLUGIN_VERSION_PATTERN: &str = "^[A-Za-z0-9._+-]{1,64}$";
/// A plugin digest as links name it.
pub const PLUGIN_DIGEST_PATTERN: &str = "^sha256:[0-9a-f]{64}$";
/// The longest text part of a plugin upload.
const MAX_PART: usize = 64 << 10;

const FORBIDDEN: &str = "forbidden: ?team= names a team the caller is not a member of (or the global chain, for a member's change)";

fn team() -> Value {
    json!({"name": "team", "in": "query", "schema": {"type": "string", "pattern": "\\S"},
        "description": "address this team's chain (members: their own team) instead of the global one"})
}

/// A chain's links, as `PUT /v1/policy` and `PUT /v1/policy/shadow` take them.
fn links(cfg: &Config) -> Value {
    json!({"type": "array", "maxItems": cfg.gateway.policy_max_chain_links,
        "description": "the chain, in order (at most FORGE_POLICY_MAX_CHAIN_LINKS links)",
        "items": {"type": "object", "additionalProperties": false,
            "description": "a stored plugin, by `digest` or by `name` and `version`, with its settings (checked by its validate-settings)",
            "properties": {
                "name": {"type": "string", "pattern": PLUGIN_NAME_PATTERN},
                "version": {"type": "string", "pattern": PLUGIN_VERSION_PATTERN},
                "digest": {"type": "string", "pattern": PLUGIN_DIGEST_PATTERN},
                "settings": {}},
            "anyOf": [{"required": ["digest"]}, {"required": ["name", "version"]}]}})
}

pub(super) fn paths(cfg: &Config) -> Value {
    let mut paths = json!({
        "/v1/plugins": plugins(cfg),
        "/v1/policy": chain(cfg),
        "/v1/policy/rollback": {"post": {"summary": "Activate the previous (or a given) version's exact chain as a new version",
            "parameters": [team()],
            "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object", "additionalProperties": false,
                "properties": {
                    "expectedVersion": {"type": "integer", "minimum": 0, "maximum": u64::MAX, "description": "optimistic concurrency, as for PUT"},
                    "toVersion": {"type": "integer", "minimum": 0, "maximum": u64::MAX, "description": "the version whose chain to restore (default: the previous one)"},
                    "comment": {"type": "string"}}}}}},
            "responses": {"200": {"description": "the activation"},
                "403": error_response(FORBIDDEN),
                "404": error_response("not-found: no such version to roll back to"),
                "409": error_response("policy.no-previous-version | policy.version-conflict"),
                "422": error_response("a stored plugin of that version can no longer be loaded"),
                "503": error_response("storage-unavailable: nothing was changed")}}},
        "/v1/policy/history": {"get": {"summary": "Versions of a chain: who, when, from → to, comment",
            "parameters": [team(), {"name": "limit", "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_HISTORY},
                "description": "newest versions first (default 100)"}],
            "responses": {"200": {"description": "{scope, versions[]}"}, "403": error_response(FORBIDDEN)}}}
    });
    paths["/v1/policy/shadow"] = shadow(cfg);
    paths
}

/// `/v1/plugins`: upload (multipart) and list.
fn plugins(cfg: &Config) -> Value {
    let g = &cfg.gateway;
    let max_mib = g.policy_max_memory_mib.max(g.policy_memory_mib);
    let max_ms = g.policy_max_deadline_ms.max(g.policy_deadline_ms);
    json!({
        "post": {"summary": "Upload a policy plugin (checked before it is stored)",
            "requestBody": {"required": true, "content": {"multipart/form-data": {
                "schema": {"type": "object", "required": ["component", "name", "version"],
                    "additionalProperties": false, "description": "any other part is refused (400 unknown-part)",
                    "properties": {
                        "component": {"type": "string", "format": "binary"},
                        "name": {"type": "string", "pattern": PLUGIN_NAME_PATTERN, "maxLength": MAX_PART},
                        "version": {"type": "string", "pattern": PLUGIN_VERSION_PATTERN, "maxLength": MAX_PART},
                        "description": {"type": "string", "maxLength": MAX_PART},
                        "settings": {"type": "object", "description": "the plugin's settings (a JSON object, at most 64 KiB), checked with its validate-settings"},
                        "scope": {"type": "string", "enum": ["team", "global"]},
                        "memoryMib": {"type": "integer", "minimum": 1, "maximum": max_mib, "description": "memory cap of the plugin's instances (default FORGE_POLICY_MEMORY_MIB, at most FORGE_POLICY_MAX_MEMORY_MIB)"},
                        "deadlineMs": {"type": "integer", "minimum": 1, "maximum": max_ms, "description": "per-call deadline (default FORGE_POLICY_DEADLINE_MS, at most FORGE_POLICY_MAX_DEADLINE_MS)"}}},
                "encoding": {"settings": {"contentType": "application/json"}}}}},
            "responses": {"201": {"description": "registered"}, "200": {"description": "identical re-upload"},
                "403": error_response("global plugins are admin-only"),
                "409": error_response("plugin.version-exists"),
                "413": error_response("plugin.too-large"),
                "422": error_response("plugin.not-a-component | plugin.wrong-world | plugin.forbidden-import | plugin.too-complex | plugin.compile-failed | plugin.compile-timeout | plugin.invalid-settings | plugin.team-limit | plugin.limit-too-high"),
                "429": error_response("rate-limited: the team's failed uploads are over FORGE_PLUGIN_FAILED_UPLOADS_PER_HOUR (Retry-After)"),
                "503": error_response("plugin.compiler-busy (Retry-After) | storage-unavailable")}},
        "get": {"summary": "Plugins the caller may use (global and the team's; admins: all)",
            "parameters": [team()],
            "responses": {"200": {"description": "{plugins[]}"}, "403": error_response(FORBIDDEN)}}
    })
}

/// `/v1/policy`: the active chains, and replacing one.
fn chain(cfg: &Config) -> Value {
    json!({
        "get": {"summary": "The active global chain and the team's chain", "parameters": [team()],
            "responses": {"200": {"description": "{global, team}"}, "403": error_response(FORBIDDEN)}},
        "put": {"summary": "Replace a chain (optimistic concurrency on expectedVersion); built and warmed before an atomic swap",
            "parameters": [team()],
            "requestBody": {"required": true, "content": {"application/json": {"schema": {
                "type": "object", "required": ["expectedVersion", "plugins"], "additionalProperties": false, "properties": {
                    "expectedVersion": {"type": "integer", "minimum": 0, "maximum": u64::MAX},
                    "plugins": links(cfg),
                    "comment": {"type": "string", "maxLength": MAX_COMMENT_CHARS},
                    "fairShare": fair_share(),
                    "replay": {"type": ["integer", "null"], "minimum": 0, "maximum": u32::MAX, "description": "replay against the last N decisions"},
                    "dryRun": {"type": "boolean"}}}}}},
            "responses": {"200": {"description": "{activated?, replay?, dryRun}"},
                "403": error_response("the global chain is admin-only"),
                "409": error_response("policy.version-conflict"),
                "422": error_response("policy.unknown-plugin | plugin.invalid-settings | policy.fair-share-global-only")}}
    })
}

/// The global policy's fair-share settings (`domain::fair_weights`).
fn fair_share() -> Value {
    json!({"type": ["object", "null"], "additionalProperties": false,
        "description": "fair-share weights, global chain only (422 policy.fair-share-global-only with ?team=); omitted or null: the current version's",
        "properties": {"weights": weights()}})
}

/// Fair-share weights: team → weight.
pub(super) fn weights() -> Value {
    json!({"type": "object",
        "description": "team → weight (teams not listed weigh 1)",
        "propertyNames": {"pattern": "\\S"},
        "additionalProperties": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WEIGHT}})
}

/// `/v1/policy/shadow`: a candidate global chain run beside the real one.
fn shadow(cfg: &Config) -> Value {
    json!({
        "get": {"summary": "The shadow candidate, its agreement rate and the differing cases",
            "responses": {"200": {"description": "report"}}},
        "put": {"summary": "Shadow a candidate global chain on real submissions (never enforced; admin)",
            "requestBody": {"required": true, "content": {"application/json": {"schema": {
                "type": "object", "required": ["plugins"], "additionalProperties": false, "properties": {
                    "plugins": links(cfg),
                    "comment": {"type": "string", "maxLength": MAX_COMMENT_CHARS}}}}}},
            "responses": {"200": {"description": "report"}, "403": error_response("admin only"),
                "422": error_response("policy.unknown-plugin | plugin.invalid-settings")}},
        "delete": {"summary": "Stop shadowing (final report)",
            "responses": {"200": {"description": "report"}, "403": error_response("admin only"),
                "404": error_response("no candidate")}}
    })
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
