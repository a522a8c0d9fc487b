//! A container's memory limit, enforced on what process mode really runs (the Ray
//! driver, which runs "in" the head container). A real node's kernel kills a
//! container's processes when their cgroup goes over `limits.memory` (with cgroup v2
//! the kubelet sets `memory.oom.group`, so the whole container goes) and the kubelet
//! reports the container `terminated` with reason `OOMKilled`, exit code 137, then
//! restarts it. Here there are no cgroups to ask: the resident memory of the
//! container's process group is sampled from `/proc` and the group is killed when it
//! is over the limit; [`OomKills`] tells the pod's kubelet worker, which records the
//! kill in the container's status as a kubelet would.

use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use procfs::prelude::*;
use tokio::sync::broadcast;

use super::quantity::parse_milli;

/// How often the resident memory is sampled: an allocation faster than this can
/// overshoot the limit for a moment before the kill, as it cannot on a real node.
const SAMPLE: Duration = Duration::from_millis(100);

/// A container memory limit: bytes, and the quantity as the pod spec wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryLimit {
    /// The limit in bytes.
    pub bytes: u64,
    /// As written in the spec (`8Gi`).
    pub quantity: String,
}

impl MemoryLimit {
    /// The `limits.memory` of container `c`, if it has a valid one.
    pub fn of(c: &Container) -> Option<MemoryLimit> {
        let q = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
        let milli = parse_milli(&q.0).ok()?;
        let bytes = u64::try_from(milli / 1000).ok().filter(|b| *b > 0)?;
        Some(MemoryLimit {
            bytes,
            quantity: q.0.clone(),
        })
    }
}

/// Resident memory, in bytes, of every process in process group `pgid` (the
/// container's processes: they run in a group of their own).
pub fn group_rss(pgid: i32) -> u64 {
    let Ok(all) = procfs::process::all_processes() else {
        return 0;
    };
    all.filter_map(Result::ok)
        .filter_map(|p| p.stat().ok())
        .filter(|s| s.pgrp == pgid)
        .map(|s| s.rss_bytes().get())
        .sum()
}

/// Resolves, with the resident memory seen, once process group `pgid` is over `limit`
/// bytes. Never resolves while it stays under.
pub async fn exceeded(pgid: i32, limit: u64) -> u64 {
    loop {
        let rss = tokio::task::spawn_blocking(move || group_rss(pgid))
            .await
            .unwrap_or(0);
        if rss > limit {
            return rss;
        }
        tokio::time::sleep(SAMPLE).await;
    }
}

/// A container the memory limit killed.
#[derive(Debug, Clone)]
pub struct OomKill {
    /// The pod's UID.
    pub pod_uid: String,
    /// The container's name.
    pub container: String,
    /// Notified once the pod's status shows the kill.
    pub recorded: std::sync::Arc<tokio::sync::Notify>,
}

/// Where process mode reports the kills, for the pods' kubelet workers.
#[derive(Debug, Clone)]
pub struct OomKills(broadcast::Sender<OomKill>);

impl Default for OomKills {
    fn default() -> Self {
        OomKills(broadcast::channel(64).0)
    }
}

impl OomKills {
    /// Reports a kill (nobody listening: the pod is gone).
    pub fn report(&self, kill: OomKill) {
        let _ = self.0.send(kill);
    }

    /// The kills reported from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<OomKill> {
        self.0.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(limits: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "resources": {"limits": limits}}))
            .expect("container")
    }

    #[test]
    fn the_limit_is_read_from_the_container() {
        let l = MemoryLimit::of(&container(json!({"memory": "256Mi", "cpu": "1"})));
        assert_eq!(
            l,
            Some(MemoryLimit {
                bytes: 256 << 20,
                quantity: "256Mi".into()
            })
        );
        assert_eq!(MemoryLimit::of(&container(json!({"cpu": "1"}))), None);
        assert_eq!(MemoryLimit::of(&container(json!({"memory": "lots"}))), None);
    }

    #[tokio::test]
    async fn a_group_over_its_limit_is_seen_and_one_under_it_is_not() {
        let mut child = tokio::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("sleep");
        let pgid = i32::try_from(child.id().expect("pid")).expect("pid");
        // Right after exec the kernel's per-task RSS counters may not be folded into
        // what /proc reports yet (they are synced in batches): wait for a reading.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let rss = loop {
            let rss = group_rss(pgid);
            if rss > 0 || tokio::time::Instant::now() > deadline {
                break rss;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(
            rss > 0,
            "a running process shows resident memory within 10 s"
        );
        // Over a limit below what it uses: seen at the first sample.
        assert!(exceeded(pgid, rss / 2).await > rss / 2);
        // Under a generous limit: not within a few samples.
        let under = tokio::time::timeout(SAMPLE * 3, exceeded(pgid, 1 << 40)).await;
        assert!(under.is_err(), "a group under its limit is left alone");
        child.kill().await.expect("kill");
    }
}
