//! `scratch-guard`: keep throw-away jobs off reserved GPUs and out of the way.
//!
//! A *scratch* job is one whose name starts with `prefix` (`tmp-`). Scratch jobs may not
//! run on `reserved` series (rejected at the pool that asks for one), may use at most
//! `max_gpus` GPUs (rejected), and only run on idle GPUs: while a series has fewer free
//! GPUs than the job needs there, the job is queued. Admitted scratch jobs have their
//! pods labelled `<label>=true` (setting `label`, default `forge.io/scratch`; as a team
//! plugin, a key under `<team>.teams.forge.dev/`, the only labels a team link may add).
//! Other jobs pass unchanged.
//!
//! The same rule is written in Python (`plugins/scratch-guard-py`) and TypeScript
//! (`plugins/scratch-guard-ts`); all three answer the table in
//! `tests/fixtures/plugins/scratch-guard-cases.json` identically, natively and as
//! components in the real host.
//!
//! Settings:
//! ```json
//! { "prefix": "tmp-", "reserved": ["h100"], "max_gpus": 16 }
//! ```

use forge_plugin_sdk::prelude::*;

/// Settings of `scratch-guard`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Jobs whose name starts with this are scratch jobs.
    pub prefix: String,
    /// Series scratch jobs may not use.
    pub reserved: Vec<String>,
    /// Most GPUs one scratch job may use.
    pub max_gpus: u32,
    /// The label key admitted scratch jobs' pods get (`=true`).
    pub label: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            prefix: "tmp-".into(),
            reserved: Vec::new(),
            max_gpus: 16,
            label: "forge.io/scratch".into(),
        }
    }
}

/// The policy.
pub struct ScratchGuard;

impl Policy for ScratchGuard {
    type Settings = Settings;

    fn validate(s: &Settings) -> Result<(), String> {
        if s.prefix.is_empty() {
            return Err("prefix must not be empty".into());
        }
        if let Some(i) = s.reserved.iter().position(|r| r.trim().is_empty()) {
            return Err(format!("reserved[{i}] must not be empty"));
        }
        if s.max_gpus < 1 {
            return Err("max_gpus must be at least 1".into());
        }
        Ok(())
    }

    fn evaluate(s: &Settings, req: &Request<'_>) -> Decision {
        let job = req.job();
        if !job.name.starts_with(&s.prefix) {
            return Decision::admit();
        }
        for (i, pool) in job.pools.iter().enumerate() {
            let series = req
                .placement()
                .pools
                .get(i)
                .and_then(|p| p.series.as_ref())
                .or(pool.series.as_ref());
            if let Some(series) = series.filter(|s2| s.reserved.contains(s2)) {
                return Decision::reject(
                    "scratch.reserved-series",
                    format!(
                        "scratch job `{}` (its name starts with `{}`) may not use the reserved \
                         series {series}; use another series or rename the job",
                        job.name, s.prefix
                    ),
                    Some(&format!("pools[{i}].series")),
                );
            }
        }
        let total: u64 = job
            .pools
            .iter()
            .map(|p| u64::from(p.nodes) * u64::from(p.gpus_per_node))
            .sum();
        if total > u64::from(s.max_gpus) {
            return Decision::reject(
                "scratch.too-large",
                format!(
                    "scratch jobs may use at most {} GPUs; this one asks for {total}",
                    s.max_gpus
                ),
                Some("pools"),
            );
        }
        for (series, needed) in req.gpus_by_series() {
            let Some(series) = series else { continue };
            let free = req.series(&series).map_or(0, |c| c.free);
            if u64::from(free) < needed {
                return Decision::queue(
                    "scratch.idle-only",
                    format!(
                        "scratch jobs only use idle GPUs: {series} has {free} free, this job needs {needed}"
                    ),
                );
            }
        }
        let mut placement = req.placement().clone();
        for pool in &mut placement.pools {
            pool.label(&s.label, "true");
        }
        Decision::place(placement)
    }
}

export_policy!(ScratchGuard);

#[cfg(test)]
mod tests {
    use forge_plugin_sdk::harness::{Harness, RequestBuilder, validate};

    use super::*;

    #[test]
    fn defaults_apply_and_other_prefixes_work() {
        assert!(validate::<ScratchGuard>("").is_ok());
        let h = Harness::<ScratchGuard>::new(r#"{"prefix": "dbg-", "max_gpus": 4}"#).unwrap();
        let ok = RequestBuilder::new()
            .name("tmp-x")
            .pool("train", 1, 8, Some("a100"))
            .build();
        assert!(matches!(h.evaluate(&ok), Decision::Admit(_)));
        let big = RequestBuilder::new()
            .name("dbg-x")
            .pool("train", 1, 8, Some("a100"))
            .series("a100", 8, 8, 1)
            .build();
        assert!(matches!(h.evaluate(&big), Decision::Reject(_)));
    }

    #[test]
    fn settings_errors_name_the_setting() {
        let err = validate::<ScratchGuard>(r#"{"max_gpus": "lots"}"#).unwrap_err();
        assert!(err.starts_with("invalid settings: max_gpus: "), "{err}");
        let err = validate::<ScratchGuard>(r#"{"max_gpu": 4}"#).unwrap_err();
        assert!(err.contains("max_gpu"), "{err}");
        assert_eq!(
            validate::<ScratchGuard>(r#"{"max_gpus": 0}"#).unwrap_err(),
            "max_gpus must be at least 1"
        );
    }
}
