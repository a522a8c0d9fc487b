//! String maps as every contract version carries them: `list<tuple<string, string>>`
//! in a stable (sorted) order, shared by the per-version binding modules.

use std::collections::BTreeMap;

/// A host map → the WIT list, in key order.
pub fn map_to_wit(map: &BTreeMap<String, String>) -> Vec<(String, String)> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A WIT list → a host map (a repeated key keeps its last value).
pub fn map_from_wit(list: Vec<(String, String)>) -> BTreeMap<String, String> {
    list.into_iter().collect()
}
