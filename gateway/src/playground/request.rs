//! `POST /v1/playgrounds`: the request body and its validation — every problem names
//! its field, and nothing is admitted or created for a request that fails here.
//!
//! Limits (decided here; the issue leaves them open): 1–8 GPUs (one server on one
//! node: vLLM's tensor parallelism stays within a node), a TTL of 60 s to
//! [`MAX_LIFETIME_SECS`] (24 h; `extend` cannot go past it either, and the pod's
//! `activeDeadlineSeconds` backstop is that lifetime plus a grace period) — the
//! shortest TTL is `FORGE_PLAYGROUND_MIN_TTL_S` (default 60 s) —, an idle TTL of at
//! least that and at most the TTL, a model id or a path on the team's storage
//! ([`super::model_source`]), at most 32 extra arguments, none of the arguments the
//! gateway sets itself (port, host, key, served name, tensor parallelism).

use serde::Deserialize;

use super::error::PlaygroundError;
use super::model_source::ModelSource;
use crate::config::Config;
use crate::jobspec::names;

/// The longest a playground may live, extensions included.
pub const MAX_LIFETIME_SECS: u64 = 24 * 3600;
/// GPUs of one playground, at most.
pub const MAX_GPUS: u32 = 8;
/// Extra arguments, at most.
pub const MAX_ARGS: usize = 32;
/// Arguments the gateway sets (the server's port, key and identity are its own).
pub const RESERVED_ARGS: [&str; 6] = [
    "--port",
    "--host",
    "--api-key",
    "--served-model-name",
    "--tensor-parallel-size",
    "--model",
];

/// The request body.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreatePlayground {
    /// A model id (`org/name`) or a path on the team's storage.
    pub model: String,
    /// The GPU series (else the policy picks).
    #[serde(default)]
    pub series: Option<String>,
    /// GPUs (the tensor-parallel size).
    pub gpus: u32,
    /// The hard TTL.
    pub ttl_seconds: u64,
    /// The idle TTL (none: only the hard TTL; one longer than the hard TTL never
    /// fires first, so it is the hard TTL: [`CreatePlayground::idle_ttl`]).
    #[serde(default)]
    pub idle_seconds: Option<u64>,
    /// Extra server arguments.
    #[serde(default)]
    pub args: Vec<String>,
}

