//! A pod's life on its node: volumes attached and mounted (`volumes`), init containers
//! in order (really run in process mode, held to their `limits.memory`; a failure gives
//! `Init:Error` / `Init:CrashLoopBackOff` with back-off — `OOMKilled` when over the
//! limit — or a Failed pod under `restartPolicy: Never`), image pulls, each container's environment built before it is created (a
//! missing ConfigMap/Secret or key: `CreateContainerConfigError` until it appears), the
//! app containers started, Running and Ready, and then what the containers do: with
//! real Ray, Ray nodes and submitters run it (`real_ray`); otherwise a KubeRay submitter
//! pod runs [`Submitter`] until its Ray job is terminal and a Ray node writes its
//! `ray start` lines and runs until the pod is deleted (restarted after an OOM kill of
//! the driver it hosts, `lastState` `OOMKilled`); a container started again logs to a
//! fresh log, the one before kept for `previous=true`; a container of the inference image
//! serves the stand-in; any other container just keeps Running.

use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use kube::ResourceExt;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::pod_status::{PodStatus, Slot};
use super::ray_node::ray_start_log;
use super::worker::Worker;
use crate::controllers::config::RunMode;
use crate::controllers::container_env::{self, PodNetwork};
use crate::controllers::events::Kind;
use crate::controllers::names::{IS_RAY_NODE, NODE_TYPE, SUBMITTER_CONTAINER};
use crate::controllers::runner::{Exit, run_init_container};
use crate::controllers::submitter::Submitter;

impl Worker {
    /// Runs the pod until it completes, is deleted or the kubelet shuts down, then
    /// releases its volumes.
    pub(super) async fn run(self) {
        self.live().await;
        self.shared
            .attachments
            .detach_pod(&self.pod.uid().unwrap_or_default());
    }

