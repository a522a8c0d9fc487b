//! A container of the inference image in process mode
//! ([`ControllerConfig::inference_image`](crate::ControllerConfig::inference_image)):
//! the kubelet runs the [`Standin`] for it with the container's argv and environment,
//! registers where it listens as the pod's container port (so `pods/proxy` reaches
//! it), and reports the pod Ready only once the server listens — i.e. after the model
//! has "loaded", as a readiness probe on vLLM's `/health` would.
//!
//! A model given as a local path (`vllm serve /starforge/ckpt/run-7`) must be a
//! directory with a `config.json` in one of the container's volumes, as vLLM needs:
//! otherwise the server exits 1 with vLLM's complaint and the kubelet restarts it
//! under back-off (`CrashLoopBackOff`), as a real server without its model would.

use k8s_openapi::api::core::v1::Container;
use kube::ResourceExt;
use serde_json::json;

use super::pod_status::{PodStatus, Slot};
use super::worker::Worker;
use crate::controllers::config::RunMode;
use crate::controllers::container_env::expand;
use crate::controllers::events::Kind;
use crate::controllers::hostpaths::map_path;
use crate::inference::{Standin, StandinOptions};

impl Worker {
    /// The first app container of the inference image (process mode only).
    pub(super) fn inference_container(&self) -> Option<(usize, Container)> {
        let image = self.shared.cfg.inference_image.as_deref()?;
        if !matches!(self.shared.cfg.mode, RunMode::Process) {
            return None;
        }
        self.pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .enumerate()
            .find(|(_, c)| c.image.as_deref() == Some(image))
            .map(|(i, c)| (i, c.clone()))
    }

    /// Runs the stand-in of container `i` until the pod is deleted.
    pub(super) async fn serve_inference(&self, mut st: PodStatus, i: usize, c: &Container) {
        let field = format!("spec.containers{{{}}}", c.name);
        let Some(env) = self.container_env(&mut st, Slot::Main(i), c, &field).await else {
            return;
        };
        let argv: Vec<String> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .map(|a| expand(a, &env))
            .collect();
        let opts = StandinOptions::parse(&argv, &env);
        let (ns, name) = (self.ns(), self.name());
        let log = |line: String| {
            self.shared
                .logs
                .append(&ns, &name, &c.name, format!("{line}\n").as_bytes());
        };
        if let Some(problem) = self.missing_model(c, &opts.model) {
            self.crash_loop(st, i, c, &problem).await;
            return;
        }
        log(format!(
            "INFO stand-in for vLLM: loading model {} (served as {})",
            opts.model, opts.served_name
        ));
        let port = opts.port;
        match Standin::start(opts, self.cancel.clone()).await {
            Ok(Some(server)) => {
                self.shared
                    .endpoints
                    .register(&ns, &name, port, server.addr());
                log(format!(
                    "INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)"
                ));
                for m in &mut st.main {
                    m.ready = true;
                }
                st.ready = true;
                self.push(&st).await;
                self.cancel.cancelled().await;
                self.shared.endpoints.remove_pod(&ns, &name);
            }
            Ok(None) => {}
            Err(e) => {
                log(format!("ERROR stand-in could not listen: {e}"));
                let s = &mut st.main[i];
                s.state = s.terminated(1, &s.started_at());
                s.ready = false;
                s.started = false;
                st.ready = false;
                st.main[i].state["terminated"]["reason"] = json!("Error");
                self.push(&st).await;
                self.cancel.cancelled().await;
            }
        }
    }

    /// Why a local model path cannot be served (`None`: a model id, or a directory with
    /// a `config.json` in one of the container's volumes).
    fn missing_model(&self, c: &Container, model: &str) -> Option<String> {
        if !model.starts_with('/') {
            return None;
        }
        let mounts = c.volume_mounts.clone().unwrap_or_default();
        let dir = map_path(&self.shared.cfg.scratch_root, &self.pod, &mounts, model);
        match dir {
            Some(d) if d.join("config.json").is_file() => None,
            Some(_) => Some(format!(
                "OSError: {model} does not appear to have a file named config.json"
            )),
            None => Some(format!(
                "OSError: {model} is not a local folder and is not a valid model identifier"
            )),
        }
    }

    /// Container `i` exits 1 (after logging `problem`), again at every restart under
    /// back-off, until the pod goes: the kubelet's `CrashLoopBackOff` for a server that
    /// cannot start.
    async fn crash_loop(&self, mut st: PodStatus, i: usize, c: &Container, problem: &str) {
        let field = format!("spec.containers{{{}}}", c.name);
        let (uid, name, ns) = (self.pod.uid().unwrap_or_default(), self.name(), self.ns());
        let mut attempt = 0u32;
        loop {
            self.shared.logs.append(
                &ns,
                &name,
                &c.name,
                format!("ERROR stand-in for vLLM: {problem}\n").as_bytes(),
            );
            self.shared.logs.close(&ns, &name, &c.name);
            let s = &mut st.main[i];
            let terminated = s.terminated(1, &s.started_at());
            s.ready = false;
            s.started = false;
            s.state = terminated.clone();
            st.ready = false;
            self.push(&st).await;
            let wait = self.backoff(attempt);
            let msg = format!(
                "Back-off restarting failed container {} in pod {name}_{ns}({uid})",
                c.name
            );
            self.event(&field, Kind::Warning, "BackOff", &msg).await;
            let s = &mut st.main[i];
            s.last_state = terminated;
            s.restarts += 1;
            s.state = json!({"waiting": {"reason": "CrashLoopBackOff", "message":
                format!("back-off {}s restarting failed container={} pod={name}_{ns}({uid})", wait.as_secs(), c.name)}});
            self.push(&st).await;
            if !self.sleep(wait).await {
                return;
            }
            attempt += 1;
            // The new instance logs afresh (`previous=true` reads the last one).
            self.shared.logs.restart(&ns, &name, &c.name);
            self.created_and_started(&field, &c.name).await;
            st.main[i].start();
            self.push(&st).await;
        }
    }
}
