//! The one place Forge talks to the API server about RayJobs: create (adopting one that
//! exists — names are deterministic per job), delete, read, list this installation's
//! own (`forge.dev/instance` = the store's identity) or every Forge-managed one (to
//! report foreign ones; metadata only). Transient API failures are retried here, so callers only see
//! lasting ones — but a create that may have taken effect is looked up, not resent
//! blindly (`create_or_adopt`): a resent create of a RayJob that already ran and was
//! deleted would run its job twice.

use kube::api::{DeleteParams, ListParams, PartialObjectMeta, PostParams};
use kube::{Api, Client};

use super::api_error::{Backoff, Failure, classify, throttled, with_retry};
use super::labels;
use super::rayjob_crd::RayJob;

/// What a create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// A new RayJob.
    New,
    /// One of that name existed (a retry or a restart): adopted.
    Adopted,
}

/// A RayJob create that did not succeed, by what is known of the RayJob.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The API server refused it (invalid, forbidden, too large): the same create
    /// would be refused again.
    #[error("{0}")]
    Refused(kube::Error),
    /// It does not exist: looked up after the failed create (or the create was
    /// throttled, which takes no effect).
    #[error("{0}")]
    NotCreated(kube::Error),
    /// Unknown: the lookup after the failed create failed too.
    #[error("{0}")]
    Unknown(kube::Error),
}

/// RayJobs in the gateway's namespace.
#[derive(Clone)]
pub struct RayJobs {
    api: Api<RayJob>,
    instance: String,
}

impl std::fmt::Debug for RayJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RayJobs")
    }
}

impl RayJobs {
    /// The RayJobs of `namespace`, as installation `instance` sees them.
    pub fn new(client: Client, namespace: &str, instance: &str) -> Self {
        RayJobs {
            api: Api::namespaced(client, namespace),
            instance: instance.to_string(),
        }
    }

    /// The installation identity this gateway labels its RayJobs with.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether `rayjob` carries this installation's identity.
    pub fn is_own(&self, rayjob: &RayJob) -> bool {
        labels::instance_of(rayjob) == Some(self.instance.as_str())
    }

    /// Selector of this installation's RayJobs (the lifecycle controller's watch).
    pub fn own_selector(&self) -> String {
        labels::instance_selector(&self.instance)
    }

    /// The typed API (for watchers).
    pub fn api(&self) -> &Api<RayJob> {
        &self.api
    }

