//! [`Playgrounds`]: the playground domain — create (validate, admit through the
//! policy chain as workload kind `inference`, record, create the pod, its key Secret
//! and NetworkPolicy), read (with the pod's phase; a pending playground whose pod is
//! Ready and whose server lists the model on `/v1/models` becomes `ready`), list, delete (by the team, or reclaimed by an admin) and
//! extend, and calls to its server (through the API server's pod proxy). Another
//! team's playground is "not found", like a job.

use std::sync::Arc;

use forge_policy_host::model::{Decision, PoolPlacement};
use serde::Serialize;

use super::error::PlaygroundError;
use super::model_source::ModelSource;
use super::objects::{self, SERVER_PORT};
use super::phase::{PodPhase, diagnosed, pod_phase};
use super::relay;
use super::request::{CreatePlayground, MAX_LIFETIME_SECS};
use super::warning::warning_due;
use crate::admission::{self, Admission, Path};
use crate::auth::{Caller, Role};
use crate::cluster::PlaygroundObjects;
use crate::cluster::pod_proxy::ProxiedResponse;
use crate::config::Config;
use crate::domain::{EndReason, PlaygroundState};
use crate::metrics::Metrics;
use crate::store::{NewPlayground, PlaygroundRecord, PlaygroundStore, new_job_id, now_ms};

/// Playgrounds listed at most.
pub const LIST_LIMIT: u32 = 200;
/// How often an open answer restarts its playground's idle clock and checks whether
/// the reclaim warning is due.
pub const STREAM_TOUCH: std::time::Duration = std::time::Duration::from_secs(5);
/// The shortest such interval (for very short idle TTLs).
const MIN_STREAM_TOUCH: std::time::Duration = std::time::Duration::from_millis(500);

/// A playground as the API shows it: the record, the pod's phase while it is live,
/// and where to call it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlaygroundView {
    /// The stored playground.
    #[serde(flatten)]
    pub record: PlaygroundRecord,
    /// The pod's phase and pending reason (live playgrounds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodPhase>,
    /// The OpenAI-compatible base URL path, through the gateway.
    pub endpoint: String,
    /// When the playground will be reclaimed and why (live playgrounds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<Reclaim>,
}

/// The next reclaim.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reclaim {
    /// Unix ms.
    pub at_ms: i64,
    /// `ttl-expired` or `idle`.
    pub reason: EndReason,
    /// Set once the warning was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warned_at_ms: Option<i64>,
}

impl PlaygroundView {
    fn of(record: PlaygroundRecord, pod: Option<PodPhase>) -> Self {
        let reclaim = (!record.state.is_terminal()).then(|| {
            let (at_ms, reason) = record.next_deadline_ms();
            Reclaim {
                at_ms,
                reason,
                warned_at_ms: record.warned_at_ms,
            }
        });
        PlaygroundView {
            endpoint: format!("/v1/playgrounds/{}/v1", record.id),
            record,
            pod,
            reclaim,
        }
    }
}

/// The playground domain.
#[derive(Clone)]
pub struct Playgrounds {
    config: Arc<Config>,
    store: Arc<dyn PlaygroundStore>,
    admission: Admission,
    objects: PlaygroundObjects,
    instance: String,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Playgrounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Playgrounds")
    }
}

fn secs_ms(s: u64) -> i64 {
    i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// Restarts a playground's idle clock when an answer's notice stream is dropped.
struct TouchOnDrop {
    store: Arc<dyn PlaygroundStore>,
    id: String,
}

impl Drop for TouchOnDrop {
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, id) = (self.store.clone(), std::mem::take(&mut self.id));
        rt.spawn(async move {
            if let Err(e) = store.touch_playground(&id, now_ms()).await {
                tracing::debug!(playground = %id, "restarting the idle clock after an answer: {e}");
            }
        });
    }
}