impl CreatePlayground {
    /// The idle TTL that applies: at most the hard TTL.
    pub fn idle_ttl(&self) -> Option<u64> {
        self.idle_seconds.map(|idle| idle.min(self.ttl_seconds))
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> PlaygroundError {
    PlaygroundError::Invalid {
        field,
        reason: reason.into(),
    }
}

impl CreatePlayground {
    /// Checks every field against the configuration; the first problem is the error.
    /// Returns where the model is.
    pub fn validate(&self, cfg: &Config) -> Result<ModelSource, PlaygroundError> {
        let min_ttl = cfg.gateway.playground_min_ttl_s;
        let m = &self.model;
        if m.is_empty() || m.len() > 512 || m.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(
                "model",
                "a model id or storage path of 1-512 characters without whitespace",
            ));
        }
        if m.split('/').any(|seg| seg == ".." || seg == ".") {
            return Err(invalid(
                "model",
                "`..` and `.` are not allowed in a model path",
            ));
        }
        let source = ModelSource::of(m, cfg).map_err(|reason| invalid("model", reason))?;
        if let Some(s) = &self.series
            && !names::is_label_value(s)
        {
            return Err(invalid("series", format!("`{s}` is not a GPU series name")));
        }
        if self.gpus == 0 || self.gpus > MAX_GPUS {
            return Err(invalid("gpus", format!("must be 1 to {MAX_GPUS}")));
        }
        if !(min_ttl..=MAX_LIFETIME_SECS).contains(&self.ttl_seconds) {
            return Err(invalid(
                "ttlSeconds",
                format!("must be {min_ttl} to {MAX_LIFETIME_SECS}"),
            ));
        }
        if let Some(idle) = self.idle_seconds
            && !(min_ttl..=MAX_LIFETIME_SECS).contains(&idle)
        {
            return Err(invalid(
                "idleSeconds",
                format!("must be {min_ttl} to {MAX_LIFETIME_SECS}"),
            ));
        }
        if self.args.len() > MAX_ARGS {
            return Err(invalid("args", format!("at most {MAX_ARGS} arguments")));
        }
        for a in &self.args {
            if a.len() > 256 || a.chars().any(char::is_control) {
                return Err(invalid(
                    "args",
                    "arguments are at most 256 printable characters",
                ));
            }
            let flag = a.split_once('=').map_or(a.as_str(), |(f, _)| f);
            if RESERVED_ARGS.contains(&flag) {
                return Err(invalid("args", format!("`{flag}` is set by the gateway")));
            }
        }
        Ok(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: serde_json::Value) -> CreatePlayground {
        serde_json::from_value(v).expect("shape")
    }

    fn cfg() -> Config {
        let env = [
            ("FORGE_IMAGE_NEMO_RL", "rayproject/ray:2.41.0"),
            ("FORGE_KUBERAY_RAY_VERSION", "2.41.0"),
            ("FORGE_K8S_STORAGE_PVC", "forge-storage"),
            ("FORGE_K8S_STORAGE_MOUNT", "/starforge"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Config::from_env_map(env).expect("config")
    }

    fn field(r: &CreatePlayground) -> &'static str {
        match r.validate(&cfg()) {
            Err(PlaygroundError::Invalid { field, .. }) => field,
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_good_request_passes_and_every_bad_field_is_named() {
        let ok = serde_json::json!({"model": "meta/llama-3-8b", "gpus": 2, "ttlSeconds": 3600,
            "idleSeconds": 600, "series": "h100", "args": ["--max-model-len", "4096"]});
        assert!(matches!(
            req(ok.clone()).validate(&cfg()),
            Ok(ModelSource::Id)
        ));
        let with = |k: &str, v: serde_json::Value| {
            let mut b = ok.clone();
            b[k] = v;
            req(b)
        };
        assert_eq!(field(&with("model", "a b".into())), "model");
        assert_eq!(field(&with("model", "../x".into())), "model");
        assert_eq!(field(&with("model", "/starforge/./x".into())), "model");
        assert_eq!(field(&with("model", "/etc/models/x".into())), "model");
        assert!(matches!(
            with("model", "/starforge/ckpt/run-7".into()).validate(&cfg()),
            Ok(ModelSource::TeamStorage)
        ));
        assert_eq!(field(&with("series", "H 100".into())), "series");
        assert_eq!(field(&with("gpus", 0.into())), "gpus");
        assert_eq!(field(&with("gpus", 9.into())), "gpus");
        assert_eq!(field(&with("ttlSeconds", 59.into())), "ttlSeconds");
        assert_eq!(field(&with("ttlSeconds", 86_401.into())), "ttlSeconds");
        assert_eq!(field(&with("idleSeconds", 86_401.into())), "idleSeconds");
        // An idle TTL longer than the hard TTL never fires first: it is the hard TTL.
        let longer = with("idleSeconds", 7_200.into());
        assert!(longer.validate(&cfg()).is_ok());
        assert_eq!(longer.idle_ttl(), Some(3_600));
        assert_eq!(with("idleSeconds", 600.into()).idle_ttl(), Some(600));
        assert_eq!(
            field(&with("args", serde_json::json!(["--port=9"]))),
            "args"
        );
        assert_eq!(
            field(&with("args", serde_json::json!(["--api-key", "x"]))),
            "args"
        );
        let unknown = serde_json::json!({"model": "m", "gpus": 1, "ttlSeconds": 60, "image": "x"});
        assert!(serde_json::from_value::<CreatePlayground>(unknown).is_err());
    }

    #[test]
    fn the_shortest_ttl_is_the_operators() {
        let mut env: std::collections::HashMap<String, String> = [
            ("FORGE_IMAGE_NEMO_RL", "rayproject/ray:2.41.0"),
            ("FORGE_KUBERAY_RAY_VERSION", "2.41.0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let short = serde_json::json!({"model": "m", "gpus": 1, "ttlSeconds": 5, "idleSeconds": 2});
        let default = Config::from_env_map(env.clone()).expect("config");
        assert!(matches!(
            req(short.clone()).validate(&default),
            Err(PlaygroundError::Invalid {
                field: "ttlSeconds",
                ..
            })
        ));
        env.insert("FORGE_PLAYGROUND_MIN_TTL_S".into(), "2".into());
        let lowered = Config::from_env_map(env).expect("config");
        assert!(req(short.clone()).validate(&lowered).is_ok());
        let mut shorter = short;
        shorter["idleSeconds"] = 1.into();
        assert!(matches!(
            req(shorter).validate(&lowered),
            Err(PlaygroundError::Invalid {
                field: "idleSeconds",
                ..
            })
        ));
    }
}
