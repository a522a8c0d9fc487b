//! The simulated kubelet: one watch over all pods bound to a node, one worker task per
//! pod (like the kubelet's pod workers). A worker pulls images (per-node image cache;
//! images in `ControllerConfig::failing_images` fail with `ErrImagePull` then
//! `ImagePullBackOff`), runs init containers in order (really, in process mode; a
//! failure gives `Init:Error` / `Init:CrashLoopBackOff` with back-off, or a Failed pod
//! under `restartPolicy: Never`), starts the containers, and maintains phase,
//! conditions (PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady,
//! Ready) and container statuses through the `pods/status` subresource. Events are
//! core/v1 with `source.component=kubelet`.
//!
//! What the containers "do": a KubeRay submitter pod (container `ray-job-submitter`)
//! submits its job to the simulated dashboard and follows it ([`Submitter`]); Ray
//! node containers run until the pod is deleted (the head writes `ray start --head`
//! lines); any other container just keeps Running.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::events::{Kind, emit_core};
use super::names::{
    CAPSULE_SHA_ANNOTATION, IS_RAY_NODE, NODE_TYPE, ORIGINATED_FROM_CR_NAME, RAY_CLUSTER,
    SUBMITTER_CONTAINER, cluster_from_dashboard,
};
use super::runner::{
    RunnerError, fetch_working_dir, parse_runtime_env, prepare_volumes, run_init_container,
    run_logged, unpack_zip, verify_sha256,
};
use super::{ControllerError, RunMode, Shared, rayjob_resource};

const COMPONENT: &str = "kubelet";

/// Images already present per node.
type ImageCache = Arc<Mutex<HashSet<(String, String)>>>;

