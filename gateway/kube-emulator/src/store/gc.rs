//! The garbage collector: deletes dependents whose owners (by uid) are all gone,
//! cascades foreground deletion (the owner keeps its `foregroundDeletion` finalizer
//! until its blocking dependents are gone), orphans dependents (`orphan` finalizer:
//! owner references removed first), and finalizes a terminating namespace once its
//! content is gone. Runs when a write notifies it, under the store lock.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::delete::DeleteOpts;
use super::event::EventKind;
use super::meta::{finalizers, is_deleting, meta_str, owner_uids};
use super::state::{Inner, Key, Store};
use crate::resources::{NAMESPACES, RESOURCES, ResId, res};

/// A dependent of some owner: where it is and whether it blocks owner deletion.
type Dependent = (ResId, Key, bool);
/// Owner uid → its dependents.
type Dependents = HashMap<String, Vec<Dependent>>;

impl Store {
    /// One garbage-collector pass: deletes dependents whose owners are all gone,
    /// cascades foreground deletion, orphans dependents, finalizes namespaces and
    /// removes `foregroundDeletion` / `orphan` finalizers when their work is done.
    /// Returns the number of changes made.
    pub fn gc_pass(&self) -> usize {
        let mut inner = self.lock();
        let mut total = 0;
        for _ in 0..32 {
            let n = self.gc_step(&mut inner);
            total += n;
            if n == 0 {
                break;
            }
        }
        total
    }

    fn gc_step(&self, inner: &mut Inner) -> usize {
        let (deps, orphans) = inner.dependents();
        let mut changes = 0;
        for (rid, key) in orphans {
            if self
                .delete_locked(
                    inner,
                    rid,
                    &key.0,
                    &key.1,
                    &DeleteOpts::default_background(),
                )
                .is_ok()
            {
                changes += 1;
            }
        }
        // Owners being deleted with foreground / orphan finalizers, and namespaces.
        for (rid, key, owner) in inner.deleting() {
            let uid = meta_str(&owner, "uid").unwrap_or("");
            let fins = finalizers(&owner);
            let my_deps = deps.get(uid).map_or(&[][..], Vec::as_slice);
            changes += if fins.iter().any(|f| f == "orphan") {
                self.orphan_dependents(inner, rid, &key, uid, my_deps)
            } else if fins.iter().any(|f| f == "foregroundDeletion") {
                self.delete_foreground(inner, rid, &key, my_deps)
            } else if rid == NAMESPACES && fins.iter().any(|f| f == "kubernetes") {
                self.empty_namespace(inner, &key)
            } else {
                0
            };
        }
        changes
    }

    /// Removes the owner reference to `uid` from its dependents, then the owner's
    /// `orphan` finalizer.
    fn orphan_dependents(
        &self,
        inner: &mut Inner,
        rid: ResId,
        key: &Key,
        uid: &str,
        deps: &[Dependent],
    ) -> usize {
        let mut changes = 0;
        for (drid, dkey, _) in deps {
            if let Some(d) = inner.objects[*drid].get(dkey).cloned() {
                let mut d2 = (*d).clone();
                if let Some(refs) = d2
                    .pointer_mut("/metadata/ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
                    if refs.is_empty()
                        && let Some(m) = d2.get_mut("metadata").and_then(Value::as_object_mut)
                    {
                        m.remove("ownerReferences");
                    }
                }
                self.commit(inner, *drid, EventKind::Modified, d2, Some(d));
                changes += 1;
            }
        }
        self.remove_finalizer(inner, rid, key, "orphan");
        changes + 1
    }