impl Playgrounds {
    /// The domain over its store, admission, the cluster objects and installation.
    pub fn new(
        config: Arc<Config>,
        store: Arc<dyn PlaygroundStore>,
        admission: Admission,
        objects: PlaygroundObjects,
        instance: &str,
        metrics: Arc<Metrics>,
    ) -> Self {
        Playgrounds {
            config,
            store,
            admission,
            objects,
            instance: instance.to_string(),
            metrics,
        }
    }

    /// The store (the TTL controller's reads and writes).
    pub fn store(&self) -> &dyn PlaygroundStore {
        self.store.as_ref()
    }

    /// A team's GPU usage as policies see it: its jobs (the dispatcher's ledger) and
    /// its playgrounds.
    pub fn team_usage(&self, team: &str) -> Vec<forge_policy_host::model::SeriesUsage> {
        self.admission.team_usage(team)
    }

    /// The cluster objects.
    pub fn objects(&self) -> &PlaygroundObjects {
        &self.objects
    }

    /// Starts a playground for `caller`: validated, admitted, recorded, created.
    pub async fn create(
        &self,
        caller: &Caller,
        req: CreatePlayground,
    ) -> Result<PlaygroundView, PlaygroundError> {
        let source = req.validate(&self.config)?;
        let image = self
            .config
            .image_for("vllm")
            .ok_or(PlaygroundError::Disabled)?
            .to_string();
        let id = new_job_id();
        let request = self
            .admission
            .live_inference_request(&id, &caller.team, req.gpus, req.series.as_deref())
            .await?;
        let evaluated = self
            .admission
            .evaluate(&caller.team, request, Path::Submit)
            .await?;
        let outcome = evaluated.outcome;
        let placement: PoolPlacement = match &outcome.decision {
            Decision::Reject {
                code,
                message,
                field,
            } => {
                return Err(PlaygroundError::Rejected {
                    code: code.clone(),
                    message: message.clone(),
                    field: field.clone(),
                    plugin: admission::rejecting_plugin(&outcome),
                });
            }
            Decision::Queue { code, message } => {
                return Err(PlaygroundError::NoRoom {
                    code: code.clone(),
                    message: message.clone(),
                });
            }
            Decision::Admit { placement, .. } => {
                placement.pools.first().cloned().unwrap_or_default()
            }
        };
        let Some(series) = placement.series.clone().or_else(|| req.series.clone()) else {
            return Err(PlaygroundError::Invalid {
                field: "series",
                reason: "no GPU series was named and the policy placed none".into(),
            });
        };
        let now = now_ms();
        let idle_seconds = req.idle_ttl();
        let new = NewPlayground {
            id: id.clone(),
            team: caller.team.clone(),
            created_by: caller.name.clone().unwrap_or_else(|| caller.team.clone()),
            model: req.model,
            series: Some(series.clone()),
            gpus: req.gpus,
            args: req.args,
            created_at_ms: now,
            expires_at_ms: now.saturating_add(secs_ms(req.ttl_seconds)),
            idle_seconds,
        };
        let record = self.store.insert_playground(&new).await?;
        if let Err(e) = self
            .create_objects(&record, &series, &placement, &image, &source)
            .await
        {
            tracing::error!(playground = %id, error = %e, "creating the playground's objects");
            let _ = self.objects.delete_pod(&objects::pod_name(&id)).await;
            self.store
                .set_playground_state(
                    &id,
                    PlaygroundState::Pending,
                    PlaygroundState::Failed,
                    Some(EndReason::PodFailed),
                    now_ms(),
                )
                .await?;
            return Err(e);
        }
        Ok(PlaygroundView::of(record, None))
    }

