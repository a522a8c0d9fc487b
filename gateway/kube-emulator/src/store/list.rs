//! Lists: label and field selectors (equality label selectors go through the label
//! index), pagination with `limit` / `continue` and `remainingItemCount`. The continue
//! token encodes the list's resourceVersion and the last key; one older than the
//! retained window is 410 Expired. Later pages show the current state, not a snapshot.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use serde_json::{Value, json};

use super::state::{Inner, Key, Store};
use crate::error::ApiError;
use crate::resources::ResId;
use crate::selector::{FieldSelector, LabelSelector};

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    /// Items (matching selectors).
    pub items: Vec<Arc<Value>>,
    /// The list's resourceVersion.
    pub rv: u64,
    /// Continue token when more items remain.
    pub continue_token: Option<String>,
    /// Items remaining after this page.
    pub remaining: Option<u64>,
}

type Entries<'a> = Box<dyn Iterator<Item = (&'a Key, &'a Arc<Value>)> + 'a>;

impl Store {
    /// Lists objects (all namespaces when `ns` is `None`), optionally paginated.
    pub fn list(
        &self,
        rid: ResId,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let inner = self.lock();
        let (rv, after) = list_start(&inner, cont)?;
        let lower = match (&after, ns) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(n)) => Bound::Included((n.to_owned(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let range = candidates(&inner.objects[rid], &inner.label_index[rid], labels, lower);
        // Keys are sorted by (namespace, name): stop after the namespace's last key.
        let range: Entries<'_> = match ns {
            Some(n) => Box::new(
                range
                    .skip_while(move |(k, _)| k.0.as_str() < n)
                    .take_while(move |(k, _)| k.0 == n),
            ),
            None => range,
        };
        let mut items = Vec::new();
        let mut last_key = None;
        let mut remaining = 0u64;
        let mut more = false;
        for (k, obj) in range {
            if ns.is_some_and(|n| n != k.0) || !labels.matches(obj) || !fields.matches(obj) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                remaining += 1;
                continue;
            }
            items.push(obj.clone());
            last_key = Some(k.clone());
        }
        let continue_token = match (more, last_key) {
            (true, Some(k)) => Some(encode_continue(rv, &k)),
            _ => None,
        };
        Ok(ListPage {
            items,
            rv,
            continue_token,
            remaining: more.then_some(remaining),
        })
    }
}

/// The list's resourceVersion and the key a continued list starts after.
fn list_start(inner: &Inner, cont: Option<&str>) -> Result<(u64, Option<Key>), ApiError> {
    let Some(token) = cont else {
        return Ok((inner.rv, None));
    };
    let (rv, after) = decode_continue(token)?;
    if rv < inner.floor {
        return Err(ApiError::Expired(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
        ));
    }
    Ok((rv, Some(after)))
}

/// The objects from `lower` on that can match `labels`: through the smallest index set
/// among the selector's equalities, if it has any, else every object.
fn candidates<'a>(
    map: &'a BTreeMap<Key, Arc<Value>>,
    index: &'a HashMap<(String, String), BTreeSet<Key>>,
    labels: &LabelSelector,
    lower: Bound<Key>,
) -> Entries<'a> {
    let smallest = labels
        .equalities()
        .map(|(k, v)| index.get(&(k.to_owned(), v.to_owned())))
        .min_by_key(|set| set.map_or(0, BTreeSet::len));
    match smallest {
        // No object carries that label: nothing matches.
        Some(None) => Box::new(std::iter::empty()),
        Some(Some(set)) => Box::new(
            set.range::<Key, _>((lower, Bound::Unbounded))
                .filter_map(|k| map.get_key_value(k)),
        ),
        None => Box::new(map.range::<Key, _>((lower, Bound::Unbounded))),
    }
}

fn encode_continue(rv: u64, key: &Key) -> String {
    hex::encode(json!({"rv": rv, "ns": key.0, "name": key.1}).to_string())
}

fn decode_continue(token: &str) -> Result<(u64, Key), ApiError> {
    let bad = || ApiError::BadRequest("continue key is not valid".into());
    let raw = hex::decode(token).map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let ns = v.get("ns").and_then(Value::as_str).ok_or_else(bad)?;
    let name = v.get("name").and_then(Value::as_str).ok_or_else(bad)?;
    Ok((rv, (ns.to_owned(), name.to_owned())))
}
