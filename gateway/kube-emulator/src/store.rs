//! The in-memory object store behind the API server: one global resourceVersion
//! counter (like etcd's revision), optimistic concurrency, a bounded window of watch
//! events (older resourceVersions are "compacted" and answer 410 Gone), finalizers and
//! deletionTimestamp, and the ownerReference garbage collector (background,
//! foreground and orphan propagation, namespace content deletion).
//!
//! All mutations happen under one `std::sync::Mutex` (never held across `.await`);
//! every committed change is broadcast to watchers while the lock is held, so the
//! broadcast order is the resourceVersion order.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

use crate::error::{ApiError, Cause};
use crate::logs::LogStore;
use crate::resources::{NAMESPACES, PODS, RESOURCES, ResId, Resource, res};
use crate::schema;
use crate::selector::{FieldSelector, LabelSelector};

/// Type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventKind {
    /// Wire name (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub struct WatchEvent {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Resource type.
    pub res: ResId,
    /// Event type.
    pub kind: EventKind,
    /// The object after the change (the last state for deletions).
    pub object: Arc<Value>,
    /// The object before the change (for selector transitions).
    pub old: Option<Arc<Value>>,
}

/// Which part of an object a write targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sub {
    /// The main resource (status changes ignored when a status subresource exists).
    Main,
    /// The `/status` subresource (only status changes kept).
    Status,
}

