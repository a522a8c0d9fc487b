//! [`PerSeries`]: a setting with a value per GPU series and a fallback for the others,
//! written `8` (every series) or `h100=88,h200=112,*=16` — how the per-machine
//! resource defaults (`FORGE_K8S_CPUS_PER_NODE`, …) are given.

use std::collections::BTreeMap;

use crate::jobspec::names;

/// A value per series, with a fallback (`*`) for series not listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerSeries<T> {
    /// The value of series not listed (`*`, or a bare value).
    pub fallback: Option<T>,
    /// Series → value.
    pub series: BTreeMap<String, T>,
}

impl<T> Default for PerSeries<T> {
    fn default() -> Self {
        PerSeries {
            fallback: None,
            series: BTreeMap::new(),
        }
    }
}

impl<T> PerSeries<T> {
    /// The value for `series`: its own entry, else the fallback.
    pub fn get(&self, series: &str) -> Option<&T> {
        self.series.get(series).or(self.fallback.as_ref())
    }

    /// Parses `v` (`value` or `series=value,…,*=value`), each value with `one`.
    pub fn parse(v: &str, one: impl Fn(&str) -> Result<T, String>) -> Result<Self, String> {
        let mut out = PerSeries::default();
        for item in v.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(format!("`{v}` has an empty entry"));
            }
            let (key, value) = item.split_once('=').unwrap_or(("*", item));
            let (key, value) = (key.trim(), value.trim());
            let parsed = one(value).map_err(|e| format!("{key}: {e}"))?;
            if key == "*" {
                if out.fallback.replace(parsed).is_some() {
                    return Err("`*` is given twice".to_string());
                }
            } else if !names::is_label_value(key) || key.is_empty() {
                return Err(format!(
                    "`{key}` is not a series name (a label value) or `*`"
                ));
            } else if out.series.insert(key.to_string(), parsed).is_some() {
                return Err(format!("series `{key}` is given twice"));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(v: &str) -> Result<u32, String> {
        v.parse().map_err(|_| format!("`{v}` is not a number"))
    }

    #[test]
    fn bare_value_or_per_series_with_fallback() {
        let all = PerSeries::parse("8", num).expect("bare");
        assert_eq!(all.get("h100"), Some(&8));
        let p = PerSeries::parse("h100=88, h200=112,*=16", num).expect("list");
        assert_eq!(p.get("h100"), Some(&88));
        assert_eq!(p.get("a100"), Some(&16));
        let no_star = PerSeries::parse("h100=88", num).expect("no fallback");
        assert_eq!(no_star.get("h200"), None);
        for bad in ["", "h100=", "h100=x", "a b=1", "h100=1,h100=2", "1,*=2"] {
            assert!(PerSeries::parse(bad, num).is_err(), "{bad}");
        }
    }
}
