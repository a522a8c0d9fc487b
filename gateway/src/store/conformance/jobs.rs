//! Conformance of [`JobStore`]: durability across a reopen, compare-and-set
//! transitions (in one process and between two handles), keyset pages, the FIFO queue.

use std::collections::BTreeMap;

use forge_policy_host::model::{Placement, PoolPlacement};
use serde_json::json;

use super::Harness;
use crate::domain::{Digest, JobState};
use crate::jobspec::{Deadlines, JobSpec, PoolSpec};
use crate::store::{JobStore, ListQuery, NewDecision, NewJob, StoreError, Transition, new_job_id};

pub fn spec(name: &str) -> JobSpec {
    JobSpec {
        name: name.into(),
        framework: "nemo-rl".into(),
        entrypoint: "python train.py".into(),
        pools: vec![PoolSpec {
            name: "main".into(),
            nodes: 1,
            gpus_per_node: 8,
            series: Some("h200".into()),
            ..PoolSpec::default()
        }],
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        shared_storage: false,
        corpus: false,
        deadlines: Deadlines::default(),
        priority: 0,
        labels: BTreeMap::new(),
        pip: Vec::new(),
    }
}

pub fn new_job(team: &str, name: &str, series: &str) -> NewJob {
    NewJob {
        id: new_job_id(),
        team: team.into(),
        spec: spec(name),
        state: JobState::Queued,
        reason: Some("quota.exceeded".into()),
        capsule_sha256: Some(Digest::parse(&"ab".repeat(32)).expect("digest")),
        queue_series: Some(series.into()),
        trace_parent: Some(TRACE_PARENT.into()),
    }
}

/// A queued job's record as the dispatcher reads it (id `{team}-{seq}`, one 8-GPU
/// pool waiting on h100), for the order's and the journal's tests.
pub fn queued_record(
    team: &str,
    seq: i64,
    priority: i32,
) -> std::sync::Arc<crate::store::JobRecord> {
    let mut spec = spec(&format!("{team}-{seq}"));
    spec.priority = priority;
    std::sync::Arc::new(crate::store::JobRecord {
        id: format!("{team}-{seq}"),
        team: team.to_string(),
        name: spec.name.clone(),
        spec,
        state: JobState::Queued,
        reason: None,
        capsule_sha256: None,
        rayjob_name: None,
        queue_series: Some("h100".into()),
        placement: None,
        seq,
        created_at_ms: seq,
        updated_at_ms: seq,
        trace_parent: None,
        last_checkpoint: None,
        attempt: 0,
        terms: None,
        fleet: None,
    })
}

/// The trace context every test job carries (stored and read back as given).
pub const TRACE_PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn placement() -> Placement {
    Placement {
        pools: vec![PoolPlacement {
            pool: "train".into(),
            series: Some("h200".into()),
            node_selector: [("gpu".to_string(), "h200".to_string())].into(),
            ..Default::default()
        }],
    }
}

pub fn t(id: &str, from: JobState, to: JobState) -> Transition {
    Transition::new(id, from, to, None)
}

fn decision(id: &str) -> NewDecision {
    NewDecision {
        job_id: id.to_string(),
        team: "team-a".into(),
        kind: "admit".into(),
        code: None,
        message: None,
        field: None,
        plugins: json!([{"name": "team-quota", "digest": "sha256:00"}]),
        chain_version: "global@1".into(),
        request: Some(json!({"job": {"id": id}})),
    }
}