/// Patch flavours, by request content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`: applied as a JSON merge patch.
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/apply-patch+yaml`: approximated as create-or-merge.
    Apply,
}

/// Deletion options from the request body / query.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    /// `Foreground`, `Background` or `Orphan`.
    pub propagation: Option<String>,
    /// Legacy `orphanDependents`.
    pub orphan_dependents: Option<bool>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

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

/// Where a watch starts.
#[derive(Debug)]
pub struct WatchStart {
    /// Events to send first (synthetic ADDED for a fresh watch, or replayed history).
    pub replay: Vec<Arc<WatchEvent>>,
    /// Live events; skip those with `rv <= start_rv`.
    pub rx: broadcast::Receiver<Arc<WatchEvent>>,
    /// Highest resourceVersion covered by `replay`.
    pub start_rv: u64,
}

type Key = (String, String);

struct Inner {
    rv: u64,
    objects: Vec<BTreeMap<Key, Arc<Value>>>,
    /// Per resource: `(label key, label value)` → keys of the objects carrying it.
    /// Lets a list with an equality label selector (what controllers use to find
    /// their children) visit only the candidates instead of every object — the
    /// difference between O(children) and O(all pods) per reconcile at scale.
    label_index: Vec<HashMap<(String, String), BTreeSet<Key>>>,
    uids: HashMap<String, (ResId, Key)>,
    history: VecDeque<Arc<WatchEvent>>,
    /// Watches from a resourceVersion below this are expired (410).
    floor: u64,
}

/// The object store.
pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<WatchEvent>>,
    gc: Notify,
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

/// RFC 3339 timestamp with second precision, as Kubernetes renders `metav1.Time`.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn meta(obj: &Value) -> &Value {
    obj.get("metadata").unwrap_or(&Value::Null)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

fn finalizers(obj: &Value) -> Vec<String> {
    let mut out: Vec<String> = meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    // Namespaces are finalized through spec.finalizers ("kubernetes").
    if obj.get("kind").and_then(Value::as_str) == Some("Namespace")
        && let Some(spec) = obj.pointer("/spec/finalizers").and_then(Value::as_array)
    {
        out.extend(spec.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    out
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

fn is_deleting(obj: &Value) -> bool {
    meta(obj)
        .get("deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn owner_uids(obj: &Value) -> Vec<(String, bool)> {
    meta(obj)
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| {
                    let uid = r.get("uid").and_then(Value::as_str)?;
                    let block = r
                        .get("blockOwnerDeletion")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    Some((uid.to_owned(), block))
                })
                .collect()
        })
        .unwrap_or_default()
}

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn random_suffix() -> String {
    let mut rng = rand::rng();
    (0..5)
        .map(|_| NAME_CHARS[rng.random_range(0..NAME_CHARS.len())] as char)
        .collect()
}

fn valid_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

fn not_found(r: &Resource, name: &str) -> ApiError {
    ApiError::NotFound {
        resource: r.plural.into(),
        group: r.group.into(),
        name: name.into(),
    }
}

fn conflict(r: &Resource, name: &str, detail: impl Into<String>) -> ApiError {
    ApiError::Conflict {
        resource: r.plural.into(),
        group: r.group.into(),
        name: name.into(),
        detail: detail.into(),
    }
}

fn invalid(r: &Resource, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::Invalid {
        kind: r.kind.into(),
        group: r.group.into(),
        name: name.into(),
        causes,
    }
}

/// Defaults the real API server's registry strategies apply on create.
fn prepare_for_create(r: &Resource, obj: &mut Value) {
    match r.kind {
        "Pod" => {
            let spec = &mut obj["spec"];
            if spec.is_null() {
                *spec = json!({});
            }
            for (k, v) in [
                ("restartPolicy", json!("Always")),
                ("dnsPolicy", json!("ClusterFirst")),
                ("schedulerName", json!("default-scheduler")),
                ("terminationGracePeriodSeconds", json!(30)),
                ("serviceAccountName", json!("default")),
                ("priority", json!(0)),
                ("enableServiceLinks", json!(true)),
            ] {
                if spec.get(k).is_none() {
                    spec[k] = v;
                }
            }
            for list in ["containers", "initContainers"] {
                if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
                    for c in cs {
                        if c.get("imagePullPolicy").is_none() {
                            let image = c.get("image").and_then(Value::as_str).unwrap_or("");
                            let last = image.rsplit('/').next().unwrap_or("");
                            let policy = if !last.contains(':') || image.ends_with(":latest") {
                                "Always"
                            } else {
                                "IfNotPresent"
                            };
                            c["imagePullPolicy"] = json!(policy);
                        }
                        if c.get("terminationMessagePath").is_none() {
                            c["terminationMessagePath"] = json!("/dev/termination-log");
                        }
                    }
                }
            }
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        "Job" => {
            let name = meta_str(obj, "name").unwrap_or("").to_owned();
            let uid = meta_str(obj, "uid").unwrap_or("").to_owned();
            let spec = &mut obj["spec"];
            if spec.is_null() {
                *spec = json!({});
            }
            for (k, v) in [
                ("parallelism", json!(1)),
                ("completions", json!(1)),
                ("backoffLimit", json!(6)),
                ("completionMode", json!("NonIndexed")),
                ("suspend", json!(false)),
            ] {
                if spec.get(k).is_none() {
                    spec[k] = v;
                }
            }
            if spec.get("manualSelector").and_then(Value::as_bool) != Some(true) {
                spec["selector"] =
                    json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
                let tmpl_meta = &mut spec["template"]["metadata"];
                if tmpl_meta.is_null() {
                    *tmpl_meta = json!({});
                }
                if !tmpl_meta.get("labels").is_some_and(Value::is_object) {
                    tmpl_meta["labels"] = json!({});
                }
                let labels = &mut tmpl_meta["labels"];
                labels["batch.kubernetes.io/controller-uid"] = json!(uid);
                labels["controller-uid"] = json!(uid);
                labels["batch.kubernetes.io/job-name"] = json!(name);
                labels["job-name"] = json!(name);
            }
            if let Some(tspec) = spec.pointer_mut("/template/spec")
                && tspec.get("restartPolicy").is_none()
            {
                tspec["restartPolicy"] = json!("Never");
            }
            obj["status"] = json!({});
        }
        "Namespace" => {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
            let name = meta_str(obj, "name").unwrap_or("").to_owned();
            let m = meta_mut(obj);
            let labels = m.entry("labels").or_insert_with(|| json!({}));
            labels["kubernetes.io/metadata.name"] = json!(name);
        }
        "Service" => {
            let spec = &mut obj["spec"];
            if spec.is_null() {
                *spec = json!({});
            }
            if spec.get("type").is_none() {
                spec["type"] = json!("ClusterIP");
            }
            if spec.get("clusterIP").is_none() {
                let mut rng = rand::rng();
                spec["clusterIP"] = json!(format!(
                    "10.96.{}.{}",
                    rng.random_range(0..255),
                    rng.random_range(1..255)
                ));
            }
            obj["status"] = json!({"loadBalancer": {}});
        }
        _ if r.crd => {
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        }
        _ => {}
    }
}

fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}

/// Validates and defaults a ray.io object against its CRD schema.
fn crd_admit(r: &Resource, name: &str, obj: &mut Value) -> Result<(), ApiError> {
    let Some(loaded) = schema::schema_for(r.kind) else {
        return Ok(());
    };
    let s = loaded
        .as_ref()
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    schema::apply_defaults(&s.openapi, obj);
    let causes = schema::validate(s, obj);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(r, name, causes))
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
            }),
            tx,
            gc: Notify::new(),
            logs,
            window: window.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("store lock poisoned")
    }

    /// Current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
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

    fn commit(
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
        let inner = self.lock();
        inner.objects[rid]
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| not_found(res(rid), name))
    }

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
        let (rv, after) = match cont {
            Some(token) => {
                let (rv, after) = decode_continue(token)?;
                if rv < inner.floor {
                    return Err(ApiError::Expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
                    ));
                }
                (rv, Some(after))
            }
            None => (inner.rv, None),
        };
        let map = &inner.objects[rid];
        let lower = match (&after, ns) {
            (Some(k), _) => std::ops::Bound::Excluded(k.clone()),
            (None, Some(n)) => std::ops::Bound::Included((n.to_owned(), String::new())),
            (None, None) => std::ops::Bound::Unbounded,
        };
        // The smallest index set among the selector's equalities, if any.
        let index = &inner.label_index[rid];
        let candidates = labels
            .equalities()
            .map(|(k, v)| index.get(&(k.to_owned(), v.to_owned())))
            .min_by_key(|set| set.map_or(0, BTreeSet::len));
        let range: Box<dyn Iterator<Item = (&Key, &Arc<Value>)>> = match candidates {
            // No object carries that label: nothing matches.
            Some(None) => Box::new(std::iter::empty()),
            Some(Some(set)) => Box::new(
                set.range::<Key, _>((lower, std::ops::Bound::Unbounded))
                    .filter_map(|k| map.get_key_value(k)),
            ),
            None => Box::new(map.range::<Key, _>((lower, std::ops::Bound::Unbounded))),
        };
        // Keys are sorted by (namespace, name): stop after the namespace's last key.
        let range: Box<dyn Iterator<Item = (&Key, &Arc<Value>)>> = match ns {
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

    /// Creates an object (POST). `ns` is `""` for cluster-scoped resources.
    pub fn create(&self, rid: ResId, ns: &str, obj: Value) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        self.create_locked(&mut inner, rid, ns, obj)
    }

    fn create_locked(
        &self,
        inner: &mut Inner,
        rid: ResId,
        ns: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let r = res(rid);
        if !obj.is_object() {
            return Err(ApiError::BadRequest(
                "the body of the request must be a JSON object".into(),
            ));
        }
        check_type(r, &obj)?;
        obj["kind"] = json!(r.kind);
        obj["apiVersion"] = json!(r.api_version());
        let m = meta_mut(&mut obj);
        if r.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ));
                }
                _ => {
                    m.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            m.remove("namespace");
        }
        let name = match m
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            Some(n) => n.to_owned(),
            None => match m
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                Some(prefix) => format!("{prefix}{}", random_suffix()),
                None => {
                    return Err(invalid(
                        r,
                        "",
                        vec![Cause {
                            reason: "FieldValueRequired".into(),
                            message: "Required value: name or generateName is required".into(),
                            field: "metadata.name".into(),
                        }],
                    ));
                }
            },
        };
        if !valid_dns_subdomain(&name) {
            return Err(invalid(
                r,
                &name,
                vec![Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!(
                        "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                    ),
                    field: "metadata.name".into(),
                }],
            ));
        }
        m.insert("name".into(), json!(name));
        for k in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ] {
            m.remove(k);
        }
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        if r.tracks_generation() {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        if r.namespaced {
            match inner.objects[NAMESPACES].get(&(String::new(), ns.to_owned())) {
                None => return Err(not_found(res(NAMESPACES), ns)),
                Some(n) if is_deleting(n) => {
                    return Err(ApiError::Forbidden(format!(
                        "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                        r.plural
                    )));
                }
                Some(_) => {}
            }
        }
        let key = (
            if r.namespaced {
                ns.to_owned()
            } else {
                String::new()
            },
            name.clone(),
        );
        if inner.objects[rid].contains_key(&key) {
            return Err(ApiError::AlreadyExists {
                resource: r.plural.into(),
                group: r.group.into(),
                name,
            });
        }
        prepare_for_create(r, &mut obj);
        if r.crd {
            crd_admit(r, &name, &mut obj)?;
        }
        Ok(self.commit(inner, rid, EventKind::Added, obj, None))
    }

    /// Replaces an object (PUT), on the main resource or its status.
    pub fn update(
        &self,
        rid: ResId,
        ns: &str,
        name: &str,
        obj: Value,
        sub: Sub,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        self.update_locked(&mut inner, rid, ns, name, obj, sub)
    }

    fn update_locked(
        &self,
        inner: &mut Inner,
        rid: ResId,
        ns: &str,
        name: &str,
        mut new: Value,
        sub: Sub,
    ) -> Result<Arc<Value>, ApiError> {
        let r = res(rid);
        let old = inner.objects[rid]
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| not_found(r, name))?;
        if !new.is_object() {
            return Err(ApiError::BadRequest(
                "the body of the request must be a JSON object".into(),
            ));
        }
        check_type(r, &new)?;
        if let Some(n) = meta_str(&new, "name")
            && n != name
        {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta_str(&new, "resourceVersion").filter(|s| !s.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(conflict(
                r,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if sub == Sub::Status {
            let status = new.get("status").cloned();
            new = (*old).clone();
            match status {
                Some(s) => new["status"] = s,
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        } else if r.status_subresource {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
        new["kind"] = json!(r.kind);
        new["apiVersion"] = json!(r.api_version());
        let old_meta = meta(&old).clone();
        let m = meta_mut(&mut new);
        for k in [
            "uid",
            "creationTimestamp",
            "name",
            "namespace",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
            "generateName",
        ] {
            match old_meta.get(k) {
                Some(v) => {
                    m.insert(k.into(), v.clone());
                }
                None => {
                    m.remove(k);
                }
            }
        }
        m.remove("managedFields");
        if r.crd {
            crd_admit(r, name, &mut new)?;
        }
        if sub == Sub::Main && r.tracks_generation() && spec_part(&new) != spec_part(&old) {
            let g = old_meta
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            meta_mut(&mut new).insert("generation".into(), json!(g));
        }
        if new == *old {
            return Ok(old);
        }
        if owner_uids(&new) != owner_uids(&old) || finalizers(&new) != finalizers(&old) {
            self.gc.notify_one();
        }
        if is_deleting(&new) && finalizers(&new).is_empty() {
            return Ok(self.commit(inner, rid, EventKind::Deleted, new, Some(old)));
        }
        Ok(self.commit(inner, rid, EventKind::Modified, new, Some(old)))
    }

    /// Patches an object (PATCH). Server-side apply creates a missing object.
    pub fn patch(
        &self,
        rid: ResId,
        ns: &str,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        sub: Sub,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let r = res(rid);
        let bad = |e: String| ApiError::BadRequest(e);
        let current = inner.objects[rid]
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned();
        let mut doc = match (current, kind) {
            (Some(c), _) => (*c).clone(),
            (None, PatchKind::Apply) => {
                let obj: Value = serde_yaml::from_slice(body).map_err(|e| bad(e.to_string()))?;
                if sub == Sub::Status {
                    return Err(not_found(r, name));
                }
                return self.create_locked(&mut inner, rid, ns, obj);
            }
            (None, _) => return Err(not_found(r, name)),
        };
        match kind {
            PatchKind::Merge | PatchKind::Strategic => {
                let p: Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
                json_patch::merge(&mut doc, &p);
            }
            PatchKind::Apply => {
                let p: Value = serde_yaml::from_slice(body).map_err(|e| bad(e.to_string()))?;
                json_patch::merge(&mut doc, &p);
            }
            PatchKind::Json => {
                let p: json_patch::Patch =
                    serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
                json_patch::patch(&mut doc, &p).map_err(|e| {
                    invalid(
                        r,
                        name,
                        vec![Cause {
                            reason: "FieldValueInvalid".into(),
                            message: e.to_string(),
                            field: String::new(),
                        }],
                    )
                })?;
            }
        }
        self.update_locked(&mut inner, rid, ns, name, doc, sub)
    }

    /// Deletes an object honouring finalizers and the propagation policy. Returns the
    /// object as last stored (with `deletionTimestamp` if deletion is pending).
    pub fn delete(
        &self,
        rid: ResId,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        self.delete_locked(&mut inner, rid, ns, name, opts)
    }

    fn delete_locked(
        &self,
        inner: &mut Inner,
        rid: ResId,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Arc<Value>, ApiError> {
        let r = res(rid);
        let old = inner.objects[rid]
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| not_found(r, name))?;
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta_str(&old, "uid")
        {
            return Err(conflict(
                r,
                name,
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
        {
            return Err(conflict(
                r,
                name,
                format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        let policy = match (opts.propagation.as_deref(), opts.orphan_dependents) {
            (Some(p), _) => p.to_owned(),
            (None, Some(true)) => "Orphan".to_owned(),
            (None, Some(false)) => "Background".to_owned(),
            // batch/v1 Jobs default to orphaning their pods, as in the real server.
            (None, None) if r.kind == "Job" => "Orphan".to_owned(),
            (None, None) => "Background".to_owned(),
        };
        let extra = match policy.as_str() {
            "Foreground" => Some("foregroundDeletion"),
            "Orphan" => Some("orphan"),
            "Background" => None,
            other => {
                return Err(invalid(
                    r,
                    name,
                    vec![Cause {
                        reason: "FieldValueNotSupported".into(),
                        message: format!(
                            "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                        ),
                        field: "propagationPolicy".into(),
                    }],
                ));
            }
        };
        let mut obj = (*old).clone();
        if let Some(f) = extra {
            let has_dependents = inner_has_dependents(inner, meta_str(&old, "uid").unwrap_or(""));
            if has_dependents && !finalizers(&obj).iter().any(|x| x == f) {
                let m = meta_mut(&mut obj);
                let list = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(f));
                }
            }
        }
        if is_deleting(&old) {
            if obj == *old {
                return Ok(old);
            }
            self.gc.notify_one();
            return Ok(self.commit(inner, rid, EventKind::Modified, obj, Some(old)));
        }
        if finalizers(&obj).is_empty() {
            return Ok(self.commit(inner, rid, EventKind::Deleted, obj, Some(old)));
        }
        let m = meta_mut(&mut obj);
        m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        if rid == NAMESPACES {
            obj["status"]["phase"] = json!("Terminating");
        }
        self.gc.notify_one();
        Ok(self.commit(inner, rid, EventKind::Modified, obj, Some(old)))
    }

    /// Binds a pod to a node (`pods/{name}/binding`), as the scheduler does.
    pub fn bind(&self, ns: &str, name: &str, node: &str) -> Result<(), ApiError> {
        let mut inner = self.lock();
        let r = res(PODS);
        let old = inner.objects[PODS]
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| not_found(r, name))?;
        if is_deleting(&old) {
            return Err(conflict(
                r,
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        if let Some(n) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(conflict(
                r,
                name,
                format!("pod {name} is already assigned to node \"{n}\""),
            ));
        }
        let mut pod = (*old).clone();
        pod["spec"]["nodeName"] = json!(node);
        let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()});
        let conds = &mut pod["status"]["conditions"];
        if !conds.is_array() {
            *conds = json!([]);
        }
        if let Some(a) = conds.as_array_mut() {
            a.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
            a.push(cond);
        }
        self.commit(&mut inner, PODS, EventKind::Modified, pod, Some(old));
        Ok(())
    }

    /// Starts a watch of `rid` (in `ns`, or everywhere) from resourceVersion `rv`
    /// (`None`/`0`: synthetic ADDED events for the current state first).
    pub fn watch(
        &self,
        rid: ResId,
        ns: Option<&str>,
        rv: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let inner = self.lock();
        let rx = self.tx.subscribe();
        let in_ns = |o: &Value| ns.is_none_or(|n| meta_str(o, "namespace").unwrap_or("") == n);
        match rv {
            None | Some(0) => {
                let replay = inner.objects[rid]
                    .values()
                    .filter(|o| in_ns(o))
                    .map(|o| {
                        Arc::new(WatchEvent {
                            rv: meta_str(o, "resourceVersion")
                                .and_then(|s| s.parse().ok())
                                .unwrap_or(0),
                            res: rid,
                            kind: EventKind::Added,
                            object: o.clone(),
                            old: None,
                        })
                    })
                    .collect();
                Ok(WatchStart {
                    replay,
                    rx,
                    start_rv: inner.rv,
                })
            }
            Some(from) => {
                let replay = history_since(&inner, from)?
                    .into_iter()
                    .filter(|e| e.res == rid && in_ns(&e.object))
                    .collect();
                Ok(WatchStart {
                    replay,
                    rx,
                    start_rv: inner.rv,
                })
            }
        }
    }

    /// Events after `rv` (for a watcher that lagged behind the broadcast channel).
    pub fn history_since(&self, rv: u64) -> Result<Vec<Arc<WatchEvent>>, ApiError> {
        history_since(&self.lock(), rv)
    }

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
        let mut changes = 0;
        // owner uid -> dependents (res, key, blocking)
        let mut deps: HashMap<String, Vec<(ResId, Key, bool)>> = HashMap::new();
        let mut orphans_to_delete = Vec::new();
        for (rid, map) in inner.objects.iter().enumerate() {
            for (key, obj) in map {
                let owners = owner_uids(obj);
                if owners.is_empty() {
                    continue;
                }
                if owners.iter().all(|(uid, _)| !inner.uids.contains_key(uid)) {
                    if !is_deleting(obj) {
                        orphans_to_delete.push((rid, key.clone()));
                    }
                    continue;
                }
                for (uid, block) in owners {
                    deps.entry(uid).or_default().push((rid, key.clone(), block));
                }
            }
        }
        for (rid, key) in orphans_to_delete {
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
        let deleting: Vec<(ResId, Key, Arc<Value>)> = inner
            .objects
            .iter()
            .enumerate()
            .flat_map(|(rid, map)| {
                map.iter()
                    .filter(|(_, o)| is_deleting(o))
                    .map(move |(k, o)| (rid, k.clone(), o.clone()))
            })
            .collect();
        for (rid, key, owner) in deleting {
            let uid = meta_str(&owner, "uid").unwrap_or("").to_owned();
            let fins = finalizers(&owner);
            let my_deps = deps.get(&uid).cloned().unwrap_or_default();
            if fins.iter().any(|f| f == "orphan") {
                for (drid, dkey, _) in &my_deps {
                    if let Some(d) = inner.objects[*drid].get(dkey).cloned() {
                        let mut d2 = (*d).clone();
                        if let Some(refs) = d2
                            .pointer_mut("/metadata/ownerReferences")
                            .and_then(Value::as_array_mut)
                        {
                            refs.retain(|r| {
                                r.get("uid").and_then(Value::as_str) != Some(uid.as_str())
                            });
                            if refs.is_empty()
                                && let Some(m) =
                                    d2.get_mut("metadata").and_then(Value::as_object_mut)
                            {
                                m.remove("ownerReferences");
                            }
                        }
                        self.commit(inner, *drid, EventKind::Modified, d2, Some(d));
                        changes += 1;
                    }
                }
                self.remove_finalizer(inner, rid, &key, "orphan");
                changes += 1;
                continue;
            }
            if fins.iter().any(|f| f == "foregroundDeletion") {
                for (drid, dkey, _) in &my_deps {
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
                let blocking_left = my_deps
                    .iter()
                    .any(|(drid, dkey, block)| *block && inner.objects[*drid].contains_key(dkey));
                if !blocking_left {
                    self.remove_finalizer(inner, rid, &key, "foregroundDeletion");
                    changes += 1;
                }
                continue;
            }
            if rid == NAMESPACES && fins.iter().any(|f| f == "kubernetes") {
                let ns = key.1.clone();
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
                        let deleting_child =
                            inner.objects[crid].get(&k).is_some_and(|o| is_deleting(o));
                        if !deleting_child
                            && self
                                .delete_locked(
                                    inner,
                                    crid,
                                    &k.0,
                                    &k.1,
                                    &DeleteOpts::default_background(),
                                )
                                .is_ok()
                        {
                            changes += 1;
                        }
                    }
                }
                if left == 0 {
                    if let Some(o) = inner.objects[NAMESPACES].get(&key).cloned() {
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
            }
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

impl DeleteOpts {
    fn default_background() -> Self {
        Self {
            propagation: Some("Background".into()),
            ..Self::default()
        }
    }
}

fn inner_has_dependents(inner: &Inner, uid: &str) -> bool {
    inner.objects.iter().any(|m| {
        m.values()
            .any(|o| owner_uids(o).iter().any(|(u, _)| u == uid))
    })
}

fn history_since(inner: &Inner, rv: u64) -> Result<Vec<Arc<WatchEvent>>, ApiError> {
    if rv < inner.floor {
        return Err(ApiError::Expired(format!(
            "too old resource version: {rv} ({})",
            inner.floor
        )));
    }
    Ok(inner
        .history
        .iter()
        .filter(|e| e.rv > rv)
        .cloned()
        .collect())
}

fn check_type(r: &Resource, obj: &Value) -> Result<(), ApiError> {
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != r.kind
    {
        return Err(ApiError::BadRequest(format!(
            "the kind of the object ({k}) does not match the kind on the URL ({})",
            r.kind
        )));
    }
    if let Some(v) = obj.get("apiVersion").and_then(Value::as_str)
        && !v.is_empty()
        && v != r.api_version()
    {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({v}) does not match the expected API version ({})",
            r.api_version()
        )));
    }
    Ok(())
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