    async fn create_objects(
        &self,
        pg: &PlaygroundRecord,
        series: &str,
        placement: &PoolPlacement,
        image: &str,
        source: &ModelSource,
    ) -> Result<(), PlaygroundError> {
        let target = objects::Target {
            series,
            placement,
            image,
            source,
        };
        let pod = objects::pod(pg, &target, &self.instance, &self.config).map_err(|e| {
            PlaygroundError::Invalid {
                field: "series",
                reason: e.to_string(),
            }
        })?;
        let created = self.objects.create_pod(&pod).await?;
        let name = objects::pod_name(&pg.id);
        let uid = created.metadata.uid.clone().unwrap_or_default();
        let owner = objects::owned_by_pod(&name, &uid);
        let np = objects::network_policy(pg, owner.clone(), &self.instance, &self.config);
        self.objects.create_network_policy(&np).await?;
        let key = hex::encode(rand::random::<[u8; 32]>());
        let secret = objects::key_secret(pg, &key, owner, &self.instance, &self.config);
        self.objects.create_secret(&secret).await?;
        Ok(())
    }

    /// A playground the caller may see (admins: any).
    pub async fn visible(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<PlaygroundRecord, PlaygroundError> {
        match self.store.get_playground(id).await? {
            Some(pg) if caller.can_access(&pg.team) => Ok(pg),
            _ => Err(PlaygroundError::NotFound(id.to_string())),
        }
    }

    /// One playground with its pod's phase; a pending one whose pod is Ready is
    /// recorded `ready` now.
    pub async fn get(&self, caller: &Caller, id: &str) -> Result<PlaygroundView, PlaygroundError> {
        let pg = self.visible(caller, id).await?;
        self.observe(pg).await
    }

    /// `pg` with its pod's phase, its state advanced if the pod is Ready.
    pub async fn observe(
        &self,
        mut pg: PlaygroundRecord,
    ) -> Result<PlaygroundView, PlaygroundError> {
        if pg.state.is_terminal() {
            return Ok(PlaygroundView::of(pg, None));
        }
        let pod = self.objects.get_pod(&objects::pod_name(&pg.id)).await?;
        let mut phase = pod_phase(pod.as_ref());
        if phase.phase == "ready"
            && pg.state == PlaygroundState::Pending
            && !self.lists_model(&pg).await
        {
            phase = PodPhase {
                phase: "loading",
                reason: Some("the server does not list the model yet".into()),
                pending: None,
            };
        }
        if let Some(pod) = &pod {
            phase = diagnosed(&self.objects, pod, phase).await;
        }
        if phase.phase == "ready"
            && pg.state == PlaygroundState::Pending
            && self
                .store
                .set_playground_state(
                    &pg.id,
                    PlaygroundState::Pending,
                    PlaygroundState::Ready,
                    None,
                    now_ms(),
                )
                .await?
        {
            // The idle clock starts now: the time spent loading was not idleness.
            let now = now_ms();
            self.store.touch_playground(&pg.id, now).await?;
            pg.state = PlaygroundState::Ready;
            pg.last_request_at_ms = pg.last_request_at_ms.max(now);
            pg.warned_at_ms = None;
        }
        Ok(PlaygroundView::of(pg, Some(phase)))
    }

    /// Whether `pg`'s server lists its model on `/v1/models` (ready means serving the
    /// model, not just a live process).
    async fn lists_model(&self, pg: &PlaygroundRecord) -> bool {
        let Ok(Some(key)) = self
            .objects
            .secret_value(&objects::secret_name(&pg.id), objects::KEY_ENTRY)
            .await
        else {
            return false;
        };
        let Ok(key) = http::HeaderValue::from_str(&key) else {
            return false;
        };
        let mut headers = http::HeaderMap::new();
        headers.insert(objects::KEY_HEADER, key);
        let pod = objects::pod_name(&pg.id);
        let Ok(resp) = self
            .objects
            .proxy(
                &pod,
                SERVER_PORT,
                http::Method::GET,
                "/v1/models",
                headers,
                bytes::Bytes::new(),
            )
            .await
        else {
            return false;
        };
        if !resp.status.is_success() {
            return false;
        }
        let mut body = Vec::new();
        let mut stream = resp.body;
        while let Some(Ok(chunk)) = futures::StreamExt::next(&mut stream).await {
            body.extend_from_slice(&chunk);
            if body.len() > 1 << 20 {
                return false;
            }
        }
        serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["data"].as_array().cloned())
            .is_some_and(|models| models.iter().any(|m| m["id"] == pg.model.as_str()))
    }