/// Runs the kubelet until shutdown.
pub async fn run(shared: Arc<Shared>) -> Result<(), ControllerError> {
    let mut workers: HashMap<String, CancellationToken> = HashMap::new();
    let images: ImageCache = Arc::default();
    let api: Api<Pod> = Api::all(shared.client.clone());
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        let ev = tokio::select! {
            () = shared.shutdown.cancelled() => break,
            ev = stream.next() => match ev { Some(ev) => ev, None => break },
        };
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::debug!(error = %e, "kubelet watch error");
                continue;
            }
        };
        match ev {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                let uid = pod.uid().unwrap_or_default();
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                if node.is_empty() {
                    continue;
                }
                if pod.metadata.deletion_timestamp.is_some() {
                    if let Some(t) = workers.get(&uid) {
                        t.cancel();
                    }
                    continue;
                }
                let phase = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or("Pending");
                if workers.contains_key(&uid) || matches!(phase, "Succeeded" | "Failed") {
                    continue;
                }
                let token = shared.shutdown.child_token();
                workers.insert(uid, token.clone());
                let w = Worker {
                    shared: shared.clone(),
                    pod,
                    node,
                    images: images.clone(),
                    cancel: token,
                };
                tokio::spawn(w.run());
            }
            watcher::Event::Delete(pod) => {
                let uid = pod.uid().unwrap_or_default();
                if let Some(t) = workers.remove(&uid) {
                    t.cancel();
                }
                shared
                    .logs
                    .remove_pod(&pod.namespace().unwrap_or_default(), &pod.name_any());
                let dir = shared.cfg.scratch_root.join("pods").join(&uid);
                if !uid.is_empty() && dir.exists() {
                    let _ = tokio::fs::remove_dir_all(dir).await;
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
    for t in workers.values() {
        t.cancel();
    }
    Ok(())
}

fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `docker.io/library/x:latest` form of an image reference.
pub fn normalize_image(image: &str) -> String {
    let (name, tagged) = match image.rsplit_once('/') {
        Some((_, last)) => (image.to_owned(), last.contains(':') || last.contains('@')),
        None => (image.to_owned(), image.contains(':') || image.contains('@')),
    };
    let first = name.split('/').next().unwrap_or("");
    let with_registry = if !name.contains('/') {
        format!("docker.io/library/{name}")
    } else if first.contains('.') || first.contains(':') || first == "localhost" {
        name
    } else {
        format!("docker.io/{name}")
    };
    if tagged {
        with_registry
    } else {
        format!("{with_registry}:latest")
    }
}

/// Container status bookkeeping.
#[derive(Clone, Debug)]
struct CStatus {
    name: String,
    image: String,
    state: Value,
    last_state: Value,
    ready: bool,
    started: bool,
    restarts: i64,
    id: String,
}

impl CStatus {
    fn new(c: &Container, waiting_reason: &str) -> Self {
        Self {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            state: json!({"waiting": {"reason": waiting_reason}}),
            last_state: json!({}),
            ready: false,
            started: false,
            restarts: 0,
            id: String::new(),
        }
    }

    fn to_json(&self) -> Value {
        let mut v = json!({
            "name": self.name, "image": self.image, "imageID": "",
            "state": self.state, "lastState": self.last_state, "ready": self.ready,
            "started": self.started, "restartCount": self.restarts,
        });
        if !self.id.is_empty() {
            v["containerID"] = json!(format!("containerd://{}", self.id));
            v["imageID"] = json!(format!(
                "{}@sha256:{}",
                normalize_image(&self.image),
                "0".repeat(64)
            ));
        }
        v
    }
}

struct Worker {
    shared: Arc<Shared>,
    pod: Pod,
    node: String,
    images: ImageCache,
    cancel: CancellationToken,
}

/// Mutable pod status.
struct State {
    phase: &'static str,
    init: Vec<CStatus>,
    main: Vec<CStatus>,
    initialized: bool,
    ready: bool,
    completed: bool,
    pod_ip: String,
    host_ip: String,
    start_time: String,
    scheduled_at: String,
}

impl State {
    fn to_json(&self) -> Value {
        let cond = |t: &str, ok: bool, reason: Option<&str>| {
            let mut c = json!({"type": t, "status": if ok { "True" } else { "False" }, "lastProbeTime": null,
                               "lastTransitionTime": now()});
            if let Some(r) = reason {
                c["reason"] = json!(r);
            }
            c
        };
        let not_ready_reason = if self.completed {
            Some("PodCompleted")
        } else {
            Some("ContainersNotReady")
        };
        let init_reason = if self.completed {
            Some("PodCompleted")
        } else {
            Some("ContainersNotInitialized")
        };
        json!({
            "phase": self.phase,
            "hostIP": self.host_ip, "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.pod_ip, "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "qosClass": "Burstable",
            "conditions": [
                cond("PodReadyToStartContainers", !self.completed, None),
                cond("Initialized", self.initialized, if self.initialized { None } else { init_reason }),
                cond("Ready", self.ready, if self.ready { None } else { not_ready_reason }),
                cond("ContainersReady", self.ready, if self.ready { None } else { not_ready_reason }),
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": self.scheduled_at},
            ],
            "initContainerStatuses": self.init.iter().map(CStatus::to_json).collect::<Vec<_>>(),
            "containerStatuses": self.main.iter().map(CStatus::to_json).collect::<Vec<_>>(),
        })
    }
}

fn container_id() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..64)
        .map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0'))
        .collect()
}

enum Pull {
    Ok,
    Cancelled,
}

impl Worker {
    fn ns(&self) -> String {
        self.pod.namespace().unwrap_or_default()
    }

    fn name(&self) -> String {
        self.pod.name_any()
    }

    fn reference(&self, field: Option<String>) -> ObjectReference {
        let mut r = self.pod.object_ref(&());
        r.field_path = field;
        r
    }

    async fn event(&self, field: Option<String>, kind: Kind, reason: &str, msg: &str) {
        emit_core(
            &self.shared.client,
            COMPONENT,
            Some(&self.node),
            &self.reference(field),
            kind,
            reason,
            msg,
        )
        .await;
    }