pub async fn restart_keeps_everything(h: &dyn Harness) {
    let id;
    {
        let db = h.open().await;
        let store = db.jobs.as_ref();
        let job = store
            .insert(new_job("team-a", "one", "h200"), Some(decision("x")))
            .await
            .expect("insert");
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.reason.as_deref(), Some("quota.exceeded"));
        id = job.id.clone();
        let mut tr = t(&id, JobState::Queued, JobState::Dispatched);
        tr.rayjob_name = Some(format!("forge-{id}"));
        tr.fleet = Some("eu-west".into());
        tr.reason = Some("admitted".into());
        tr.placement = Some(placement());
        tr.decision = Some(decision(&id));
        let moved = store.transition(tr).await.expect("dispatch");
        assert_eq!(moved.placement, Some(placement()));
        store
            .record_decision(decision(&id))
            .await
            .expect("decision");
    }
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let job = store.get(&id).await.expect("get").expect("present");
    assert_eq!(job.state, JobState::Dispatched);
    assert_eq!(
        job.rayjob_name.as_deref(),
        Some(format!("forge-{id}").as_str())
    );
    assert_eq!(
        job.fleet.as_deref(),
        Some("eu-west"),
        "the fleet of its dispatch"
    );
    assert_eq!(job.spec, spec("one"));
    assert_eq!(job.trace_parent.as_deref(), Some(TRACE_PARENT));
    assert_eq!(job.team, "team-a");
    assert_eq!(job.name, "one");
    assert_eq!(job.placement, Some(placement()));
    assert_eq!(
        job.capsule_sha256.as_ref().map(Digest::as_str),
        Some("ab".repeat(32).as_str())
    );
    assert!(job.updated_at_ms >= job.created_at_ms);
    let history = store.history(&id).await.expect("history");
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].from, None);
    assert_eq!(history[0].to, JobState::Queued);
    assert_eq!(history[1].from, Some(JobState::Queued));
    assert_eq!(history[1].to, JobState::Dispatched);
    assert_eq!(history[1].reason.as_deref(), Some("admitted"));
    let decisions = store.decisions(&id).await.expect("decisions");
    assert_eq!(
        decisions.len(),
        2,
        "the dispatch decision and the recorded one"
    );
    assert_eq!(decisions[0].decision.plugins[0]["name"], "team-quota");
    assert_eq!(decisions[0].decision.chain_version, "global@1");
    assert_eq!(decisions[0].decision.team, "team-a");
    assert!(
        decisions[0].decision.request.is_none(),
        "requests are not read back"
    );
    assert_eq!(store.active().await.expect("active").len(), 1);
    assert!(store.decisions("nope").await.expect("none").is_empty());
    assert!(store.history("nope").await.expect("none").is_empty());
}

pub async fn compare_and_set_conflicts(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let job = store
        .insert(new_job("a", "x", "h200"), None)
        .await
        .expect("insert");

    // Two racers both believe the job is queued; exactly one wins.
    let (r1, r2) = tokio::join!(
        store.transition(t(&job.id, JobState::Queued, JobState::Dispatched)),
        store.transition(t(&job.id, JobState::Queued, JobState::Cancelled)),
    );
    let (ok, err) = match (r1, r2) {
        (Ok(j), Err(e)) | (Err(e), Ok(j)) => (j, e),
        other => panic!("expected one winner: {other:?}"),
    };
    match err {
        StoreError::Conflict {
            expected, actual, ..
        } => {
            assert_eq!(expected, JobState::Queued);
            assert_eq!(actual, ok.state);
        }
        e => panic!("expected a conflict, got {e}"),
    }
    assert_eq!(store.history(&job.id).await.expect("history").len(), 2);

    let illegal = store
        .transition(t(&job.id, JobState::Succeeded, JobState::Running))
        .await;
    assert!(matches!(illegal, Err(StoreError::IllegalTransition { .. })));
    let missing = store
        .transition(t("nope", JobState::Queued, JobState::Dispatched))
        .await;
    assert!(matches!(missing, Err(StoreError::NotFound(id)) if id == "nope"));
    assert!(store.get("nope").await.expect("get").is_none());

    let mut dup = new_job("a", "y", "h200");
    dup.id = job.id.clone();
    assert!(matches!(
        store.insert(dup, None).await,
        Err(StoreError::Duplicate(_))
    ));
    assert_eq!(
        store.history(&job.id).await.expect("history").len(),
        2,
        "a refused insert wrote nothing"
    );
}

