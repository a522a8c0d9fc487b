//! A container of the inference image in process mode
//! ([`ControllerConfig::inference_image`](crate::ControllerConfig::inference_image)):
//! the kubelet runs the [`Standin`] for it with the container's argv and environment,
//! registers where it listens as the pod's container port (so `pods/proxy` reaches
//! it), and reports the pod Ready only once the server listens — i.e. after the model
//! has "loaded", as a readiness probe on vLLM's `/health` would.

use k8s_openapi::api::core::v1::Container;
use serde_json::json;

use super::pod_status::{PodStatus, Slot};
use super::worker::Worker;
use crate::controllers::config::RunMode;
use crate::controllers::container_env::expand;
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
}