    async fn push(&self, st: &State) -> bool {
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.ns());
        match api
            .patch_status(
                &self.name(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": st.to_json()})),
            )
            .await
        {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                self.cancel.cancel();
                false
            }
            Err(e) => {
                tracing::debug!(error = %e, pod = %self.name(), "kubelet status update failed");
                false
            }
        }
    }

    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            () = self.cancel.cancelled() => false,
            () = tokio::time::sleep(d) => true,
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        (self.shared.cfg.backoff_base * 2u32.saturating_pow(attempt)).min(Duration::from_secs(300))
    }

    /// Pulls one image for container `c` (index `idx` into `list` of `st`).
    async fn pull(
        &self,
        st: &mut State,
        init: bool,
        idx: usize,
        c: &Container,
        field: String,
    ) -> Pull {
        let image = c.image.clone().unwrap_or_default();
        let policy = c.image_pull_policy.clone().unwrap_or_else(|| {
            if image.ends_with(":latest") || !image.rsplit('/').next().unwrap_or("").contains(':') {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        let cached = self
            .images
            .lock()
            .expect("image cache lock")
            .contains(&(self.node.clone(), image.clone()));
        if cached && policy != "Always" {
            let msg = format!("Container image \"{image}\" already present on machine");
            self.event(Some(field), Kind::Normal, "Pulled", &msg).await;
            return Pull::Ok;
        }
        let mut attempt = 0u32;
        loop {
            self.event(
                Some(field.clone()),
                Kind::Normal,
                "Pulling",
                &format!("Pulling image \"{image}\""),
            )
            .await;
            let started = Instant::now();
            if !self.sleep(self.shared.cfg.image_pull).await {
                return Pull::Cancelled;
            }
            if !self.shared.cfg.failing_images.contains(&image) {
                self.images
                    .lock()
                    .expect("image cache lock")
                    .insert((self.node.clone(), image.clone()));
                let secs = started.elapsed().as_secs_f64();
                let msg = format!(
                    "Successfully pulled image \"{image}\" in {secs:.3}s ({secs:.3}s including waiting). Image size: 104857600 bytes."
                );
                self.event(Some(field), Kind::Normal, "Pulled", &msg).await;
                return Pull::Ok;
            }
            let full = normalize_image(&image);
            let msg = format!(
                "Failed to pull image \"{image}\": rpc error: code = NotFound desc = failed to pull and unpack image \"{full}\": failed to resolve reference \"{full}\": {full}: not found"
            );
            self.event(Some(field.clone()), Kind::Warning, "Failed", &msg)
                .await;
            self.event(
                Some(field.clone()),
                Kind::Warning,
                "Failed",
                "Error: ErrImagePull",
            )
            .await;
            let list = if init { &mut st.init } else { &mut st.main };
            list[idx].state = json!({"waiting": {"reason": "ErrImagePull", "message": msg}});
            self.push(st).await;
            if !self
                .sleep(Duration::from_millis(500).min(self.shared.cfg.backoff_base))
                .await
            {
                return Pull::Cancelled;
            }
            self.event(
                Some(field.clone()),
                Kind::Normal,
                "BackOff",
                &format!("Back-off pulling image \"{image}\""),
            )
            .await;
            self.event(
                Some(field.clone()),
                Kind::Warning,
                "Failed",
                "Error: ImagePullBackOff",
            )
            .await;
            let list = if init { &mut st.init } else { &mut st.main };
            list[idx].state = json!({"waiting": {"reason": "ImagePullBackOff",
                "message": format!("Back-off pulling image \"{image}\": ErrImagePull: {msg}")}});
            self.push(st).await;
            if !self.sleep(self.backoff(attempt)).await {
                return Pull::Cancelled;
            }
            attempt += 1;
        }
    }

    async fn run(self) {
        if let Err(e) = prepare_volumes(&self.shared.cfg.scratch_root, &self.pod) {
            tracing::warn!(error = %e, "could not create pod volumes");
        }
        let spec = self.pod.spec.clone().unwrap_or_default();
        let init_cs = spec.init_containers.clone().unwrap_or_default();
        let main_cs = spec.containers.clone();
        let restart = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        let scheduled_at = self
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map_or_else(now, |t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        let uid = self.pod.uid().unwrap_or_default();
        let h = uid
            .bytes()
            .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
        let mut st = State {
            phase: "Pending",
            init: init_cs
                .iter()
                .map(|c| CStatus::new(c, "PodInitializing"))
                .collect(),
            main: main_cs
                .iter()
                .map(|c| {
                    CStatus::new(
                        c,
                        if init_cs.is_empty() {
                            "ContainerCreating"
                        } else {
                            "PodInitializing"
                        },
                    )
                })
                .collect(),
            initialized: init_cs.is_empty(),
            ready: false,
            completed: false,
            pod_ip: format!(
                "10.{}.{}.{}",
                64 + (h >> 16) % 64,
                (h >> 8) % 256,
                h % 254 + 1
            ),
            host_ip: format!(
                "192.168.{}.{}",
                (self.node.len() * 7) % 256,
                self.node.bytes().map(u32::from).sum::<u32>() % 254 + 1
            ),
            start_time: now(),
            scheduled_at,
        };
        self.push(&st).await;

        // Init containers, in order.
        for (i, c) in init_cs.iter().enumerate() {
            let field = format!("spec.initContainers{{{}}}", c.name);
            let mut attempt = 0u32;
            loop {
                if let Pull::Cancelled = self.pull(&mut st, true, i, c, field.clone()).await {
                    return;
                }
                st.init[i].id = container_id();
                self.event(
                    Some(field.clone()),
                    Kind::Normal,
                    "Created",
                    &format!("Created container: {}", c.name),
                )
                .await;
                self.event(
                    Some(field.clone()),
                    Kind::Normal,
                    "Started",
                    &format!("Started container {}", c.name),
                )
                .await;
                let started_at = now();
                st.init[i].state = json!({"running": {"startedAt": started_at}});
                st.init[i].started = true;
                self.push(&st).await;
                let code = match &self.shared.cfg.mode {
                    RunMode::Timed(_) => Some(0),
                    RunMode::Process => {
                        match run_init_container(
                            &self.shared.cfg.scratch_root,
                            &self.shared.logs,
                            &self.pod,
                            c,
                            &self.cancel,
                        )
                        .await
                        {
                            Ok(code) => code,
                            Err(e) => {
                                self.shared.logs.append(
                                    &self.ns(),
                                    &self.name(),
                                    &c.name,
                                    format!("exec: {e}\n").as_bytes(),
                                );
                                Some(127)
                            }
                        }
                    }
                };
                self.shared.logs.close(&self.ns(), &self.name(), &c.name);
                let Some(code) = code else { return };
                let reason = if code == 0 { "Completed" } else { "Error" };
                let terminated = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started_at,
                    "finishedAt": now(), "containerID": format!("containerd://{}", st.init[i].id)}});
                st.init[i].started = false;
                if code == 0 {
                    st.init[i].state = terminated;
                    st.init[i].ready = true;
                    break;
                }
                if restart == "Never" {
                    st.init[i].state = terminated;
                    st.phase = "Failed";
                    st.completed = true;
                    self.push(&st).await;
                    return;
                }
                st.init[i].state = terminated.clone();
                self.push(&st).await;
                let wait = self.backoff(attempt);
                let msg = format!(
                    "Back-off restarting failed container {} in pod {}_{}({uid})",
                    c.name,
                    self.name(),
                    self.ns()
                );
                self.event(Some(field.clone()), Kind::Warning, "BackOff", &msg)
                    .await;
                st.init[i].last_state = terminated;
                st.init[i].restarts += 1;
                st.init[i].state = json!({"waiting": {"reason": "CrashLoopBackOff", "message":
                    format!("back-off {}s restarting failed container={} pod={}_{}({uid})", wait.as_secs(), c.name, self.name(), self.ns())}});
                self.push(&st).await;
                if !self.sleep(wait).await {
                    return;
                }
                attempt += 1;
            }
        }
        st.initialized = true;
        for m in &mut st.main {
            m.state = json!({"waiting": {"reason": "ContainerCreating"}});
        }
        self.push(&st).await;

        // Images of the app containers.
        for (i, c) in main_cs.iter().enumerate() {
            let field = format!("spec.containers{{{}}}", c.name);
            if let Pull::Cancelled = self.pull(&mut st, false, i, c, field).await {
                return;
            }
        }
        for (i, c) in main_cs.iter().enumerate() {
            let field = format!("spec.containers{{{}}}", c.name);
            st.main[i].id = container_id();
            self.event(
                Some(field.clone()),
                Kind::Normal,
                "Created",
                &format!("Created container: {}", c.name),
            )
            .await;
            self.event(
                Some(field),
                Kind::Normal,
                "Started",
                &format!("Started container {}", c.name),
            )
            .await;
            st.main[i].state = json!({"running": {"startedAt": now()}});
            st.main[i].started = true;
        }
        st.phase = "Running";
        self.push(&st).await;
        if let RunMode::Timed(m) = &self.shared.cfg.mode
            && m.start_secs > 0.0
            && !self.sleep(Duration::from_secs_f64(m.start_secs)).await
        {
            return;
        }
        for m in &mut st.main {
            m.ready = true;
        }
        st.ready = true;
        self.push(&st).await;

        let is_submitter = main_cs
            .first()
            .is_some_and(|c| c.name == SUBMITTER_CONTAINER);
        if is_submitter {
            let code = Submitter { w: &self }.run().await;
            let Some(code) = code else { return };
            let reason = if code == 0 { "Completed" } else { "Error" };
            let started = st.main[0]
                .state
                .pointer("/running/startedAt")
                .cloned()
                .unwrap_or_else(|| json!(now()));
            st.main[0].state = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started,
                "finishedAt": now(), "containerID": format!("containerd://{}", st.main[0].id)}});
            st.main[0].ready = false;
            st.main[0].started = false;
            st.ready = false;
            st.completed = true;
            st.phase = if code == 0 { "Succeeded" } else { "Failed" };
            self.shared
                .logs
                .close(&self.ns(), &self.name(), SUBMITTER_CONTAINER);
            self.push(&st).await;
            return;
        }
        if self.pod.labels().get(IS_RAY_NODE).map(String::as_str) == Some("yes")
            && let Some(c) = main_cs.first()
        {
            let head = self.pod.labels().get(NODE_TYPE).map(String::as_str) == Some("head");
            self.shared.logs.append(
                &self.ns(),
                &self.name(),
                &c.name,
                ray_start_log(head, &st.pod_ip).as_bytes(),
            );
        }
        // Runs until the pod is deleted (its logs go with it).
        self.cancel.cancelled().await;
    }
}

