//! The team's GPU quota per series, for drawing only: as the reference `team-quota`
//! plugin in force states it in its settings (`limits.<team>.<series>`, `*` for the
//! series not listed, `default` for the teams not listed; no limit: none). The host
//! decides nothing by it — the chain does, and its settings are the plugin's own — so
//! a chain without that plugin, or settings this cannot read, draws no quota. The
//! team's own chain may hold a `team-quota` link too (it can only tighten): the
//! smallest limit of every such link is the one drawn.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::policy::{ActivePolicy, Scope};
use crate::store::LinkRef;

/// The plugin whose settings are read.
const PLUGIN: &str = "team-quota";

/// The part of `team-quota`'s settings that states limits.
#[derive(Debug, Default, Deserialize)]
struct Limits {
    #[serde(default)]
    limits: BTreeMap<String, BTreeMap<String, u32>>,
    #[serde(default)]
    default: BTreeMap<String, u32>,
}

impl Limits {
    fn of(&self, team: &str, series: &str) -> Option<u32> {
        let limits = self.limits.get(team).unwrap_or(&self.default);
        limits.get(series).or_else(|| limits.get("*")).copied()
    }
}

/// The team's quota on `series` under `policy` (`None`: no quota stated).
pub fn of(policy: &ActivePolicy, team: &str, series: &str) -> Option<u32> {
    let own = policy.scope(&Scope::Team(team.to_string()));
    let links = policy
        .global()
        .links
        .iter()
        .chain(own.into_iter().flat_map(|p| p.links.iter()));
    links.filter_map(|l| limit(l, team, series)).min()
}

/// One link's limit, if it is a `team-quota` link whose settings state one.
fn limit(link: &LinkRef, team: &str, series: &str) -> Option<u32> {
    if link.name != PLUGIN {
        return None;
    }
    serde_json::from_value::<Limits>(link.settings.clone())
        .ok()?
        .of(team, series)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, settings: serde_json::Value) -> LinkRef {
        LinkRef {
            owner: "platform".into(),
            name: name.into(),
            version: "1.0.0".into(),
            digest: String::new(),
            settings,
        }
    }

    #[test]
    fn a_teams_limit_then_any_series_then_the_default() {
        let l = link(
            PLUGIN,
            serde_json::json!({"limits": {"vision": {"h100": 16, "*": 8}}, "default": {"*": 4}, "max_priority": {"*": 100}}),
        );
        assert_eq!(limit(&l, "vision", "h100"), Some(16));
        assert_eq!(limit(&l, "vision", "h200"), Some(8));
        assert_eq!(limit(&l, "nlp", "h100"), Some(4));
        let none = link(
            PLUGIN,
            serde_json::json!({"limits": {"vision": {"h100": 16}}}),
        );
        assert_eq!(limit(&none, "vision", "h200"), None, "no limit stated");
        assert_eq!(limit(&none, "nlp", "h100"), None);
    }

    #[test]
    fn other_plugins_and_unreadable_settings_state_nothing() {
        let other = link("scratch-guard", serde_json::json!({"default": {"*": 4}}));
        assert_eq!(limit(&other, "vision", "h100"), None);
        let odd = link(PLUGIN, serde_json::json!({"default": {"*": "many"}}));
        assert_eq!(limit(&odd, "vision", "h100"), None);
    }
}
