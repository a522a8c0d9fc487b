//! Real Ray in process mode ([`ControllerConfig::ray`](crate::ControllerConfig::ray)):
//! a Ray node container runs the command KubeRay generated (`ulimit -n 65536; ray
//! start [--head] … --block`) with the installed Ray, on ports of its own
//! ([`NodePorts`], added by the pod's `ray` in [`image`]) with a temp dir of its own
//! ([`RayTempDir`], removed when the node stops); a submitter container runs
//! KubeRay's `ray job submit` / `ray job logs --follow` script against its head's real
//! dashboard. Every `host:port` a command or variable names goes through the emulated
//! pod network ([`PodDns`]); paths under the head's volume mounts (a `file://`
//! capsule, an entrypoint's ConfigMap file) become their host directories.
//!
//! Readiness follows KubeRay's probes: a worker is Ready once its raylet is healthy
//! (`/api/local_raylet_healthz` on its dashboard agent), a head once that and its GCS
//! (`/api/gcs_healthz` on the dashboard) are. A node whose process ends is restarted
//! under back-off, as `restartPolicy: Always` does; deleting the pod kills its process
//! group, and the fate-sharing supervisor kills it should the emulator go away.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;

use super::pod_status::{PodStatus, Slot};
use super::worker::Worker;
use crate::controllers::config::RunMode;
use crate::controllers::container_env::expand;
use crate::controllers::events::Kind;
use crate::controllers::hostpaths::rewrite_mounts;
use crate::controllers::memory_limit::MemoryLimit;
use crate::controllers::names::{IS_RAY_NODE, NODE_TYPE, RAY_CLUSTER, cluster_from_dashboard};
use crate::controllers::ray::dns::PodDns;
use crate::controllers::ray::image::pod_bin;
use crate::controllers::ray::install::RayInstall;
use crate::controllers::ray::ports::NodePorts;
use crate::controllers::ray::temp_dir::{CLEAN_ENV, RayTempDir};
use crate::controllers::runner::{Exit, container_command, run_logged};

/// How often a held-back process looks again for the Services it names.
const RESOLVE_EVERY: Duration = Duration::from_millis(250);
/// How often readiness is probed (KubeRay's probes: every 5 s; faster here).
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// A container's argv and environment, ready to run on the host.
struct Prepared {
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

impl Worker {
    /// The Ray installation, when this kubelet runs real Ray (process mode).
    pub(super) fn real_ray(&self) -> Option<&RayInstall> {
        match self.shared.cfg.mode {
            RunMode::Process => self.shared.cfg.ray.as_ref(),
            RunMode::Timed(_) => None,
        }
    }

    /// Whether the pod is a Ray node (head or worker).
    pub(super) fn is_ray_node(&self) -> bool {
        self.pod.labels().get(IS_RAY_NODE).map(String::as_str) == Some("yes")
    }

    fn is_head(&self) -> bool {
        self.pod.labels().get(NODE_TYPE).map(String::as_str) == Some("head")
    }

    fn first_container(&self) -> Option<Container> {
        self.pod.spec.as_ref()?.containers.first().cloned()
    }

    /// Runs the Ray node of container 0 until the pod is deleted.
    pub(super) async fn run_ray_node(&self, mut st: PodStatus, ray: &RayInstall) {
        let Some(c) = self.first_container() else {
            return;
        };
        let field = format!("spec.containers{{{}}}", c.name);
        let (ns, pod, uid) = (self.ns(), self.name(), self.pod.uid().unwrap_or_default());
        let head = self.is_head();
        let mut attempt = 0u32;
        loop {
            let Some(env) = self.container_env(&mut st, Slot::Main(0), &c, &field).await else {
                return;
            };
            let exit = match self.ray_node_once(&mut st, ray, &c, env, head).await {
                Ok(exit) => exit,
                Err(e) => {
                    let line = format!("forge-kubesim: cannot start the Ray node: {e}\n");
                    self.shared.logs.append(&ns, &pod, &c.name, line.as_bytes());
                    Exit::Code(127)
                }
            };
            self.shared.endpoints.remove_pod(&ns, &pod);
            let Some(code) = exit.code() else {
                return;
            };
            // Ended by itself: restarted under back-off (`restartPolicy: Always`).
            let s = &mut st.main[0];
            let mut terminated = s.terminated(code, &s.started_at());
            if matches!(exit, Exit::OomKilled { .. }) {
                terminated["terminated"]["reason"] = json!("OOMKilled");
            }
            s.last_state = terminated.clone();
            s.state = terminated;
            s.ready = false;
            s.restarts += 1;
            st.ready = false;
            self.push(&st).await;
            let wait = self.backoff(attempt);
            let msg = format!(
                "Back-off restarting failed container {} in pod {pod}_{ns}({uid})",
                c.name
            );
            self.event(&field, Kind::Warning, "BackOff", &msg).await;
            if !self.sleep(wait).await {
                return;
            }
            attempt += 1;
            self.shared.logs.restart(&ns, &pod, &c.name);
            self.created_and_started(&field, &c.name).await;
            st.main[0].start();
            self.push(&st).await;
        }
    }