    async fn live(&self) {
        let mut st = PodStatus::admitted(&self.pod, &self.node);
        self.push(&st).await;
        if !self.mount_volumes().await {
            return;
        }
        let init_cs = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.clone())
            .unwrap_or_default();
        for (i, c) in init_cs.iter().enumerate() {
            if !self.init_container(&mut st, i, c).await {
                return;
            }
        }
        if !self.start_containers(&mut st).await {
            return;
        }
        self.run_containers(st).await;
    }

    /// Runs init container `i` until it exits 0 (restarting it with back-off);
    /// `false` when the pod stops here (failed for good, or cancelled).
    async fn init_container(&self, st: &mut PodStatus, i: usize, c: &Container) -> bool {
        let field = format!("spec.initContainers{{{}}}", c.name);
        let restart_never = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            == Some("Never");
        let mut attempt = 0u32;
        loop {
            if !self.pull(st, Slot::Init(i), c, &field).await {
                return false;
            }
            let Some(env) = self.container_env(st, Slot::Init(i), c, &field).await else {
                return false;
            };
            if attempt > 0 {
                // A new instance: the one that failed becomes `previous=true`'s log.
                self.shared.logs.restart(&self.ns(), &self.name(), &c.name);
            }
            self.created_and_started(&field, &c.name).await;
            st.init[i].start();
            let started_at = st.init[i].started_at();
            self.push(st).await;
            let exit = self.exec_init(c, &env).await;
            self.shared.logs.close(&self.ns(), &self.name(), &c.name);
            let Some(code) = exit.code() else {
                return false;
            };
            let mut terminated = st.init[i].terminated(code, &started_at);
            if matches!(exit, Exit::OomKilled { .. }) {
                terminated["terminated"]["reason"] = json!("OOMKilled");
            }
            st.init[i].started = false;
            if code == 0 {
                st.init[i].state = terminated;
                st.init[i].ready = true;
                return true;
            }
            if restart_never {
                st.init[i].state = terminated;
                st.phase = "Failed";
                st.completed = true;
                self.push(st).await;
                return false;
            }
            st.init[i].state = terminated.clone();
            self.push(st).await;
            let wait = self.backoff(attempt);
            let (uid, name, ns) = (self.pod.uid().unwrap_or_default(), self.name(), self.ns());
            let msg = format!(
                "Back-off restarting failed container {} in pod {name}_{ns}({uid})",
                c.name
            );
            self.event(&field, Kind::Warning, "BackOff", &msg).await;
            let s = &mut st.init[i];
            s.last_state = terminated;
            s.restarts += 1;
            s.state = json!({"waiting": {"reason": "CrashLoopBackOff", "message":
                format!("back-off {}s restarting failed container={} pod={name}_{ns}({uid})", wait.as_secs(), c.name)}});
            self.push(st).await;
            if !self.sleep(wait).await {
                return false;
            }
            attempt += 1;
        }
    }

    /// The environment of container `c` (status `slot`, event field `field`): built
    /// when it resolves, after `CreateContainerConfigError` while it does not; `None`
    /// when cancelled.
    pub(super) async fn container_env(
        &self,
        st: &mut PodStatus,
        slot: Slot,
        c: &Container,
        field: &str,
    ) -> Option<Vec<(String, String)>> {
        let net = PodNetwork {
            pod_ip: st.pod_ip.clone(),
            host_ip: st.host_ip.clone(),
        };
        let mut told: Option<String> = None;
        let mut delay = Duration::from_millis(200);
        loop {
            match container_env::resolve(&self.shared.client, &self.pod, c, &net).await {
                Ok(env) => return Some(env),
                Err(e) => {
                    let msg = e.to_string();
                    if told.as_deref() != Some(msg.as_str()) {
                        st.container(slot).state = json!({"waiting": {
                            "reason": "CreateContainerConfigError", "message": msg}});
                        self.push(st).await;
                        self.event(field, Kind::Warning, "Failed", &format!("Error: {msg}"))
                            .await;
                        told = Some(msg);
                    }
                }
            }
            if !self.sleep(delay).await {
                return None;
            }
            delay = (delay * 2).min(Duration::from_secs(4));
        }
    }

    /// How one run of init container `c` with `env` ended.
    async fn exec_init(&self, c: &Container, env: &[(String, String)]) -> Exit {
        match &self.shared.cfg.mode {
            RunMode::Timed(_) => Exit::Code(0),
            RunMode::Process => {
                let cfg = &self.shared.cfg;
                run_init_container(
                    &cfg.scratch_root,
                    &self.shared.logs,
                    &self.pod,
                    c,
                    env,
                    &self.cancel,
                )
                .await
                .unwrap_or_else(|e| {
                    let line = format!("exec: {e}\n");
                    let (ns, name) = (self.ns(), self.name());
                    self.shared
                        .logs
                        .append(&ns, &name, &c.name, line.as_bytes());
                    Exit::Code(127)
                })
            }
        }
    }

    /// Pulls the app containers' images and starts them: Running, then Ready (after
    /// the timed model's start time). `false` when cancelled.
    async fn start_containers(&self, st: &mut PodStatus) -> bool {
        st.initialized = true;
        for m in &mut st.main {
            m.state = json!({"waiting": {"reason": "ContainerCreating"}});
        }
        self.push(st).await;
        let main_cs = self
            .pod
            .spec
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default();
        for (i, c) in main_cs.iter().enumerate() {
            let field = format!("spec.containers{{{}}}", c.name);
            if !self.pull(st, Slot::Main(i), c, &field).await {
                return false;
            }
            if self
                .container_env(st, Slot::Main(i), c, &field)
                .await
                .is_none()
            {
                return false;
            }
            let reason = st.main[i].state.pointer("/waiting/reason");
            if reason.and_then(serde_json::Value::as_str) == Some("CreateContainerConfigError") {
                st.main[i].state = json!({"waiting": {"reason": "ContainerCreating"}});
            }
        }
        for (i, c) in main_cs.iter().enumerate() {
            let field = format!("spec.containers{{{}}}", c.name);
            self.created_and_started(&field, &c.name).await;
            st.main[i].start();
        }
        st.phase = "Running";
        self.push(st).await;
        if let RunMode::Timed(m) = &self.shared.cfg.mode
            && m.start_secs > 0.0
            && !self.sleep(Duration::from_secs_f64(m.start_secs)).await
        {
            return false;
        }
        if self.inference_container().is_some() || (self.is_ray_node() && self.real_ray().is_some())
        {
            // Ready once the stand-in listens, or the Ray node passes KubeRay's
            // readiness probe (`run_containers`).
            return true;
        }
        for m in &mut st.main {
            m.ready = true;
        }
        st.ready = true;
        self.push(st).await;
        true
    }

    /// What the started containers do, until they end or the pod is deleted.
    async fn run_containers(&self, mut st: PodStatus) {
        if let Some((i, c)) = self.inference_container() {
            self.serve_inference(st, i, &c).await;
            return;
        }
        let first = st.main.first().map(|c| c.name.clone());
        if let Some(ray) = self.real_ray().cloned()
            && self.is_ray_node()
        {
            self.run_ray_node(st, &ray).await;
            return;
        }
        if first.as_deref() == Some(SUBMITTER_CONTAINER) {
            let code = match self.real_ray().cloned() {
                Some(ray) => self.run_ray_submitter(&mut st, &ray).await,
                None => {
                    Submitter::new(self.shared.clone(), &self.pod, self.cancel.clone())
                        .run()
                        .await
                }
            };
            let Some(code) = code else {
                return;
            };
            let s = &mut st.main[0];
            s.state = s.terminated(code, &s.started_at());
            s.ready = false;
            s.started = false;
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
            && let Some(c) = first
        {
            let head = self.pod.labels().get(NODE_TYPE).map(String::as_str) == Some("head");
            let log = ray_start_log(head, &st.pod_ip);
            self.shared
                .logs
                .append(&self.ns(), &self.name(), &c, log.as_bytes());
        }
        // Runs until the pod is deleted (its logs go with it); a container process mode
        // killed for its memory limit is restarted, as `restartPolicy: Always` does.
        let uid = self.pod.uid().unwrap_or_default();
        let mut ooms = self.shared.ooms.subscribe();
        loop {
            tokio::select! {
                () = self.cancel.cancelled() => return,
                kill = ooms.recv() => match kill {
                    Ok(k) if k.pod_uid == uid => {
                        self.oom_restart(&mut st, &k.container).await;
                        k.recorded.notify_one();
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => {
                        self.cancel.cancelled().await;
                        return;
                    }
                },
            }
        }
    }

    /// Container `name` was killed for going over its memory limit: `terminated`
    /// (`OOMKilled`, exit code 137) becomes its last state and it starts again.
    async fn oom_restart(&self, st: &mut PodStatus, name: &str) {
        let Some(i) = st.main.iter().position(|c| c.name == name) else {
            return;
        };
        let field = format!("spec.containers{{{name}}}");
        let s = &mut st.main[i];
        let mut terminated = s.terminated(137, &s.started_at());
        terminated["terminated"]["reason"] = json!("OOMKilled");
        s.last_state = terminated;
        s.restarts += 1;
        // The new instance logs afresh (the killed one's log is `previous=true`'s) and
        // a Ray node prints its `ray start` lines again.
        self.shared.logs.restart(&self.ns(), &self.name(), name);
        if self.pod.labels().get(IS_RAY_NODE).map(String::as_str) == Some("yes") && i == 0 {
            let head = self.pod.labels().get(NODE_TYPE).map(String::as_str) == Some("head");
            let log = ray_start_log(head, &st.pod_ip);
            self.shared
                .logs
                .append(&self.ns(), &self.name(), name, log.as_bytes());
        }
        self.created_and_started(&field, name).await;
        st.main[i].start();
        self.push(st).await;
    }
}
