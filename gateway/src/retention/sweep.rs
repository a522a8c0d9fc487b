//! One retention sweep: rejected submissions, then archived logs, then capsules
//! (ownerships, stale claims, unowned bytes), then the measure of what object storage
//! holds. Every step is bounded ([`BATCH`] rows or one listing page) and checks the
//! leadership term before it deletes anything.

use std::time::Duration;

use forge_object_store::{
    CAPSULES, LOGS, MAX_LIST_PAGE, PLUGINS, capsule_key, digest_of_capsule_key, job_logs_prefix,
    log_index_key,
};

use super::{Retention, RetentionError};
use crate::domain::Digest;
use crate::leader::Term;
use crate::store::now_ms;

/// Rows one step deletes or reads.
const BATCH: u32 = 200;
/// Objects written this recently are never claimed: an upload stores its bytes before
/// it grants them, so a new object without an owner is an upload in flight.
const FRESH: Duration = Duration::from_secs(3600);
/// How long after its logs' period an ended job's archive may still be missing (its
/// clean-up runs after the end; a gateway that was down does it when it is back).
const ARCHIVE_GRACE: Duration = Duration::from_secs(3600);
/// A claim this old whose delete never finished belongs to a sweeper that stopped.
const STALE_CLAIM: Duration = Duration::from_secs(600);
/// Finished deletions are remembered this long (an upload that found the bytes just
/// before they went learns of it from its grant).
const REMEMBER_DELETED: Duration = Duration::from_secs(86_400);

/// What one sweep did and measured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    pub rejected_jobs: u64,
    pub job_logs: u64,
    pub capsule_owners: u64,
    pub capsules: u64,
    pub capsule_bytes: u64,
    /// What object storage holds after the sweep, per kind: (objects, bytes).
    pub held: Vec<(&'static str, u64, u64)>,
}