    /// One run of a Ray node: ports, its `ray`, the command once every Service it names
    /// resolves, Ready when healthy; how it ended.
    async fn ray_node_once(
        &self,
        st: &mut PodStatus,
        ray: &RayInstall,
        c: &Container,
        env: Vec<(String, String)>,
        head: bool,
    ) -> std::io::Result<Exit> {
        let (ns, pod, uid) = (self.ns(), self.name(), self.pod.uid().unwrap_or_default());
        let ports = NodePorts::allocate()?;
        for (container_port, addr) in ports.container_ports(head) {
            self.shared
                .endpoints
                .register(&ns, &pod, container_port, addr);
        }
        let temp = RayTempDir::create()?;
        let mut flags = ports.flags(head);
        flags.push(temp.flag());
        let root = &self.shared.cfg.scratch_root;
        let bin = pod_bin(root, &uid, ray, Some(&flags))?;
        let Some(mut prepared) = self.prepare(c, env, &self.pod, &bin, ray).await else {
            return Ok(Exit::Cancelled);
        };
        let remove = temp.path().display().to_string();
        prepared.env.push((CLEAN_ENV.to_owned(), remove));
        // The pip cache of Ray's runtime-env agent: one per emulator, under its scratch
        // root (an image's own, not the host user's `~/.cache`), unless the pod sets one.
        if !prepared.env.iter().any(|(k, _)| k == "PIP_CACHE_DIR") {
            let cache = root.join("pip-cache").display().to_string();
            prepared.env.push(("PIP_CACHE_DIR".to_owned(), cache));
        }
        let cmd = self.supervised(ray, &bin, prepared);
        let cluster = self
            .pod
            .labels()
            .get(RAY_CLUSTER)
            .cloned()
            .unwrap_or_default();
        let dashboard = ports.at(ports.dashboard);
        if head {
            self.shared
                .dashboard
                .register_head(&ns, &cluster, dashboard);
        }
        let limit = MemoryLimit::of(c).map(|l| l.bytes);
        let logs = &self.shared.logs;
        let run = run_logged(cmd, logs, (&ns, &pod, &c.name), &self.cancel, None, limit);
        tokio::pin!(run);
        let healthy = healthy(&ports, head);
        tokio::pin!(healthy);
        let mut ready = false;
        loop {
            tokio::select! {
                exit = &mut run => {
                    if head {
                        self.shared.dashboard.unregister_head(&ns, &cluster, dashboard);
                    }
                    return exit;
                }
                () = &mut healthy, if !ready => {
                    ready = true;
                    st.main[0].ready = true;
                    st.ready = st.main.iter().all(|m| m.ready);
                    self.push(st).await;
                }
            }
        }
    }

    /// Runs KubeRay's submitter script of container 0 against the real head; its
    /// exit code (`None`: the pod was deleted).
    pub(super) async fn run_ray_submitter(
        &self,
        st: &mut PodStatus,
        ray: &RayInstall,
    ) -> Option<i32> {
        let c = self.first_container()?;
        let field = format!("spec.containers{{{}}}", c.name);
        let env = self.container_env(st, Slot::Main(0), &c, &field).await?;
        let (ns, pod, uid) = (self.ns(), self.name(), self.pod.uid().unwrap_or_default());
        let dashboard = env
            .iter()
            .find(|(k, _)| k == "RAY_DASHBOARD_ADDRESS")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        // The driver runs on the head: paths in the script (a `file://` capsule, the
        // entrypoint's files) are the head's.
        let head = match cluster_from_dashboard(&dashboard) {
            Some(cluster) => self.head_pod(&ns, cluster).await,
            None => None,
        };
        let root = &self.shared.cfg.scratch_root;
        let bin = match pod_bin(root, &uid, ray, None) {
            Ok(bin) => bin,
            Err(e) => {
                let line = format!("forge-kubesim: cannot run the submitter: {e}\n");
                self.shared.logs.append(&ns, &pod, &c.name, line.as_bytes());
                return Some(127);
            }
        };
        let prepared = self
            .prepare(&c, env, head.as_ref().unwrap_or(&self.pod), &bin, ray)
            .await?;
        let cmd = self.supervised(ray, &bin, prepared);
        let logs = &self.shared.logs;
        let exit = run_logged(cmd, logs, (&ns, &pod, &c.name), &self.cancel, None, None).await;
        match exit {
            Ok(exit) => exit.code(),
            Err(e) => {
                let line = format!("exec: {e}\n");
                self.shared.logs.append(&ns, &pod, &c.name, line.as_bytes());
                Some(127)
            }
        }
    }

