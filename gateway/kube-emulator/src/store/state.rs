//! The store's state and its one write path: the objects per resource, the label
//! index, the uid table and the retained watch history, all behind one mutex, and
//! [`Store::commit`], which bumps the global resourceVersion, updates every table and
//! broadcasts the change to watchers while the lock is held.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

use super::event::{EventKind, WatchEvent};
use super::meta::{meta, meta_mut, meta_str};
use crate::error::ApiError;
use crate::logs::LogStore;
use crate::resources::{PODS, RESOURCES, ResId, res};

/// `(namespace, name)`; the namespace is `""` for cluster-scoped objects.
pub(super) type Key = (String, String);

/// Everything behind the store lock.
pub(super) struct Inner {
    /// The global resourceVersion (last committed change).
    pub(super) rv: u64,
    /// Per resource: key → object.
    pub(super) objects: Vec<BTreeMap<Key, Arc<Value>>>,
    /// Per resource: `(label key, label value)` → keys of the objects carrying it.
    /// Lets a list with an equality label selector (what controllers use to find
    /// their children) visit only the candidates instead of every object — the
    /// difference between O(children) and O(all pods) per reconcile at scale.
    pub(super) label_index: Vec<HashMap<(String, String), BTreeSet<Key>>>,
    /// uid → where the object is.
    pub(super) uids: HashMap<String, (ResId, Key)>,
    /// The retained watch events, oldest first.
    pub(super) history: VecDeque<Arc<WatchEvent>>,
    /// Watches from a resourceVersion below this are expired (410).
    pub(super) floor: u64,
    /// Every create that committed, in order: the audit trail a real API server
    /// writes to its audit log (tests count objects here, where no watch gap can hide
    /// one).
    pub(super) created: Vec<Created>,
}

/// One committed create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The resource's plural (`rayjobs`, `pods`, …).
    pub resource: &'static str,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The object store.
pub struct Store {
    inner: Mutex<Inner>,
    pub(super) tx: broadcast::Sender<Arc<WatchEvent>>,
    pub(super) gc: Notify,
    logs: Arc<LogStore>,
    window: usize,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// Adds (`add`) or removes the `(label, value)` → `key` entries of `obj`'s labels.
fn index_labels(
    index: &mut HashMap<(String, String), BTreeSet<Key>>,
    key: &Key,
    obj: &Value,
    add: bool,
) {
    let Some(labels) = meta(obj).get("labels").and_then(Value::as_object) else {
        return;
    };
    for (k, v) in labels {
        let Some(v) = v.as_str() else { continue };
        let entry = (k.clone(), v.to_owned());
        if add {
            index.entry(entry).or_default().insert(key.clone());
        } else if let Some(set) = index.get_mut(&entry) {
            set.remove(key);
            if set.is_empty() {
                index.remove(&entry);
            }
        }
    }
}

impl Store {
    /// Creates an empty store keeping `window` watch events.
    pub fn new(window: usize, logs: Arc<LogStore>) -> Self {
        let (tx, _) = broadcast::channel(16_384);
        Self {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: RESOURCES.iter().map(|_| BTreeMap::new()).collect(),
                label_index: RESOURCES.iter().map(|_| HashMap::new()).collect(),
                uids: HashMap::new(),
                history: VecDeque::new(),
                floor: 1,
                created: Vec::new(),
            }),
            tx,
            gc: Notify::new(),
            logs,
            window: window.max(1),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("store lock poisoned")
    }

    /// Current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Every committed create of `resource` (a plural), oldest first.
    pub fn created(&self, resource: &str) -> Vec<Created> {
        self.lock()
            .created
            .iter()
            .filter(|c| c.resource == resource)
            .cloned()
            .collect()
    }

    /// Forgets all history: watches and continue tokens from any resourceVersion
    /// issued so far get 410 Gone. The global revision advances by one (as if a write
    /// happened) so a fresh list returns a resourceVersion that can be watched.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.rv += 1;
        inner.floor = inner.rv;
        inner.history.clear();
    }

    /// Waits until the garbage collector has work (see [`Store::gc_pass`]).
    pub async fn gc_wanted(&self) {
        self.gc.notified().await;
    }

    /// Records one change: bumps the resourceVersion, stores (or removes) `obj`,
    /// maintains the label index and uid table, appends to the history window and
    /// broadcasts the event. Returns the object as stored.
    pub(super) fn commit(
        &self,
        inner: &mut Inner,
        rid: ResId,
        kind: EventKind,
        mut obj: Value,
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        inner.rv += 1;
        let rv = inner.rv;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let key = (
            meta_str(&obj, "namespace").unwrap_or("").to_owned(),
            meta_str(&obj, "name").unwrap_or("").to_owned(),
        );
        let uid = meta_str(&obj, "uid").unwrap_or("").to_owned();
        let obj = Arc::new(obj);
        if let Some(prev) = inner.objects[rid].get(&key).cloned() {
            index_labels(&mut inner.label_index[rid], &key, &prev, false);
        }
        if kind != EventKind::Deleted {
            index_labels(&mut inner.label_index[rid], &key, &obj, true);
        }
        match kind {
            EventKind::Deleted => {
                inner.objects[rid].remove(&key);
                inner.uids.remove(&uid);
                if rid == PODS {
                    self.logs.remove_pod(&key.0, &key.1);
                }
                self.gc.notify_one();
            }
            _ => {
                inner.objects[rid].insert(key.clone(), obj.clone());
                inner.uids.insert(uid, (rid, key));
            }
        }
        let ev = Arc::new(WatchEvent {
            rv,
            res: rid,
            kind,
            object: obj.clone(),
            old,
        });
        inner.history.push_back(ev.clone());
        while inner.history.len() > self.window {
            if let Some(front) = inner.history.pop_front() {
                inner.floor = front.rv;
            }
        }
        // No receivers is fine.
        let _ = self.tx.send(ev);
        obj
    }

    /// Gets one object.
    pub fn get(&self, rid: ResId, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        self.lock().stored(rid, ns, name)
    }
}

impl Inner {
    /// The stored object `ns/name` of `rid`, or NotFound.
    pub(super) fn stored(&self, rid: ResId, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        self.objects[rid]
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| res(rid).not_found(name))
    }
}