/// A backend that reports a change version moves it for a job written through any
/// handle (another process's included) and keeps it while no job is written (a lease
/// is not one); one that cannot tell says `None` every time.
pub async fn change_version_moves_with_every_writer(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    let version = || async { a.jobs.change_version().await.expect("version") };
    let Some(v0) = version().await else {
        assert_eq!(b.jobs.change_version().await.expect("version"), None);
        return;
    };
    assert_eq!(version().await, Some(v0));
    let job = a
        .jobs
        .insert(new_job("a", "v", "h200"), None)
        .await
        .expect("insert");
    let v1 = version().await;
    assert!(
        v1.is_some_and(|v1| v1 != v0),
        "a write through the same handle: {v1:?}"
    );
    assert_eq!(version().await, v1);
    let dispatch = || {
        b.jobs
            .transition(t(&job.id, JobState::Queued, JobState::Dispatched))
    };
    dispatch().await.expect("transition");
    let v2 = version().await;
    assert!(
        v2.is_some() && v2 != v1,
        "a write through another handle: {v2:?}"
    );
    // A refused write changes nothing.
    let lost = dispatch().await;
    assert!(matches!(lost, Err(StoreError::Conflict { .. })), "{lost:?}");
    assert_eq!(version().await, v2);
    // Writes the dispatcher does not decide from (a lease) change nothing either.
    b.coord
        .acquire("some-lease", "holder", std::time::Duration::from_secs(30))
        .await
        .expect("acquire");
    assert_eq!(version().await, v2, "a lease is not a job");
}