    async fn head_pod(&self, ns: &str, cluster: &str) -> Option<Pod> {
        let pods: Api<Pod> = Api::namespaced(self.shared.client.clone(), ns);
        let lp = ListParams::default().labels(&format!("{RAY_CLUSTER}={cluster},{NODE_TYPE}=head"));
        pods.list(&lp).await.ok()?.items.into_iter().next()
    }

    /// Container `c`'s argv and `env`, `$(VAR)`-expanded, with paths under `paths_of`'s
    /// first container's mounts mapped to the host and every address through the pod
    /// network, once every Service they name resolves (`None`: cancelled first).
    /// `PATH` starts with the pod's `bin`, then the Ray installation's.
    async fn prepare(
        &self,
        c: &Container,
        env: Vec<(String, String)>,
        paths_of: &Pod,
        bin: &Path,
        ray: &RayInstall,
    ) -> Option<Prepared> {
        let root = &self.shared.cfg.scratch_root;
        let mounts = paths_of
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.volume_mounts.clone())
            .unwrap_or_default();
        let argv: Vec<String> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .map(|a| rewrite_mounts(root, paths_of, &mounts, &expand(a, &env)))
            .collect();
        let env: Vec<(String, String)> = env
            .into_iter()
            .map(|(k, v)| {
                let v = rewrite_mounts(root, paths_of, &mounts, &v);
                (k, v)
            })
            .collect();
        let (ns, pod) = (self.ns(), self.name());
        let dns = PodDns {
            client: &self.shared.client,
            endpoints: &self.shared.endpoints,
            ns: &ns,
            pod: &pod,
        };
        let mut told = false;
        loop {
            let mut unresolved = Vec::new();
            let mut out = Prepared {
                argv: Vec::new(),
                env: Vec::new(),
            };
            for a in &argv {
                let r = dns.rewrite(a).await;
                unresolved.extend(r.unresolved);
                out.argv.push(r.text);
            }
            for (k, v) in &env {
                let r = dns.rewrite(v).await;
                unresolved.extend(r.unresolved);
                out.env.push((k.clone(), r.text));
            }
            if unresolved.is_empty() {
                let host = std::env::var_os("PATH").unwrap_or_default();
                let dirs = [bin.to_path_buf(), ray.bin.clone()]
                    .into_iter()
                    .chain(self.shared.cfg.image_path.iter().cloned())
                    .chain(std::env::split_paths(&host));
                let path = std::env::join_paths(dirs).ok()?;
                out.env.retain(|(k, _)| k != "PATH");
                out.env
                    .push(("PATH".into(), path.to_string_lossy().into_owned()));
                return Some(out);
            }
            if !told {
                told = true;
                let line = format!(
                    "forge-kubesim: waiting for {} to resolve (no ready endpoint yet)\n",
                    unresolved.join(", ")
                );
                self.shared.logs.append(&ns, &pod, &c.name, line.as_bytes());
            }
            if !self.sleep(RESOLVE_EVERY).await {
                return None;
            }
        }
    }

    /// `prepared` under the fate-sharing supervisor, with the container's base
    /// environment, in the pod's scratch directory.
    fn supervised(
        &self,
        ray: &RayInstall,
        bin: &Path,
        prepared: Prepared,
    ) -> tokio::process::Command {
        let mut cmd = container_command(&ray.python().to_string_lossy(), &self.name());
        cmd.arg(bin.join("fate_share.py"));
        cmd.args(&prepared.argv);
        for (k, v) in &prepared.env {
            cmd.env(k, v);
        }
        if let Some(dir) = bin.parent() {
            cmd.current_dir(dir);
        }
        cmd
    }
}

/// Resolves once the node passes KubeRay's readiness probe: the raylet's health on the
/// dashboard agent, and for a head the GCS's on the dashboard.
async fn healthy(ports: &NodePorts, head: bool) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .no_proxy()
        .build()
        .unwrap_or_default();
    let mut urls = vec![format!(
        "http://{}/api/local_raylet_healthz",
        ports.at(ports.agent_http)
    )];
    if head {
        urls.push(format!(
            "http://{}/api/gcs_healthz",
            ports.at(ports.dashboard)
        ));
    }
    loop {
        let mut ok = true;
        for url in &urls {
            let passed = match client.get(url).send().await {
                Ok(r) if r.status().is_success() => {
                    r.text().await.is_ok_and(|t| t.contains("success"))
                }
                _ => false,
            };
            ok &= passed;
        }
        if ok {
            return;
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}