    /// Deletes the dependents (in foreground too); drops the owner's
    /// `foregroundDeletion` finalizer once no blocking dependent is left.
    fn delete_foreground(
        &self,
        inner: &mut Inner,
        rid: ResId,
        key: &Key,
        deps: &[Dependent],
    ) -> usize {
        let mut changes = 0;
        for (drid, dkey, _) in deps {
            let deleting_dep = inner.objects[*drid]
                .get(dkey)
                .is_some_and(|d| is_deleting(d));
            if !deleting_dep {
                let opts = DeleteOpts {
                    propagation: Some("Foreground".into()),
                    ..DeleteOpts::default()
                };
                if self
                    .delete_locked(inner, *drid, &dkey.0, &dkey.1, &opts)
                    .is_ok()
                {
                    changes += 1;
                }
            }
        }
        let blocking_left = deps
            .iter()
            .any(|(drid, dkey, block)| *block && inner.objects[*drid].contains_key(dkey));
        if !blocking_left {
            self.remove_finalizer(inner, rid, key, "foregroundDeletion");
            changes += 1;
        }
        changes
    }

    /// Deletes the content of a terminating namespace; once it is empty, clears the
    /// namespace's `kubernetes` finalizer (which removes it).
    fn empty_namespace(&self, inner: &mut Inner, key: &Key) -> usize {
        let ns = key.1.clone();
        let mut changes = 0;
        let mut left = 0;
        for crid in 0..RESOURCES.len() {
            if !res(crid).namespaced {
                continue;
            }
            let keys: Vec<Key> = inner.objects[crid]
                .keys()
                .filter(|k| k.0 == ns)
                .cloned()
                .collect();
            for k in keys {
                left += 1;
                let deleting_child = inner.objects[crid].get(&k).is_some_and(|o| is_deleting(o));
                if !deleting_child
                    && self
                        .delete_locked(inner, crid, &k.0, &k.1, &DeleteOpts::default_background())
                        .is_ok()
                {
                    changes += 1;
                }
            }
        }
        if left == 0 {
            if let Some(o) = inner.objects[NAMESPACES].get(key).cloned() {
                let mut o2 = (*o).clone();
                o2["spec"]["finalizers"] = json!([]);
                let kind = if finalizers(&o2).is_empty() {
                    EventKind::Deleted
                } else {
                    EventKind::Modified
                };
                self.commit(inner, NAMESPACES, kind, o2, Some(o));
            }
            changes += 1;
        }
        changes
    }

    fn remove_finalizer(&self, inner: &mut Inner, rid: ResId, key: &Key, fin: &str) {
        let Some(o) = inner.objects[rid].get(key).cloned() else {
            return;
        };
        let mut o2 = (*o).clone();
        if let Some(list) = o2
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f.as_str() != Some(fin));
        }
        let kind = if is_deleting(&o2) && finalizers(&o2).is_empty() {
            EventKind::Deleted
        } else {
            EventKind::Modified
        };
        self.commit(inner, rid, kind, o2, Some(o));
    }
}

impl Inner {
    /// Owner uid → its dependents, and the dependents whose owners are all gone (and
    /// that are not being deleted yet).
    fn dependents(&self) -> (Dependents, Vec<(ResId, Key)>) {
        let mut deps = Dependents::new();
        let mut orphans = Vec::new();
        for (rid, map) in self.objects.iter().enumerate() {
            for (key, obj) in map {
                let owners = owner_uids(obj);
                if owners.is_empty() {
                    continue;
                }
                if owners.iter().all(|(uid, _)| !self.uids.contains_key(uid)) {
                    if !is_deleting(obj) {
                        orphans.push((rid, key.clone()));
                    }
                    continue;
                }
                for (uid, block) in owners {
                    deps.entry(uid).or_default().push((rid, key.clone(), block));
                }
            }
        }
        (deps, orphans)
    }

    /// Every object with a `deletionTimestamp`.
    fn deleting(&self) -> Vec<(ResId, Key, Arc<Value>)> {
        self.objects
            .iter()
            .enumerate()
            .flat_map(|(rid, map)| {
                map.iter()
                    .filter(|(_, o)| is_deleting(o))
                    .map(move |(k, o)| (rid, k.clone(), o.clone()))
            })
            .collect()
    }
}
