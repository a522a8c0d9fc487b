//! [`Var`]: the descriptor of one `FORGE_*` variable — its name (or name pattern),
//! its default as the documentation shows it, its meaning, whether it is a secret,
//! the all-or-nothing group it belongs to, and how its value is parsed into the
//! [`Draft`]. The table of them is `vars.rs`; parsing, the known-key check of the
//! config file and the README table are all derived from it.

use super::draft::Draft;

/// Parses one trimmed value and stores it in the draft. The second argument is the
/// variable's full name (for pattern entries: `FORGE_IMAGE_NEMO_RL`).
pub type Apply = fn(&mut Draft, &str, &str) -> Result<(), String>;

/// How a variable is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// One variable.
    Exact(&'static str),
    /// Every variable starting with `prefix`; `shown` is how the docs write it
    /// (`FORGE_IMAGE_<FRAMEWORK>`). A blank value is passed on (not "unset").
    Prefix {
        /// The common prefix, e.g. `FORGE_IMAGE_`.
        prefix: &'static str,
        /// The documented form.
        shown: &'static str,
    },
}

impl Name {
    /// How the docs write the name.
    pub fn shown(&self) -> &'static str {
        match self {
            Self::Exact(name) => name,
            Self::Prefix { shown, .. } => shown,
        }
    }

    /// Whether a concrete variable name is this entry.
    pub fn matches(&self, var: &str) -> bool {
        match self {
            Self::Exact(name) => *name == var,
            Self::Prefix { prefix, .. } => var.starts_with(prefix),
        }
    }
}

/// What applies when a variable is not set (or blank).
#[derive(Debug, Clone, Copy)]
pub enum Fallback {
    /// Nothing: the field stays empty (`None`). The text is the default column of
    /// the docs: `—`, or `—` with a note, or how the code derives a value.
    Unset(&'static str),
    /// This value, parsed exactly like a set one; the docs show it in backticks.
    Value(&'static str),
    /// A value computed at start-up; the docs show `shown`.
    Computed {
        /// The default column of the docs, e.g. `number of CPUs`.
        shown: &'static str,
        /// The value, parsed like a set one.
        value: fn() -> String,
    },
}

impl Fallback {
    /// The default column of the docs.
    pub fn shown(&self) -> String {
        match self {
            Self::Unset(shown) | Self::Computed { shown, .. } => (*shown).to_string(),
            Self::Value(v) => format!("`{v}`"),
        }
    }
}

/// One `FORGE_*` variable (or pattern of variables).
#[derive(Debug, Clone, Copy)]
pub struct Var {
    /// The name or name pattern.
    pub name: Name,
    /// The default.
    pub fallback: Fallback,
    /// What it means, for the docs (Markdown, one line, no `|`).
    pub meaning: &'static str,
    /// Held in a `Secret`; never shown in errors (the docs say so).
    pub secret: bool,
    /// All-or-nothing group (`FORGE_S3_*`): setting some but not all members is
    /// one `Partial` error and none of them is read.
    pub group: Option<&'static str>,
    /// The parser.
    pub apply: Apply,
}

impl Var {
    /// A plain variable.
    pub const fn new(
        name: &'static str,
        fallback: Fallback,
        apply: Apply,
        meaning: &'static str,
    ) -> Self {
        Self {
            name: Name::Exact(name),
            fallback,
            meaning,
            secret: false,
            group: None,
            apply,
        }
    }

    /// A pattern of variables sharing `prefix`, documented as `shown`; unset by default.
    pub const fn pattern(
        prefix: &'static str,
        shown: &'static str,
        apply: Apply,
        meaning: &'static str,
    ) -> Self {
        Self {
            name: Name::Prefix { prefix, shown },
            fallback: Fallback::Unset("—"),
            meaning,
            secret: false,
            group: None,
            apply,
        }
    }

    /// Marks the variable secret.
    pub const fn secret(mut self) -> Self {
        self.secret = true;
        self
    }

    /// Puts the variable in an all-or-nothing group.
    pub const fn group(mut self, group: &'static str) -> Self {
        self.group = Some(group);
        self
    }
}