/// Two handles (two replicas) race many jobs: each job moves exactly once.
pub async fn replicas_race_one_transition(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    let mut ids = Vec::new();
    for i in 0..20 {
        let job = a
            .jobs
            .insert(new_job("a", &format!("r{i}"), "h200"), None)
            .await
            .expect("insert");
        ids.push(job.id);
    }
    let race = |store: std::sync::Arc<dyn JobStore>, ids: Vec<String>| async move {
        let mut won = 0;
        for id in ids {
            match store
                .transition(t(&id, JobState::Queued, JobState::Dispatched))
                .await
            {
                Ok(_) => won += 1,
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        won
    };
    let (wa, wb) = tokio::join!(
        tokio::spawn(race(a.jobs.clone(), ids.clone())),
        tokio::spawn(race(b.jobs.clone(), ids.clone())),
    );
    assert_eq!(wa.expect("a") + wb.expect("b"), ids.len());
    for id in &ids {
        assert_eq!(b.jobs.history(id).await.expect("history").len(), 2);
    }
}

pub async fn keyset_pagination_by_team_and_state(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let mut a_ids = Vec::new();
    for i in 0..7 {
        let a = store
            .insert(new_job("a", &format!("a{i}"), "h200"), None)
            .await
            .expect("a");
        a_ids.push(a.id);
        store
            .insert(new_job("b", &format!("b{i}"), "h200"), None)
            .await
            .expect("b");
    }
    store
        .transition(t(&a_ids[0], JobState::Queued, JobState::Cancelled))
        .await
        .expect("cancel");

    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list(ListQuery {
                team: Some("a".into()),
                state: None,
                limit: 3,
                after,
            })
            .await
            .expect("page");
        assert!(page.jobs.len() <= 3);
        assert!(page.jobs.iter().all(|j| j.team == "a"));
        seen.extend(page.jobs.iter().map(|j| j.id.clone()));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let mut expected = a_ids.clone();
    expected.reverse();
    assert_eq!(seen, expected, "newest first, no gaps or repeats");

    let all = store
        .list(ListQuery {
            limit: 100,
            ..ListQuery::default()
        })
        .await
        .expect("all");
    assert_eq!(all.jobs.len(), 14);
    assert!(all.next.is_none());
    let default_page = store.list(ListQuery::default()).await.expect("default");
    assert_eq!(default_page.jobs.len(), 14, "limit 0 means 50");
    let cancelled = store
        .list(ListQuery {
            state: Some(JobState::Cancelled),
            ..ListQuery::default()
        })
        .await
        .expect("cancelled");
    assert_eq!(cancelled.jobs.len(), 1);
    assert_eq!(cancelled.jobs[0].id, a_ids[0]);
    for bad in ["zzz", "-3", "0"] {
        let page = store
            .list(ListQuery {
                after: Some(bad.into()),
                ..ListQuery::default()
            })
            .await;
        assert!(matches!(page, Err(StoreError::BadCursor)), "{bad}");
    }
}

pub async fn queue_is_fifo_per_series(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let h1 = store
        .insert(new_job("a", "h1", "h200"), None)
        .await
        .expect("insert");
    let b1 = store
        .insert(new_job("b", "b1", "b200"), None)
        .await
        .expect("insert");
    let h2 = store
        .insert(new_job("b", "h2", "h200"), None)
        .await
        .expect("insert");
    let h3 = store
        .insert(new_job("a", "h3", "h200"), None)
        .await
        .expect("insert");
    store
        .transition(t(&h2.id, JobState::Queued, JobState::Dispatched))
        .await
        .expect("dispatch");
    let ids =
        |jobs: Vec<crate::store::JobRecord>| jobs.into_iter().map(|j| j.id).collect::<Vec<_>>();
    let h200 = ids(store.queued(Some("h200".into())).await.expect("queued"));
    assert_eq!(h200, vec![h1.id.clone(), h3.id.clone()]);
    let all = ids(store.queued(None).await.expect("queued"));
    assert_eq!(all, vec![h1.id.clone(), b1.id.clone(), h3.id.clone()]);
    let active = ids(store.active().await.expect("active"));
    assert_eq!(active, vec![h2.id.clone()]);
    // Per team: a's h1 and h3 wait; b's h2 was dispatched, b1 waits.
    assert_eq!(store.queued_count("a").await.expect("count"), 2);
    assert_eq!(store.queued_count("b").await.expect("count"), 1);
    assert_eq!(store.queued_count("nobody").await.expect("count"), 0);

    // What the dispatcher lists: every unfinished job in queue order with its state;
    // an ended one is not listed.
    store
        .transition(t(&b1.id, JobState::Queued, JobState::Cancelled))
        .await
        .expect("cancel");
    let unfinished = store.unfinished().await.expect("unfinished");
    assert_eq!(
        unfinished,
        vec![
            (h1.id.clone(), JobState::Queued),
            (h2.id.clone(), JobState::Dispatched),
            (h3.id.clone(), JobState::Queued),
        ]
    );
    // And reads just the records it names (unknown ids are skipped), many at once.
    let mut many = ids(store
        .get_many(vec![h3.id.clone(), "nope".into(), h1.id.clone()])
        .await
        .expect("get_many"));
    many.sort();
    let mut want = vec![h1.id.clone(), h3.id.clone()];
    want.sort();
    assert_eq!(many, want);
    let mut lots = Vec::new();
    for i in 0..600 {
        lots.push(
            store
                .insert(new_job("c", &format!("c{i}"), "h200"), None)
                .await
                .expect("insert")
                .id,
        );
    }
    let got = store
        .get_many(lots.clone())
        .await
        .expect("more than one chunk");
    assert_eq!(got.len(), lots.len());
    assert!(store.get_many(Vec::new()).await.expect("none").is_empty());
}

/// Acknowledged checkpoints: kept only while the job holds GPUs, never going back a
/// step, the same step answered with the record kept, read back with the job (by
/// another handle too: a checkpoint may reach any replica).
pub async fn checkpoints_move_forward_while_the_job_runs(h: &dyn Harness) {
    use crate::store::{Checkpoint, CheckpointOutcome};
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let job = store
        .insert(new_job("a", "ckpt", "h200"), None)
        .await
        .expect("insert");
    assert_eq!(
        store.record_checkpoint(&job.id, 1, 10).await.expect("ack"),
        CheckpointOutcome::NotRunning(JobState::Queued),
        "a queued job has no process to checkpoint"
    );
    for (from, to) in [
        (JobState::Queued, JobState::Dispatched),
        (JobState::Dispatched, JobState::Running),
    ] {
        store.transition(t(&job.id, from, to)).await.expect("move");
    }
    let first = Checkpoint {
        step: 100,
        at_ms: 1_000,
    };
    assert_eq!(
        store
            .record_checkpoint(&job.id, 100, 1_000)
            .await
            .expect("ack"),
        CheckpointOutcome::Recorded(first)
    );
    assert_eq!(
        store
            .record_checkpoint(&job.id, 100, 2_000)
            .await
            .expect("ack"),
        CheckpointOutcome::Repeated(first),
        "the same step again keeps the first record"
    );
    assert_eq!(
        store
            .record_checkpoint(&job.id, 50, 3_000)
            .await
            .expect("ack"),
        CheckpointOutcome::Stale(first)
    );
    let later = Checkpoint {
        step: 200,
        at_ms: 4_000,
    };
    assert_eq!(
        store
            .record_checkpoint(&job.id, 200, 4_000)
            .await
            .expect("ack"),
        CheckpointOutcome::Recorded(later)
    );
    let other = h.open().await;
    let read = other.jobs.get(&job.id).await.expect("get").expect("job");
    assert_eq!(read.last_checkpoint, Some(later));

    store
        .transition(t(&job.id, JobState::Running, JobState::Succeeded))
        .await
        .expect("end");
    assert_eq!(
        store
            .record_checkpoint(&job.id, 300, 5_000)
            .await
            .expect("ack"),
        CheckpointOutcome::NotRunning(JobState::Succeeded),
        "an ended job acknowledges nothing"
    );
    assert_eq!(
        store.record_checkpoint("nope", 1, 1).await.expect("ack"),
        CheckpointOutcome::NotFound
    );
    let end = store.get(&job.id).await.expect("get").expect("job");
    assert_eq!(
        end.last_checkpoint,
        Some(later),
        "the record outlives the job"
    );
}

/// A preemption's record opens with `running → preempting` and closes with the
/// release (`→ queued`, the attempt up, the work lost measured) in the same
/// transactions; the terms of each dispatch are kept; any other way out of a notice
/// (a cancel) closes the record unmeasured; the window read returns recent and open
/// records.
pub async fn preemptions_are_recorded_with_their_transitions(h: &dyn Harness) {
    use crate::store::preemptions::{
        AdmittedTerms, NewPreemption, PreemptionWrite, Release, ReleaseCause, lost_gpu_seconds,
    };
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let job = store
        .insert(new_job("a", "victim", "h100"), None)
        .await
        .expect("insert");
    assert_eq!((job.attempt, job.terms), (0, None));
    let terms = AdmittedTerms {
        priority: 10,
        preemptible: true,
        borrowed_gpus: 4,
    };
    let mut dispatch = t(&job.id, JobState::Queued, JobState::Dispatched);
    dispatch.terms = Some(terms);
    let dispatched = store.transition(dispatch).await.expect("dispatch");
    assert_eq!(dispatched.terms, Some(terms));
    store
        .transition(t(&job.id, JobState::Dispatched, JobState::Running))
        .await
        .expect("run");
    store
        .record_checkpoint(&job.id, 40, 5_000)
        .await
        .expect("ack");

    let notice = NewPreemption {
        by_job: "preemptor".into(),
        at_ms: 10_000,
        notice_ms: 60_000,
        gpus: 8,
        series: "h100".into(),
        planned_lost_gpu_seconds: 520.0,
        attempt_started_ms: 2_000,
    };
    let mut tn = t(&job.id, JobState::Running, JobState::Preempting);
    tn.preemption = Some(PreemptionWrite::Notice(notice));
    let noticed = store.transition(tn).await.expect("notice");
    assert_eq!(noticed.state, JobState::Preempting);
    let open = store.preemptions_since(i64::MAX).await.expect("open ones");
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(
        (
            open[0].attempt,
            open[0].by_job.as_str(),
            open[0].deadline_ms(),
            open[0].released_ms
        ),
        (0, "preemptor", 70_000, None)
    );
    let acked = noticed.last_checkpoint;
    assert_eq!(open[0].attempt_started_ms, 2_000);
    assert_eq!(
        lost_gpu_seconds(open[0].gpus, open[0].attempt_started_ms, acked, 12_000),
        56.0,
        "8 GPUs × the 7 s since its checkpoint of this attempt"
    );
    assert_eq!(
        lost_gpu_seconds(open[0].gpus, open[0].attempt_started_ms, None, 12_000),
        80.0,
        "8 GPUs × the 10 s since the attempt started"
    );

    let mut tr = t(&job.id, JobState::Preempting, JobState::Queued);
    tr.preemption = Some(PreemptionWrite::Release(Release {
        released_ms: 12_000,
        measured: true,
        released_by: Some(ReleaseCause::Checkpointed),
    }));
    let released = store.transition(tr).await.expect("release");
    assert_eq!(
        (released.state, released.attempt, released.terms),
        (JobState::Queued, 1, Some(terms)),
        "queued again for its second attempt, its terms kept until the next dispatch"
    );
    let other = h.open().await;
    let recorded = other.jobs.preemptions(&job.id).await.expect("read");
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        (
            recorded[0].released_ms,
            recorded[0].checkpoint_step,
            recorded[0].lost_gpu_seconds,
            recorded[0].gpus,
            recorded[0].released_by
        ),
        (
            Some(12_000),
            Some(40),
            Some(56.0),
            8,
            Some(ReleaseCause::Checkpointed)
        )
    );
    assert!(
        store
            .preemptions_since(i64::MAX)
            .await
            .expect("open")
            .is_empty()
    );
    assert_eq!(
        store.preemptions_since(9_000).await.expect("window").len(),
        1
    );
    assert!(
        store
            .preemptions_since(11_000)
            .await
            .expect("window")
            .is_empty()
    );
}

/// Moves job `id` queued → dispatched → running.
async fn run_job(store: &dyn crate::store::JobStore, id: &str) {
    for (from, to) in [
        (JobState::Queued, JobState::Dispatched),
        (JobState::Dispatched, JobState::Running),
    ] {
        store.transition(t(id, from, to)).await.expect("move");
    }
}

/// Gives running job `id` a preemption notice for job `by` at `at_ms` (8 GPUs, 5 s).
async fn give_notice(store: &dyn crate::store::JobStore, id: &str, by: &str, at_ms: i64) {
    use crate::store::preemptions::{NewPreemption, PreemptionWrite};
    let mut tn = t(id, JobState::Running, JobState::Preempting);
    tn.preemption = Some(PreemptionWrite::Notice(NewPreemption {
        by_job: by.into(),
        at_ms,
        notice_ms: 5_000,
        gpus: 8,
        series: "h100".into(),
        planned_lost_gpu_seconds: 40.0,
        attempt_started_ms: 0,
    }));
    store.transition(tn).await.expect("notice");
}

/// A running job of team `a` given a notice at 20 s ([`give_notice`]).
async fn noticed_job(store: &dyn crate::store::JobStore) -> crate::store::JobRecord {
    let job = store
        .insert(new_job("a", "victim", "h100"), None)
        .await
        .expect("insert");
    run_job(store, &job.id).await;
    give_notice(store, &job.id, "another", 20_000).await;
    job
}

/// The release measures the lost work from the checkpoint the job's row holds as it
/// commits: one acknowledged during the notice — after whoever released it last read
/// the job — counts as saved.
pub async fn a_release_measures_from_the_checkpoint_it_commits_with(h: &dyn Harness) {
    use crate::store::preemptions::{PreemptionWrite, Release, ReleaseCause};
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let job = noticed_job(store).await;
    store
        .record_checkpoint(&job.id, 7, 21_000)
        .await
        .expect("ack during the notice");
    let mut tr = t(&job.id, JobState::Preempting, JobState::Queued);
    tr.preemption = Some(PreemptionWrite::Release(Release {
        released_ms: 21_500,
        measured: true,
        released_by: Some(ReleaseCause::Exited),
    }));
    store.transition(tr).await.expect("release");
    let recorded = store.preemptions(&job.id).await.expect("read");
    assert_eq!(
        (recorded[0].checkpoint_step, recorded[0].lost_gpu_seconds),
        (Some(7), Some(4.0)),
        "8 GPUs × the 0.5 s since the checkpoint acknowledged during the notice"
    );
}

/// Any other way out of a notice (a cancel) closes the record, unmeasured, and keeps
/// the attempt; only a running job is preempted.
pub async fn a_notice_ended_otherwise_closes_its_record(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let job = noticed_job(store).await;
    let cancelled = store
        .transition(t(&job.id, JobState::Preempting, JobState::Cancelled))
        .await
        .expect("cancel");
    assert_eq!(cancelled.attempt, 0);
    let recorded = store.preemptions(&job.id).await.expect("read");
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].attempt, 0);
    assert!(recorded[0].released_ms.is_some(), "{recorded:?}");
    assert_eq!(recorded[0].lost_gpu_seconds, None);
    assert_eq!(
        recorded[0].released_by, None,
        "no release: it was cancelled"
    );
    assert!(
        store
            .preemptions_since(i64::MAX)
            .await
            .expect("open")
            .is_empty()
    );
    assert!(
        store
            .transition(t(&job.id, JobState::Queued, JobState::Preempting))
            .await
            .is_err(),
        "only a running job is preempted"
    );
}