impl Swept {
    /// Whether it deleted anything.
    pub fn deleted_anything(&self) -> bool {
        self.rejected_jobs + self.job_logs + self.capsule_owners + self.capsules > 0
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Retention {
    /// One sweep under `term`.
    pub async fn sweep(&self, term: &Term) -> Result<Swept, RetentionError> {
        let mut swept = Swept::default();
        if let Some(keep) = self.periods.rejected {
            swept.rejected_jobs = self.rejected(term, now_ms() - ms(keep)).await?;
        }
        if let Some(keep) = self.periods.logs {
            swept.job_logs = self.logs(term, now_ms() - ms(keep)).await?;
        }
        if let Some(keep) = self.periods.capsules {
            swept.capsule_owners = self.owners(term, now_ms() - ms(keep)).await?;
        }
        // Stored bytes no team owns any more go (when capsules have a period at all).
        let (capsules, bytes, held) = self.capsules(term, self.periods.capsules).await?;
        (swept.capsules, swept.capsule_bytes) = (capsules, bytes);
        swept.held.push(held);
        for (kind, prefix) in [("logs", LOGS), ("plugins", PLUGINS)] {
            let (objects, bytes) = self.measure(prefix).await?;
            swept.held.push((kind, objects, bytes));
        }
        for (kind, objects, bytes) in &swept.held {
            self.metrics.storage_held(kind, *objects, *bytes);
        }
        Ok(swept)
    }

    /// Rejected submissions recorded before `before_ms`.
    async fn rejected(&self, term: &Term, before_ms: i64) -> Result<u64, RetentionError> {
        let mut total = 0;
        loop {
            term.check("retention: rejected jobs")?;
            let n = self.store.purge_rejected(before_ms, BATCH).await?;
            total += n;
            self.metrics.retention_deleted("rejected-jobs", n);
            if n < u64::from(BATCH) {
                return Ok(total);
            }
        }
    }

    /// The archived logs of jobs that ended before `before_ms`. A job whose archive is
    /// not complete yet (no `pods.json`) is left for a later sweep while its clean-up
    /// may still write it ([`ARCHIVE_GRACE`] after the period), so no archive is written
    /// after its deletion.
    async fn logs(&self, term: &Term, before_ms: i64) -> Result<u64, RetentionError> {
        let mut total = 0;
        loop {
            let due = self.store.logs_due(before_ms, BATCH).await?;
            let mut progressed = false;
            for (job, ended_ms) in &due {
                let archived = self
                    .objects
                    .object_len(&log_index_key(job)?)
                    .await?
                    .is_some();
                if !archived && *ended_ms > before_ms - ms(ARCHIVE_GRACE) {
                    continue;
                }
                term.check("retention: job logs")?;
                let prefix = job_logs_prefix(job)?;
                loop {
                    let page = self.objects.list_page(&prefix, None, MAX_LIST_PAGE).await?;
                    for o in &page {
                        self.objects.delete_object(&o.key).await?;
                    }
                    if page.len() < MAX_LIST_PAGE as usize {
                        break;
                    }
                }
                self.store.logs_deleted(job, now_ms()).await?;
                self.metrics.retention_deleted("job-logs", 1);
                total += 1;
                progressed = true;
            }
            if due.len() < BATCH as usize || !progressed {
                return Ok(total);
            }
        }
    }

    /// Capsule ownerships last used before `before_ms`.
    async fn owners(&self, term: &Term, before_ms: i64) -> Result<u64, RetentionError> {
        let mut total = 0;
        loop {
            term.check("retention: capsule owners")?;
            let n = self.store.expire_capsule_owners(before_ms, BATCH).await?;
            total += n;
            self.metrics.retention_deleted("capsule-owners", n);
            if n < u64::from(BATCH) {
                return Ok(total);
            }
        }
    }

    /// Deletes the bytes of `digest` if the claim succeeds; returns whether it did.
    async fn delete_capsule(&self, term: &Term, digest: &Digest) -> Result<bool, RetentionError> {
        term.check("retention: capsules")?;
        if !self.store.claim_capsule_deletion(digest, now_ms()).await? {
            return Ok(false);
        }
        self.objects
            .delete_object(&capsule_key(digest.as_str())?)
            .await?;
        self.store.capsule_deleted(digest, now_ms()).await?;
        self.metrics.retention_deleted("capsules", 1);
        Ok(true)
    }

    /// Finishes stale claims, then deletes the stored capsules no team owns and no live
    /// job uses (when `keep` is set: with ownership kept forever, nothing is unowned
    /// but capsules stored before ownership existed, which stay). Returns how many and
    /// how many bytes were deleted, and what is held afterwards.
    async fn capsules(
        &self,
        term: &Term,
        keep: Option<Duration>,
    ) -> Result<(u64, u64, (&'static str, u64, u64)), RetentionError> {
        let now = now_ms();
        for digest in self
            .store
            .stale_capsule_deletions(now - ms(STALE_CLAIM), BATCH)
            .await?
        {
            // Claimed again only if still unowned; otherwise an upload stored the bytes
            // again after the claim, and they stay.
            if !self.delete_capsule(term, &digest).await? {
                self.store.capsule_deleted(&digest, now_ms()).await?;
            }
        }
        self.store
            .prune_capsule_deletions(now - ms(REMEMBER_DELETED))
            .await?;
        let fresh_after = now - ms(FRESH.min(keep.unwrap_or(FRESH)));
        let (mut deleted, mut deleted_bytes, mut objects, mut bytes) = (0, 0, 0, 0);
        let mut after: Option<String> = None;
        loop {
            let page = self
                .objects
                .list_page(CAPSULES, after.as_deref(), MAX_LIST_PAGE)
                .await?;
            for o in &page {
                let digest = digest_of_capsule_key(&o.key).and_then(|d| Digest::parse(d).ok());
                let due = keep.is_some() && o.modified_ms < fresh_after;
                match digest {
                    Some(d) if due && self.delete_capsule(term, &d).await? => {
                        deleted += 1;
                        deleted_bytes += o.size;
                    }
                    _ => {
                        objects += 1;
                        bytes += o.size;
                    }
                }
            }
            match page.last() {
                Some(last) if page.len() >= MAX_LIST_PAGE as usize => {
                    after = Some(last.key.clone())
                }
                _ => return Ok((deleted, deleted_bytes, ("capsules", objects, bytes))),
            }
        }
    }

    /// How many objects, of how many bytes, are under `prefix`.
    async fn measure(&self, prefix: &str) -> Result<(u64, u64), RetentionError> {
        let (mut objects, mut bytes) = (0, 0);
        let mut after: Option<String> = None;
        loop {
            let page = self
                .objects
                .list_page(prefix, after.as_deref(), MAX_LIST_PAGE)
                .await?;
            objects += page.len() as u64;
            bytes += page.iter().map(|o| o.size).sum::<u64>();
            match page.last() {
                Some(last) if page.len() >= MAX_LIST_PAGE as usize => {
                    after = Some(last.key.clone())
                }
                _ => return Ok((objects, bytes)),
            }
        }
    }
}
