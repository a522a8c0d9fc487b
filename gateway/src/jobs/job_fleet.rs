//! Which cluster a job's objects are in: the fleet its dispatch recorded (issue 42).
//! Everything that reads or changes a dispatched job's RayJob, pods, events or logs
//! finds its cluster here, so no path addresses the wrong fleet.

use super::error::JobError;
use crate::cluster::{Cluster, Fleets};
use crate::store::JobRecord;

/// The cluster of `job`'s fleet (a job recorded without one ran when the gateway drove
/// one cluster: the first fleet's); an error when that fleet is no longer configured.
pub(crate) fn cluster_of<'a>(fleets: &'a Fleets, job: &JobRecord) -> Result<&'a Cluster, JobError> {
    fleets
        .of_job(job.fleet.as_deref())
        .ok_or_else(|| JobError::FleetGone {
            id: job.id.clone(),
            fleet: job.fleet.clone().unwrap_or_default(),
        })
}