/// `lives_since`: the jobs that held GPUs in the window (entered or left a holding
/// state in it) or hold them now, newest first, each with its whole history, its
/// series and GPUs; a job that only waited is not one; `limit` keeps the newest.
pub async fn lives_cover_the_window_and_jobs_still_holding_gpus(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let ended = store
        .insert(new_job("c", "ended", "h100"), None)
        .await
        .expect("insert");
    for (from, to) in [
        (JobState::Queued, JobState::Dispatched),
        (JobState::Dispatched, JobState::Running),
        (JobState::Running, JobState::Failed),
    ] {
        store
            .transition(t(&ended.id, from, to))
            .await
            .expect("move");
    }
    let runs = store
        .insert(new_job("a", "runs", "h200"), None)
        .await
        .expect("insert");
    store
        .transition(t(&runs.id, JobState::Queued, JobState::Dispatched))
        .await
        .expect("dispatch");
    store
        .transition(t(&runs.id, JobState::Dispatched, JobState::Running))
        .await
        .expect("run");
    // Only waits: never among the lives.
    store
        .insert(new_job("b", "waits", "h200"), None)
        .await
        .expect("insert");

    let all = store.lives_since(0, 10).await.expect("lives");
    let ids: Vec<&str> = all.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, [runs.id.as_str(), ended.id.as_str()], "newest first");
    let ran = &all[0];
    assert_eq!((ran.series.as_deref(), ran.gpus), (Some("h200"), 8));
    assert_eq!(ran.created_at_ms, runs.created_at_ms);
    let states: Vec<JobState> = ran.history.iter().map(|e| e.to).collect();
    assert_eq!(
        states,
        [JobState::Queued, JobState::Dispatched, JobState::Running]
    );
    assert!(ran.history.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    assert_eq!(all[1].history.len(), 4);

    // A window after every change: only the job holding GPUs, with all its history.
    let later = crate::store::now_ms() + 60_000;
    let holding = store.lives_since(later, 10).await.expect("lives");
    assert_eq!(holding.len(), 1);
    assert_eq!(
        (holding[0].id.as_str(), holding[0].history.len()),
        (runs.id.as_str(), 3)
    );
    // The newest only.
    let one = store.lives_since(0, 1).await.expect("lives");
    assert_eq!(
        one.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        [runs.id.as_str()]
    );
    // Once it ended, the later window has nothing.
    store
        .transition(t(&runs.id, JobState::Running, JobState::Succeeded))
        .await
        .expect("end");
    assert!(
        store
            .lives_since(later, 10)
            .await
            .expect("lives")
            .is_empty()
    );
}