fn ray_start_log(head: bool, ip: &str) -> String {
    let ts = Timestamp::now().strftime("%Y-%m-%d %H:%M:%S,%3f");
    if head {
        format!(
            "{ts}\tINFO usage_lib.py:467 -- Usage stats collection is disabled.\n\
             {ts}\tINFO scripts.py:865 -- Local node IP: {ip}\n\
             {ts}\tSUCC scripts.py:902 -- --------------------\n\
             {ts}\tSUCC scripts.py:903 -- Ray runtime started.\n\
             {ts}\tSUCC scripts.py:904 -- --------------------\n\
             {ts}\tINFO scripts.py:906 -- Next steps\n\
             {ts}\tINFO scripts.py:909 -- To add another node to this Ray cluster, run\n\
             {ts}\tINFO scripts.py:912 --   ray start --address='{ip}:6379'\n\
             {ts}\tINFO scripts.py:921 -- To connect to this Ray cluster:\n\
             {ts}\tINFO scripts.py:1007 -- --block\n\
             {ts}\tINFO scripts.py:1008 -- This command will now block forever until terminated by a signal.\n"
        )
    } else {
        format!(
            "{ts}\tINFO scripts.py:1046 -- Local node IP: {ip}\n\
             {ts}\tSUCC scripts.py:1059 -- --------------------\n\
             {ts}\tSUCC scripts.py:1060 -- Ray runtime started.\n\
             {ts}\tSUCC scripts.py:1061 -- --------------------\n\
             {ts}\tINFO scripts.py:1089 -- --block\n"
        )
    }
}

