//! Image pulls with a per-node image cache: `imagePullPolicy` (an image already on
//! the node is not pulled again unless the policy is `Always`), the simulated pull
//! time, and images in `ControllerConfig::failing_images` failing with `ErrImagePull`
//! then `ImagePullBackOff` and the kubelet back-off, with the real events.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Container;
use serde_json::json;

use super::pod_status::{PodStatus, Slot, normalize_image};
use super::worker::Worker;
use crate::controllers::events::Kind;

impl Worker {
    /// Pulls the image of container `c` (status `slot` of `st`, event field `field`);
    /// `false` when the worker was cancelled.
    pub(super) async fn pull(
        &self,
        st: &mut PodStatus,
        slot: Slot,
        c: &Container,
        field: &str,
    ) -> bool {
        let image = c.image.clone().unwrap_or_default();
        let policy = c.image_pull_policy.clone().unwrap_or_else(|| {
            if image.ends_with(":latest") || !image.rsplit('/').next().unwrap_or("").contains(':') {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        if self.cached(&image) && policy != "Always" {
            let msg = format!("Container image \"{image}\" already present on machine");
            self.event(field, Kind::Normal, "Pulled", &msg).await;
            return true;
        }
        let mut attempt = 0u32;
        loop {
            let pulling = format!("Pulling image \"{image}\"");
            self.event(field, Kind::Normal, "Pulling", &pulling).await;
            let started = Instant::now();
            if !self.sleep(self.shared.cfg.image_pull).await {
                return false;
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
                self.event(field, Kind::Normal, "Pulled", &msg).await;
                return true;
            }
            if !self.pull_failed(st, slot, field, &image, attempt).await {
                return false;
            }
            attempt += 1;
        }
    }

    fn cached(&self, image: &str) -> bool {
        self.images
            .lock()
            .expect("image cache lock")
            .contains(&(self.node.clone(), image.to_owned()))
    }

    /// After a failed pull: `ErrImagePull`, a short wait, `ImagePullBackOff`, then the
    /// back-off for `attempt`. `false` when the worker was cancelled meanwhile.
    async fn pull_failed(
        &self,
        st: &mut PodStatus,
        slot: Slot,
        field: &str,
        image: &str,
        attempt: u32,
    ) -> bool {
        let full = normalize_image(image);
        let msg = format!(
            "Failed to pull image \"{image}\": rpc error: code = NotFound desc = failed to pull and unpack image \"{full}\": failed to resolve reference \"{full}\": {full}: not found"
        );
        self.event(field, Kind::Warning, "Failed", &msg).await;
        self.event(field, Kind::Warning, "Failed", "Error: ErrImagePull")
            .await;
        st.container(slot).state = json!({"waiting": {"reason": "ErrImagePull", "message": msg}});
        self.push(st).await;
        if !self
            .sleep(Duration::from_millis(500).min(self.shared.cfg.backoff_base))
            .await
        {
            return false;
        }
        let backoff = format!("Back-off pulling image \"{image}\"");
        self.event(field, Kind::Normal, "BackOff", &backoff).await;
        self.event(field, Kind::Warning, "Failed", "Error: ImagePullBackOff")
            .await;
        st.container(slot).state = json!({"waiting": {"reason": "ImagePullBackOff",
            "message": format!("{backoff}: ErrImagePull: {msg}")}});
        self.push(st).await;
        self.sleep(self.backoff(attempt)).await
    }
}