/// `histories`: several jobs' histories in one read, each as `history` gives it
/// (oldest first); an unknown id is absent, and no id reads nothing.
pub async fn histories_read_a_page_at_once(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.jobs.as_ref();
    let ran = store
        .insert(new_job("a", "ran", "h100"), None)
        .await
        .expect("insert");
    for (from, to) in [
        (JobState::Queued, JobState::Dispatched),
        (JobState::Dispatched, JobState::Running),
    ] {
        store.transition(t(&ran.id, from, to)).await.expect("move");
    }
    let waits = store
        .insert(new_job("b", "waits", "h100"), None)
        .await
        .expect("insert");
    let ids = vec![ran.id.clone(), waits.id.clone(), "no-such-job".to_string()];
    let all = store.histories(ids).await.expect("histories");
    assert_eq!(
        all.keys().collect::<Vec<_>>(),
        {
            let mut known = vec![&ran.id, &waits.id];
            known.sort();
            known
        },
        "{all:?}"
    );
    for id in [&ran.id, &waits.id] {
        assert_eq!(
            all[id],
            store.history(id).await.expect("history"),
            "the same as one job's read"
        );
    }
    assert_eq!(all[&ran.id].len(), 3);
    assert!(store.histories(Vec::new()).await.expect("none").is_empty());
}
