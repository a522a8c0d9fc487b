//! How plugin instances are shared between calls ([`Isolation`],
//! `FORGE_POLICY_ISOLATION`) and the debug check that a reused instance decides like a
//! fresh one ([`Verify`], `FORGE_POLICY_VERIFY`).
//!
//! The rule for plugin authors: a decision must depend only on the settings and the
//! request, never on earlier calls (replay and shadow evaluation assume it). `warm`
//! reuses an instance for later calls of the same plugin, settings and scope, so a
//! plugin that breaks the rule decides differently there than in `fresh`; `Verify`
//! catches that by re-running sampled decisions on a fresh instance.

use std::fmt;
use std::str::FromStr;

/// Whether a plugin call gets a new instance or may reuse a warm one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Reuse warm instances per (plugin digest, settings, scope): a team's instances
    /// serve only that team, global ones only the global links. Discarded on any
    /// failure, after a number of calls, or when their memory grew.
    #[default]
    Warm,
    /// A new instance for every call (instantiation on every call).
    Fresh,
}

impl Isolation {
    /// The setting's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Warm => "warm",
            Isolation::Fresh => "fresh",
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An isolation mode that is neither `warm` nor `fresh`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown isolation mode `{0}`: expected `warm` or `fresh`")]
pub struct UnknownIsolation(pub String);

impl FromStr for Isolation {
    type Err = UnknownIsolation;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "warm" => Ok(Isolation::Warm),
            "fresh" => Ok(Isolation::Fresh),
            other => Err(UnknownIsolation(other.to_string())),
        }
    }
}

/// Debug comparison of warm decisions against fresh instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verify {
    /// Re-run one in `every` calls served by a reused instance on a fresh instance
    /// (0: never, 1: every such call).
    pub every: u32,
}

impl Verify {
    /// No comparison (the default).
    pub const OFF: Verify = Verify { every: 0 };

    /// Whether comparisons run at all.
    pub fn enabled(self) -> bool {
        self.every > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolation_modes_parse_and_print() {
        for mode in [Isolation::Warm, Isolation::Fresh] {
            assert_eq!(mode.as_str().parse::<Isolation>(), Ok(mode));
        }
        assert_eq!(
            "cold".parse::<Isolation>(),
            Err(UnknownIsolation("cold".into()))
        );
        assert!(!Verify::OFF.enabled());
        assert!(Verify { every: 3 }.enabled());
    }
}