/// The `ray-job-submitter` container: `ray job submit --no-wait` + `ray job logs --follow`.
struct Submitter<'a> {
    w: &'a Worker,
}

impl Submitter<'_> {
    fn log(&self, line: &str) {
        let ts = Timestamp::now().strftime("%Y-%m-%d %H:%M:%S,%3f");
        let text = format!("{ts}\t{line}\n");
        self.w.shared.logs.append(
            &self.w.ns(),
            &self.w.name(),
            SUBMITTER_CONTAINER,
            text.as_bytes(),
        );
    }

    fn env(&self, key: &str) -> String {
        self.w
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.env.as_ref())
            .and_then(|e| e.iter().find(|e| e.name == key))
            .and_then(|e| e.value.clone())
            .unwrap_or_default()
    }

    /// Returns the container's exit code (`None`: the pod was deleted).
    async fn run(&self) -> Option<i32> {
        let shared = &self.w.shared;
        let ns = self.w.ns();
        let id = self.env("RAY_JOB_SUBMISSION_ID");
        let addr = self.env("RAY_DASHBOARD_ADDRESS");
        let cluster = cluster_from_dashboard(&addr).unwrap_or_default().to_owned();
        self.log(&format!(
            "INFO cli.py:41 -- Job submission server address: http://{addr}"
        ));
        let draw = match &shared.cfg.mode {
            RunMode::Timed(m) => Some(m.draw()),
            RunMode::Process => None,
        };
        if draw.as_ref().is_some_and(|d| d.submit_fails) {
            self.log("ERROR cli.py:... -- Failed to connect to Ray dashboard (simulated submission failure)");
            return Some(1);
        }
        match shared.dashboard.submit(&ns, &cluster, &id) {
            Some(stop) => {
                self.log(
                    "SUCC cli.py:65 -- -------------------------------------------------------",
                );
                self.log(&format!(
                    "SUCC cli.py:66 -- Job '{id}' submitted successfully"
                ));
                self.log(
                    "SUCC cli.py:67 -- -------------------------------------------------------",
                );
                let driver = Driver {
                    shared: shared.clone(),
                    ns: ns.clone(),
                    cluster: cluster.clone(),
                    id: id.clone(),
                    pod: self.w.name(),
                    rayjob: self
                        .w
                        .pod
                        .labels()
                        .get(ORIGINATED_FROM_CR_NAME)
                        .cloned()
                        .unwrap_or_default(),
                    stop,
                };
                tokio::spawn(driver.run(draw));
            }
            None => self.log(&format!(
                "INFO cli.py:... -- Job '{id}' already exists; following its logs"
            )),
        }
        // `ray job logs --follow`: ends when the job is terminal (or the cluster is gone).
        loop {
            match shared.dashboard.get(&ns, &cluster, &id) {
                Some(i) if super::dashboard::is_terminal(&i.status) => return Some(0),
                Some(_) => {}
                None => {
                    self.log(&format!(
                        "ERROR cli.py:... -- Job '{id}' does not exist on the cluster"
                    ));
                    return Some(1);
                }
            }
            if !self.w.sleep(Duration::from_millis(200)).await {
                return None;
            }
        }
    }
}