    /// Creates `rayjob`, or adopts the one with its name (AlreadyExists).
    ///
    /// A create that fails without proof of its outcome (a server error, a lost
    /// connection, an answer that cannot be read) may have taken effect, so it is never
    /// simply sent again: the RayJob is first looked up by name. Found (this
    /// installation's): adopted. Absent: sent again only while `unseen()` says no
    /// RayJob of the job has been seen — one an earlier attempt created may have run
    /// and been deleted since, and a new one would run the job twice (then it counts
    /// as adopted). A throttled create (429) took no effect and is sent again as it is.
    /// A lasting failure says what is known of the RayJob ([`CreateError`]).
    pub async fn create_or_adopt<F, Fut>(
        &self,
        rayjob: &RayJob,
        mut unseen: F,
    ) -> Result<Created, CreateError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let pp = PostParams::default();
        let name = rayjob.metadata.name.clone().unwrap_or_default();
        let mut backoff = Backoff::default();
        loop {
            let e = match self.api.create(&pp, rayjob).await {
                Ok(_) => return Ok(Created::New),
                Err(e) => e,
            };
            let retry = match classify(&e) {
                Failure::AlreadyExists => return Ok(Created::Adopted),
                Failure::Refused => return Err(CreateError::Refused(e)),
                _ if throttled(&e) => true,
                failure => match self.get(&name).await {
                    Ok(Some(found)) if self.is_own(&found) => return Ok(Created::Adopted),
                    // Another installation's of that name: nothing of ours there.
                    Ok(Some(_)) => return Err(CreateError::NotCreated(e)),
                    Ok(None) if !unseen().await => return Ok(Created::Adopted),
                    Ok(None) => failure == Failure::Transient,
                    Err(_) => return Err(CreateError::Unknown(e)),
                },
            };
            if !retry || !backoff.next().await {
                return Err(CreateError::NotCreated(e));
            }
        }
    }

    /// Deletes a RayJob (background propagation: the operator's finalizer and the
    /// garbage collector remove its RayCluster, submitter Job and pods). Gone already
    /// is fine.
    pub async fn delete(&self, name: &str) -> Result<(), kube::Error> {
        let dp = DeleteParams::background();
        match with_retry(|| self.api.delete(name, &dp)).await {
            Ok(_) => Ok(()),
            Err(e) if classify(&e) == Failure::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A RayJob by name, if it exists.
    pub async fn get(&self, name: &str) -> Result<Option<RayJob>, kube::Error> {
        with_retry(|| self.api.get_opt(name)).await
    }

    /// Every RayJob this installation created.
    pub async fn list_own(&self) -> Result<Vec<RayJob>, kube::Error> {
        let lp = ListParams::default().labels(&self.own_selector());
        Ok(with_retry(|| self.api.list(&lp)).await?.items)
    }

    /// Every RayJob any Forge installation manages (this one's included), metadata
    /// only: names and labels are all a scan of them needs, and a whole RayJob is
    /// large.
    pub async fn list_managed(&self) -> Result<Vec<PartialObjectMeta<RayJob>>, kube::Error> {
        let lp = ListParams::default().labels(&labels::managed_selector());
        Ok(with_retry(|| self.api.list_metadata(&lp)).await?.items)
    }
}

#[cfg(test)]
mod tests {
    //! `create_or_adopt` against the emulator's API server (no controllers: nothing
    //! runs or deletes a RayJob behind the test), its answers shaped by fault rules.

    use forge_kubesim::{FailRule, LoseAnswerRule, Matching, Sim, SimConfig};

    use super::*;
    use crate::cluster::rayjob_crd::RayJobSpec;

    const NAMESPACE: &str = "starforge";

    async fn api_server() -> (Sim, RayJobs) {
        let sim = Sim::start(SimConfig {
            namespaces: vec![NAMESPACE.into()],
            run_controllers: false,
            ..SimConfig::default()
        })
        .await
        .expect("emulator");
        let rayjobs = RayJobs::new(sim.client().expect("client"), NAMESPACE, "ours");
        (sim, rayjobs)
    }

    fn rayjob(name: &str, instance: &str) -> RayJob {
        let mut rj = RayJob::new(name, RayJobSpec::default());
        rj.metadata.labels = Some(labels::job_labels(name, "team-a", instance));
        rj
    }

    fn creates() -> Matching {
        Matching::default().path_contains("/rayjobs").verb("create")
    }

    fn fail(sim: &Sim, matching: Matching, count: u32, code: u16) {
        sim.faults().add_rule(FailRule {
            count,
            code,
            retry_after_seconds: Some(0),
            matching,
        });
    }

    /// How many times the API server stored a RayJob named `name`.
    fn stored(sim: &Sim, name: &str) -> usize {
        sim.created("rayjobs")
            .iter()
            .filter(|c| c.name == name)
            .count()
    }

    async fn never_asked() -> bool {
        panic!("a RayJob known to exist must not need the store's word")
    }

    #[tokio::test]
    async fn a_create_whose_answer_is_lost_is_found_and_adopted_not_sent_again() {
        let (sim, rayjobs) = api_server().await;
        sim.faults().lose_answers(LoseAnswerRule {
            count: 1,
            matching: creates(),
        });
        let created = rayjobs
            .create_or_adopt(&rayjob("a", "ours"), never_asked)
            .await;
        assert_eq!(created.expect("adopted"), Created::Adopted);
        assert_eq!(stored(&sim, "a"), 1);
    }

    #[tokio::test]
    async fn a_failed_create_is_sent_again_only_while_no_rayjob_of_the_job_was_seen() {
        let (sim, rayjobs) = api_server().await;
        // Not stored, and nothing has seen one: sent again.
        fail(&sim, creates(), 1, 500);
        let created = rayjobs
            .create_or_adopt(&rayjob("a", "ours"), || async { true })
            .await;
        assert_eq!(created.expect("created"), Created::New);
        assert_eq!(stored(&sim, "a"), 1);
        // Not there, but the job has moved on (its RayJob ran and was deleted): not
        // created again.
        fail(&sim, creates(), 1, 500);
        let created = rayjobs
            .create_or_adopt(&rayjob("b", "ours"), || async { false })
            .await;
        assert_eq!(created.expect("counted as adopted"), Created::Adopted);
        assert_eq!(stored(&sim, "b"), 0);
    }

    #[tokio::test]
    async fn a_throttled_create_is_sent_again_without_a_lookup() {
        let (sim, rayjobs) = api_server().await;
        fail(&sim, creates(), 2, 429);
        // A lookup would fail, and then the outcome would be unknown.
        fail(&sim, Matching::default().verb("get"), 100, 500);
        let created = rayjobs
            .create_or_adopt(&rayjob("a", "ours"), never_asked)
            .await;
        assert_eq!(created.expect("created"), Created::New);
        assert_eq!(stored(&sim, "a"), 1);
    }

    #[tokio::test]
    async fn a_lasting_failure_says_what_is_known_of_the_rayjob() {
        let (sim, rayjobs) = api_server().await;
        fail(&sim, creates(), 1, 400);
        let refused = rayjobs
            .create_or_adopt(&rayjob("a", "ours"), never_asked)
            .await;
        assert!(
            matches!(refused, Err(CreateError::Refused(_))),
            "{refused:?}"
        );

        fail(&sim, creates(), 100, 500);
        let absent = rayjobs
            .create_or_adopt(&rayjob("b", "ours"), || async { true })
            .await;
        assert!(
            matches!(absent, Err(CreateError::NotCreated(_))),
            "{absent:?}"
        );
        sim.faults().clear();

        fail(&sim, creates(), 1, 500);
        fail(&sim, Matching::default().verb("get"), 100, 500);
        let unknown = rayjobs
            .create_or_adopt(&rayjob("c", "ours"), never_asked)
            .await;
        assert!(
            matches!(unknown, Err(CreateError::Unknown(_))),
            "{unknown:?}"
        );
        sim.faults().clear();

        // Another installation's RayJob of that name is not ours to adopt.
        rayjobs
            .api()
            .create(&PostParams::default(), &rayjob("d", "theirs"))
            .await
            .expect("theirs");
        fail(&sim, creates(), 1, 500);
        let foreign = rayjobs
            .create_or_adopt(&rayjob("d", "ours"), never_asked)
            .await;
        assert!(
            matches!(foreign, Err(CreateError::NotCreated(_))),
            "{foreign:?}"
        );
        assert_eq!(stored(&sim, "a") + stored(&sim, "b") + stored(&sim, "c"), 0);
    }
}