    /// The caller's team's playgrounds (admins: every team's), newest first.
    pub async fn list(&self, caller: &Caller) -> Result<Vec<PlaygroundView>, PlaygroundError> {
        let team = (caller.role != Role::Admin).then_some(caller.team.as_str());
        Ok(self
            .store
            .list_playgrounds(team, LIST_LIMIT)
            .await?
            .into_iter()
            .map(|pg| PlaygroundView::of(pg, None))
            .collect())
    }

    /// Ends a playground now: `deleted` by its team, `reclaimed-by-admin` by an admin
    /// of another team. Deleting an ended playground answers it as it is.
    pub async fn delete(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<PlaygroundView, PlaygroundError> {
        let pg = self.visible(caller, id).await?;
        let reason = if caller.team == pg.team {
            EndReason::Deleted
        } else {
            EndReason::ReclaimedByAdmin
        };
        self.end(&pg, reason).await?;
        let pg = self.visible(caller, id).await?;
        Ok(PlaygroundView::of(pg, None))
    }

    /// Ends `pg` with `reason` (compare-and-set from its state) and deletes its pod.
    /// `false` when it had ended already (someone else ended it).
    pub async fn end(
        &self,
        pg: &PlaygroundRecord,
        reason: EndReason,
    ) -> Result<bool, PlaygroundError> {
        if pg.state.is_terminal() {
            return Ok(false);
        }
        let to = if reason == EndReason::PodFailed {
            PlaygroundState::Failed
        } else {
            PlaygroundState::Expired
        };
        let moved = self
            .store
            .set_playground_state(&pg.id, pg.state, to, Some(reason), now_ms())
            .await?;
        // Counted as soon as the end is stored (what readers of the state see), not
        // after the pod's deletion, which can take a while.
        if moved {
            self.metrics.playground_end(reason.as_str());
            tracing::info!(playground = %pg.id, team = %pg.team, %reason, "playground ended");
        }
        // Delete the pod even if another actor moved the state first: deleting is
        // idempotent and an ended playground must not keep its GPUs.
        self.objects.delete_pod(&objects::pod_name(&pg.id)).await?;
        Ok(moved)
    }

    /// Adds `seconds` to the hard TTL of a live playground, up to its longest lifetime.
    pub async fn extend(
        &self,
        caller: &Caller,
        id: &str,
        seconds: u64,
    ) -> Result<PlaygroundView, PlaygroundError> {
        let pg = self.visible(caller, id).await?;
        if pg.state.is_terminal() {
            return Err(PlaygroundError::Ended {
                id: pg.id,
                state: pg.state.to_string(),
            });
        }
        if seconds == 0 {
            return Err(PlaygroundError::Invalid {
                field: "seconds",
                reason: "must be at least 1".into(),
            });
        }
        let latest = pg.created_at_ms.saturating_add(secs_ms(MAX_LIFETIME_SECS));
        let wanted = pg
            .expires_at_ms
            .max(now_ms())
            .saturating_add(secs_ms(seconds));
        if wanted > latest {
            return Err(PlaygroundError::LifetimeExceeded {
                id: pg.id,
                lifetime_seconds: MAX_LIFETIME_SECS,
                max_seconds: u64::try_from((latest - pg.expires_at_ms.max(now_ms())).max(0) / 1000)
                    .unwrap_or(0),
            });
        }
        if !self.store.extend_playground(&pg.id, wanted).await? {
            return Err(PlaygroundError::Ended {
                id: pg.id,
                state: "ended".into(),
            });
        }
        let pg = self.visible(caller, id).await?;
        Ok(PlaygroundView::of(pg, None))
    }

    /// What an open answer of playground `id` needs while it streams: the playground
    /// is kept busy (an answer still being sent is not idleness: its idle clock is
    /// restarted every [`STREAM_TOUCH`], or every third of a shorter idle TTL), and
    /// the reclaim warning
    /// ([`relay::reclaim_notice`]) is given once the next reclaim is
    /// [`WARN_LEAD_SECS`](super::warning::WARN_LEAD_SECS) away or less (once per answer). Ends when the playground does.
    /// When the stream is dropped (the answer finished, broke, or its client left) the
    /// idle clock restarts once more: idleness is measured from the end of the last
    /// answer, not from the last periodic touch while it was sent.
    pub fn stream_notices(&self, id: &str) -> relay::Notices {
        let end = TouchOnDrop {
            store: self.store.clone(),
            id: id.to_string(),
        };
        Box::pin(futures::stream::unfold(
            (end, false),
            |(end, warned)| async move {
                let (store, id) = (&end.store, end.id.as_str());
                let mut every = STREAM_TOUCH;
                loop {
                    let now = now_ms();
                    if let Err(e) = store.touch_playground(id, now).await {
                        tracing::debug!(playground = %id, "keeping a streaming playground busy: {e}");
                    }
                    let pg = match store.get_playground(id).await {
                        Ok(Some(pg)) => pg,
                        Ok(None) => return None,
                        Err(_) => {
                            tokio::time::sleep(every).await;
                            continue;
                        }
                    };
                    if pg.state.is_terminal() {
                        return None;
                    }
                    if let Some(idle) = pg.idle_seconds {
                        let third = std::time::Duration::from_millis(idle.saturating_mul(1000) / 3);
                        every = STREAM_TOUCH.min(third).max(MIN_STREAM_TOUCH);
                    }
                    let (at, reason) = pg.next_deadline_ms();
                    if !warned && warning_due(now, at) {
                        let notice = relay::reclaim_notice(id, at, reason);
                        return Some((notice, (end, true)));
                    }
                    tokio::time::sleep(every).await;
                }
            },
        ))
    }

    /// Calls `path` (under the server's root, with its query) of a ready playground
    /// the caller may see, with the playground's key, through the API server's pod
    /// proxy; the request restarts the idle clock.
    pub async fn call(
        &self,
        caller: &Caller,
        id: &str,
        method: http::Method,
        path: &str,
        mut headers: http::HeaderMap,
        body: bytes::Bytes,
    ) -> Result<ProxiedResponse, PlaygroundError> {
        let pg = self.visible(caller, id).await?;
        if pg.state.is_terminal() {
            return Err(PlaygroundError::Ended {
                id: pg.id,
                state: pg.state.to_string(),
            });
        }
        if pg.state == PlaygroundState::Pending
            && self.observe(pg.clone()).await?.record.state != PlaygroundState::Ready
        {
            return Err(PlaygroundError::NotReady(pg.id));
        }
        let key = self
            .objects
            .secret_value(&objects::secret_name(&pg.id), objects::KEY_ENTRY)
            .await?
            .ok_or_else(|| PlaygroundError::NotReady(pg.id.clone()))?;
        let key = http::HeaderValue::from_str(&key)
            .map_err(|_| PlaygroundError::NotReady(pg.id.clone()))?;
        headers.insert(objects::KEY_HEADER, key);
        self.store.touch_playground(&pg.id, now_ms()).await?;
        let api = path
            .trim_start_matches("/v1/")
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string();
        let pod = objects::pod_name(&pg.id);
        let resp = self
            .objects
            .proxy(&pod, SERVER_PORT, method, path, headers, body)
            .await;
        let status = resp.as_ref().map_or(502, |r| r.status.as_u16());
        self.metrics.playground_request(&api, status);
        Ok(resp?)
    }
}