/// The Ray driver of one submitted job (runs "on the head", owned by the dashboard
/// entry: it is killed by a stop or by the cluster going away, not by the submitter).
struct Driver {
    shared: Arc<Shared>,
    ns: String,
    cluster: String,
    id: String,
    pod: String,
    rayjob: String,
    stop: CancellationToken,
}

impl Driver {
    fn line(&self, s: &str) {
        self.shared.logs.append(
            &self.ns,
            &self.pod,
            SUBMITTER_CONTAINER,
            format!("{s}\n").as_bytes(),
        );
    }

    async fn run(self, draw: Option<super::timed::Draw>) {
        let (status, message) = match draw {
            Some(d) => {
                self.shared
                    .dashboard
                    .set_running(&self.ns, &self.cluster, &self.id);
                tokio::select! {
                    () = self.stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs_f64(d.run_secs)) => {}
                }
                if d.app_fails {
                    self.line("Traceback (most recent call last):\nRuntimeError: simulated application failure");
                    (
                        "FAILED".to_owned(),
                        "Job entrypoint command failed with exit code 1".to_owned(),
                    )
                } else {
                    (
                        "SUCCEEDED".to_owned(),
                        "Job finished successfully.".to_owned(),
                    )
                }
            }
            None => match self.process().await {
                Ok(Some(0)) => (
                    "SUCCEEDED".to_owned(),
                    "Job finished successfully.".to_owned(),
                ),
                Ok(Some(code)) => (
                    "FAILED".to_owned(),
                    format!("Job entrypoint command failed with exit code {code}"),
                ),
                Ok(None) => return,
                Err(e) => {
                    self.line(&e.to_string());
                    (
                        "FAILED".to_owned(),
                        format!(
                            "Job failed due to an error while setting up its runtime environment: {e}"
                        ),
                    )
                }
            },
        };
        self.shared
            .dashboard
            .finish(&self.ns, &self.cluster, &self.id, &status, &message);
        let verb = if status == "SUCCEEDED" {
            "succeeded"
        } else {
            "failed"
        };
        let ts = Timestamp::now().strftime("%Y-%m-%d %H:%M:%S,%3f");
        self.line(&format!(
            "{ts}\tINFO cli.py:... -- Job '{}' {verb}",
            self.id
        ));
    }

    async fn process(&self) -> Result<Option<i32>, RunnerError> {
        // The emulated driver reads its RayJob and head pod through the API server, an
        // emulator shortcut (a real driver runs on the head node and reads its own
        // filesystem): such reads are retried through injected or transient API
        // failures rather than failing the job (`internal_read`).
        let client = &self.shared.client;
        let rj_api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &self.ns, &rayjob_resource());
        let rj = internal_read(|| rj_api.get(&self.rayjob))
            .await
            .map_err(|e| RunnerError::Fetch {
                url: format!("rayjob {}", self.rayjob),
                reason: e.to_string(),
            })?;
        let spec = rj.data.get("spec").cloned().unwrap_or(Value::Null);
        let env = parse_runtime_env(spec.get("runtimeEnvYAML").and_then(Value::as_str))?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.ns);
        let lp = ListParams::default()
            .labels(&format!("{RAY_CLUSTER}={},{NODE_TYPE}=head", self.cluster));
        let head = internal_read(|| pods.list(&lp))
            .await
            .ok()
            .and_then(|l| l.items.into_iter().next());
        let root = &self.shared.cfg.scratch_root;
        let workdir: PathBuf = root.join("jobs").join(&self.ns).join(&self.id);
        if workdir.exists() {
            std::fs::remove_dir_all(&workdir)?;
        }
        std::fs::create_dir_all(&workdir)?;
        if let Some(uri) = &env.working_dir {
            let bytes = fetch_working_dir(root, head.as_ref(), uri).await?;
            if let Some(sha) = rj.annotations().get(CAPSULE_SHA_ANNOTATION) {
                verify_sha256(&bytes, sha)?;
            }
            let dest = workdir.clone();
            tokio::task::spawn_blocking(move || unpack_zip(&bytes, &dest))
                .await
                .map_err(|e| RunnerError::Io(std::io::Error::other(e)))??;
        }
        self.shared
            .dashboard
            .set_running(&self.ns, &self.cluster, &self.id);
        let entrypoint = spec
            .get("entrypoint")
            .and_then(Value::as_str)
            .unwrap_or("true");
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c").arg(entrypoint).current_dir(&workdir);
        if let Some(c0) = head
            .as_ref()
            .and_then(|h| h.spec.as_ref())
            .and_then(|s| s.containers.first())
        {
            for e in c0.env.iter().flatten() {
                if let Some(v) = &e.value {
                    cmd.env(&e.name, v);
                }
            }
        }
        for (k, v) in &env.env_vars {
            cmd.env(k, v);
        }
        let pp = std::env::var("PYTHONPATH")
            .map(|p| format!("{}:{p}", workdir.display()))
            .unwrap_or_else(|_| workdir.display().to_string());
        cmd.env("PYTHONPATH", pp)
            .env("RAY_JOB_SUBMISSION_ID", &self.id);
        let code = run_logged(
            cmd,
            &self.shared.logs,
            (&self.ns, &self.pod, SUBMITTER_CONTAINER),
            &self.stop,
            None,
        )
        .await?;
        let _ = std::fs::remove_dir_all(&workdir);
        Ok(code)
    }
}

/// Deletes a pod immediately (what the kubelet does once containers are stopped).
pub async fn force_delete(client: &kube::Client, ns: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let _ = api.delete(name, &dp).await;
}

/// Retry a read the emulator makes for its own bookkeeping through 429 / 5xx answers
/// (fault injection, a busy server) for up to ~10 s.
async fn internal_read<T, F, Fut>(mut read: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = std::time::Duration::from_millis(50);
    let mut waited = std::time::Duration::ZERO;
    loop {
        match read().await {
            Err(kube::Error::Api(s))
                if (s.code == 429 || s.code >= 500)
                    && waited < std::time::Duration::from_secs(10) =>
            {
                tokio::time::sleep(delay).await;
                waited += delay;
                delay = (delay * 2).min(std::time::Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_normalize_like_containerd() {
        assert_eq!(
            normalize_image("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            normalize_image("rayproject/ray:2.46.0"),
            "docker.io/rayproject/ray:2.46.0"
        );
        assert_eq!(normalize_image("ghcr.io/x/y"), "ghcr.io/x/y:latest");
        assert_eq!(normalize_image("localhost:5000/y:1"), "localhost:5000/y:1");
    }
}
