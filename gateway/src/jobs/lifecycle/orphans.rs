//! Foreign RayJobs: Forge-managed RayJobs (`app.kubernetes.io/managed-by=forge-gateway`)
//! that this installation cannot prove it created — of another installation, of no
//! installation (created before identities existed, or by hand), of its own identity
//! but for a job its store does not know (a store restored from an old backup), or for
//! a job the store records in another fleet. Every fleet is scanned; each orphan names
//! its fleet.
//!
//! They are **reported, never deleted**: a warning when one is first seen, the gauge
//! `forge_foreign_rayjobs{reason}`, and `GET /v1/admin/orphans` (admins; a fresh scan).
//! Every replica scans every [`SCAN_EVERY`] (a metadata-only LIST by label, and one
//! batched store read): the report is the same whichever replica is asked.

use std::time::Duration;

use kube::ResourceExt;
use serde::Serialize;

use super::Lifecycle;
use super::owners::job_id_of;
use crate::cluster::labels::instance_of;
use crate::jobs::error::JobError;

/// How often each replica scans.
pub const SCAN_EVERY: Duration = Duration::from_secs(10);

/// Why a RayJob is foreign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// It carries another installation's identity.
    OtherInstance,
    /// It carries no installation identity.
    NoInstance,
    /// It carries this installation's identity, but no job of the store owns it.
    UnknownJob,
    /// Its job is the store's, but was dispatched to another fleet.
    OtherFleet,
}

impl Reason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::OtherInstance => "other-instance",
            Reason::NoInstance => "no-instance",
            Reason::UnknownJob => "unknown-job",
            Reason::OtherFleet => "other-fleet",
        }
    }

    const ALL: [Reason; 4] = [
        Reason::OtherInstance,
        Reason::NoInstance,
        Reason::UnknownJob,
        Reason::OtherFleet,
    ];
}

/// One foreign RayJob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Orphan {
    /// The fleet it is in.
    pub fleet: String,
    /// The RayJob's name.
    pub name: String,
    /// Its installation label, if any.
    pub instance: Option<String>,
    /// Its job-id label, if any.
    pub job_id: Option<String>,
    /// Why it is foreign.
    pub reason: Reason,
    /// Its creation time (RFC 3339), if known.
    pub created: Option<String>,
}

/// A scan's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrphanReport {
    /// This installation's identity.
    pub instance: String,
    /// Forge-managed RayJobs seen in the fleets' namespaces.
    pub managed: usize,
    /// The ones this installation does not own.
    pub orphans: Vec<Orphan>,
}

impl Lifecycle {
    /// Scans every fleet's Forge-managed RayJobs now.
    pub async fn orphans(&self) -> Result<OrphanReport, JobError> {
        let mut report = OrphanReport {
            instance: self.fleets.first().rayjobs.instance().to_string(),
            managed: 0,
            orphans: Vec::new(),
        };
        for fleet in self.fleets.iter() {
            self.following(fleet).orphans_here(&mut report).await?;
        }
        Ok(report)
    }

    /// Adds the followed fleet's Forge-managed RayJobs to `report`.
    async fn orphans_here(&self, report: &mut OrphanReport) -> Result<(), JobError> {
        let rayjobs = &self.cluster.rayjobs;
        let all = rayjobs.list_managed().await?;
        let own: Vec<_> = all
            .iter()
            .filter(|obj| instance_of(*obj) == Some(rayjobs.instance()))
            .cloned()
            .collect();
        let known = self.owners_of(&own).await?;
        for obj in &all {
            let instance = instance_of(obj).map(str::to_string);
            let job_id = job_id_of(obj).map(str::to_string);
            let reason = match instance.as_deref() {
                None => Some(Reason::NoInstance),
                Some(i) if i != rayjobs.instance() => Some(Reason::OtherInstance),
                Some(_) => match job_id.as_ref().and_then(|id| known.get(id)) {
                    None => Some(Reason::UnknownJob),
                    Some(job) if !self.follows(job) => Some(Reason::OtherFleet),
                    Some(_) => None,
                },
            };
            if let Some(reason) = reason {
                report.orphans.push(Orphan {
                    fleet: self.cluster.fleet.clone(),
                    name: obj.name_any(),
                    instance,
                    job_id,
                    reason,
                    created: obj
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.to_string()),
                });
            }
        }
        report.managed += all.len();
        Ok(())
    }

    /// One scan: the gauge, and a warning for each RayJob seen for the first time.
    async fn scan_orphans(&self) -> Result<(), JobError> {
        let report = self.orphans().await?;
        let counts: Vec<(&'static str, u64)> = Reason::ALL
            .iter()
            .map(|r| {
                let n = report.orphans.iter().filter(|o| o.reason == *r).count();
                (r.as_str(), n as u64)
            })
            .collect();
        self.core.metrics.foreign_rayjobs(&counts);
        let Ok(mut logged) = self.reported_orphans.lock() else {
            return Ok(());
        };
        for o in &report.orphans {
            if logged.insert(format!("{}/{}", o.fleet, o.name)) {
                tracing::warn!(
                    fleet = %o.fleet,
                    rayjob = %o.name,
                    instance = o.instance.as_deref().unwrap_or("-"),
                    job = o.job_id.as_deref().unwrap_or("-"),
                    reason = o.reason.as_str(),
                    "a Forge-managed RayJob this installation did not create (or of no job it \
                     knows): reported, not deleted (GET /v1/admin/orphans)"
                );
            }
        }
        logged.retain(|key| {
            report
                .orphans
                .iter()
                .any(|o| *key == format!("{}/{}", o.fleet, o.name))
        });
        Ok(())
    }
}

/// Scans every [`SCAN_EVERY`] until the task is aborted.
pub fn spawn(jobs: Lifecycle) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SCAN_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = jobs.scan_orphans().await {
                tracing::warn!("scanning for foreign RayJobs: {e}");
            }
        }
    })
}
