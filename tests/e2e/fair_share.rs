//! Fair share between teams (issue 39), end to end on the dev gateway: the queue is
//! not first come, first served across teams. A team that holds the cluster and
//! queued a backlog does not keep every GPU that frees while another team waits:
//! the team with the smaller share (decayed usage plus GPUs held) goes first. And a
//! team idle for a few half-lives is not held to what it used before (the test fails
//! with a half-life of a year).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use forge_tests::cli::Forge;
use forge_tests::jobs::note_zip;
use forge_tests::policy::{ALICE, BOB, PolicyClient};
use forge_tests::wait::{eventually, not_yet};
use reqwest::Method;
use serde_json::{Value, json};

/// A job of one 8-GPU machine that holds it for `seconds`.
fn sleeper(name: &str, seconds: u32) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": format!("python3 -c \"import time; time.sleep({seconds}); print('slept', flush=True)\""),
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8}]
    })
}

/// When `job` was dispatched (its history), Unix ms.
fn dispatched_at(job: &Value) -> i64 {
    job["history"]
        .as_array()
        .and_then(|h| h.iter().find(|e| e["to"] == "dispatched"))
        .and_then(|e| e["atMs"].as_i64())
        .unwrap_or_else(|| panic!("never dispatched: {job:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_team_goes_before_a_busy_teams_backlog() {
    // The measurement: team-b holds both machines (16 GPUs, its quota) and
    // queued four more jobs; team-a then queues one.
    let gw = forge_tests::policy::gateway("h100=2x8", &[]).await;
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));
    let mut backlog = Vec::new();
    for i in 0..2 {
        let id = bob
            .submit_ok(&sleeper(&format!("b{i}"), 6), note_zip())
            .await;
        backlog.push(id);
    }
    for id in &backlog {
        bob.wait_running(id, Duration::from_secs(60)).await;
    }
    // The backlog is held by team-b's quota from its submission on: it still waits on
    // the series its pool maps to (a CI run once found it on `unplaced`).
    for i in 2..6 {
        let id = bob
            .submit_ok(&sleeper(&format!("b{i}"), 6), note_zip())
            .await;
        backlog.push(id);
    }
    let held = bob.job(&backlog[2]).await;
    assert_eq!(held["queueSeries"], "h100", "{held:#}");
    let a = alice.submit_ok(&sleeper("a0", 1), note_zip()).await;

    // While it waits, each side sees where it stands, in numbers only.
    let mine = eventually("team-a's standing", Duration::from_secs(5), || async {
        let j = alice.job(&a).await;
        match j.pointer("/queue/standing") {
            Some(s) => Ok(s.clone()),
            None => Err(not_yet(j["queue"].clone())),
        }
    })
    .await;
    assert_eq!(
        mine["othersAhead"],
        json!({"jobs": 0, "gpus": 0}),
        "{mine:#}"
    );
    assert_eq!(mine["teamShare"], 0.0, "{mine:#}");
    assert_eq!(mine["fairShare"], 8.0, "16 GPUs over two teams: {mine:#}");
    let theirs = bob.job(&backlog[2]).await;
    let standing = &theirs["queue"]["standing"];
    assert_eq!(theirs["queue"]["position"], 2, "{theirs:#}");
    assert_eq!(
        standing["othersAhead"],
        json!({"jobs": 1, "gpus": 8}),
        "{theirs:#}"
    );
    assert!(standing["teamShare"].as_f64() >= Some(16.0), "{standing:#}");
    let sentence = standing["sentence"].as_str().unwrap_or_default();
    assert!(
        sentence.contains("1 job of other teams (8 GPUs) ahead")
            && !sentence.contains(&a)
            && !sentence.contains("team-a"),
        "numbers, never another team's job: {sentence}"
    );
    let as_bob = Forge {
        token: BOB.to_string(),
        ..Forge::new(&gw)
    };
    let status = as_bob.run(&["status", &backlog[2]]).await.expect(0);
    assert!(
        status.stdout.contains("standing  #2 on h100; team-b uses"),
        "{}",
        status.stdout
    );

    let done_a = alice
        .wait_terminal(std::slice::from_ref(&a), Duration::from_secs(90))
        .await;
    assert_eq!(done_a[&a]["state"], "succeeded", "{}", done_a[&a]);
    let done_b = bob.wait_terminal(&backlog, Duration::from_secs(120)).await;
    let a_at = dispatched_at(&alice.job(&a).await);
    let mut waited = Vec::new();
    for id in &backlog[2..] {
        assert_eq!(done_b[id]["state"], "succeeded", "{}", done_b[id]);
        let at = dispatched_at(&bob.job(id).await);
        waited.push(at);
        assert!(
            a_at <= at,
            "team-b's queued job {id} was dispatched at {at}, before team-a's only job at {a_at}"
        );
    }
    let first_free = waited.iter().min().copied().unwrap_or(i64::MAX);
    println!(
        "fair share: team-a's job dispatched {} ms before the first of team-b's backlog",
        first_free - a_at
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_idle_for_half_lives_is_not_held_to_its_old_use() {
    // A half-life of 1 s stands in for days. team-b used far more than team-a (8 GPUs
    // for 12 s, against team-a's 4 s), but long ago in half-lives; then both queue a
    // job for the one machine, team-a first. Counted without decay, team-b's old use
    // would put team-a first; decayed, team-b goes first.
    let gw =
        forge_tests::policy::gateway("h100=1x8", &[("FORGE_FAIR_SHARE_HALF_LIFE_S", "1")]).await;
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));
    let old = bob.submit_ok(&sleeper("old", 12), note_zip()).await;
    bob.wait_terminal(std::slice::from_ref(&old), Duration::from_secs(90))
        .await;
    // Eight half-lives of idleness: team-b's use is down to 1/256.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let recent = alice.submit_ok(&sleeper("recent", 4), note_zip()).await;
    alice.wait_running(&recent, Duration::from_secs(60)).await;
    let a2 = alice.submit_ok(&sleeper("a2", 1), note_zip()).await;
    let b2 = bob.submit_ok(&sleeper("b2", 1), note_zip()).await;
    let a_done = alice
        .wait_terminal(&[recent.clone(), a2.clone()], Duration::from_secs(90))
        .await;
    let b_done = bob
        .wait_terminal(std::slice::from_ref(&b2), Duration::from_secs(90))
        .await;
    assert_eq!(a_done[&a2]["state"], "succeeded", "{}", a_done[&a2]);
    assert_eq!(b_done[&b2]["state"], "succeeded", "{}", b_done[&b2]);
    let (a_at, b_at) = (
        dispatched_at(&alice.job(&a2).await),
        dispatched_at(&bob.job(&b2).await),
    );
    assert!(
        b_at < a_at,
        "team-b's old use still counted: its job went at {b_at}, team-a's at {a_at}"
    );
}

/// The global chain's links as they are, as `PUT` takes them.
async fn current_links(admin: &PolicyClient) -> Vec<Value> {
    let (_, body) = admin.get("/v1/policy").await;
    body["global"]["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .map(|l| json!({"digest": l["digest"], "settings": l["settings"]}))
        .collect()
}

/// Sets the global policy's fair-share weights (the chain unchanged).
async fn set_weights(admin: &PolicyClient, weights: Value) -> Value {
    let body = json!({
        "expectedVersion": admin.global_version().await,
        "plugins": current_links(admin).await,
        "fairShare": {"weights": weights},
        "comment": "weights"
    });
    let (s, answer) = admin.put_policy(None, &body).await;
    assert_eq!(s, 200, "{answer:#}");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_are_global_policy_settings_versioned_and_checked() {
    let gw = forge_tests::policy::gateway("h100=2x8", &[]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    let alice = PolicyClient::new(&gw, ALICE);
    let v = admin.global_version().await;

    // Refused, with the field and nothing changed: a zero weight, a team's chain.
    let (s, body) = admin
        .put_policy(
            None,
            &json!({"expectedVersion": v, "plugins": current_links(&admin).await,
                    "fairShare": {"weights": {"team-a": 0}}}),
        )
        .await;
    assert_eq!(
        (s, &body["error"]["code"]),
        (400, &json!("invalid-policy")),
        "{body:#}"
    );
    assert_eq!(
        body["error"]["details"]["field"], "fairShare.weights.team-a",
        "{body:#}"
    );
    let (s, body) = alice
        .put_policy(
            Some("team-a"),
            &json!({"expectedVersion": 0, "plugins": [], "fairShare": {"weights": {"team-a": 9}}}),
        )
        .await;
    assert_eq!(
        (
            s,
            &body["error"]["code"],
            &body["error"]["details"]["field"]
        ),
        (
            422,
            &json!("policy.fair-share-global-only"),
            &json!("fairShare")
        ),
        "{body:#}"
    );
    // An empty ?team= names no team (it once stored a scope `team:`).
    let (s, body) = admin
        .put_policy(Some(""), &json!({"expectedVersion": 0, "plugins": []}))
        .await;
    assert_eq!(
        (s, &body["error"]["code"]),
        (400, &json!("invalid-query")),
        "{body:#}"
    );
    assert_eq!(admin.global_version().await, v, "nothing was stored");

    // Set, shown with the chain, kept by a change that does not name them, and
    // taken back by a rollback.
    set_weights(&admin, json!({"team-a": 2})).await;
    let (_, policy) = admin.get("/v1/policy").await;
    assert_eq!(
        policy["global"]["fairShare"]["weights"]["team-a"], 2.0,
        "{policy:#}"
    );
    let (s, body) = admin
        .put_policy(
            None,
            &json!({"expectedVersion": v + 1, "plugins": current_links(&admin).await}),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    let (_, policy) = admin.get("/v1/policy").await;
    assert_eq!(
        policy["global"]["fairShare"]["weights"]["team-a"], 2.0,
        "kept: {policy:#}"
    );
    let (s, body) = admin
        .send(
            reqwest::Method::POST,
            "/v1/policy/rollback",
            &json!({"toVersion": v}),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    let (_, policy) = admin.get("/v1/policy").await;
    assert!(
        policy["global"].get("fairShare").is_none(),
        "rolled back: {policy:#}"
    );

    // The table: admins see every team that wants GPUs; a member only their own.
    set_weights(&admin, json!({"team-a": 3})).await;
    let bob = gw.client(BOB);
    bob.submit_ok(&sleeper("b", 30), note_zip()).await;
    let table = eventually("team-b in the table", Duration::from_secs(10), || async {
        let (_, t) = admin.get("/v1/fair-share").await;
        match t["series"][0]["teams"].as_array() {
            Some(teams) if !teams.is_empty() => Ok(t),
            _ => Err(not_yet(t)),
        }
    })
    .await;
    assert_eq!(table["series"][0]["series"], "h100", "{table:#}");
    assert_eq!(table["series"][0]["gpus"], 16, "{table:#}");
    let b = &table["series"][0]["teams"][0];
    assert_eq!(
        (&b["team"], &b["weight"]),
        (&json!("team-b"), &json!(1.0)),
        "{table:#}"
    );
    assert_eq!(
        b["fairShareGpus"], 16.0,
        "the only team that wants h100: {table:#}"
    );
    let (s, mine) = alice.get("/v1/fair-share").await;
    assert_eq!(s, 200, "{mine:#}");
    assert_eq!(
        mine["series"][0]["teams"],
        json!([]),
        "team-b's row is not team-a's: {mine:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_two_to_one_give_two_to_one_gpu_seconds() {
    // Two machines, jobs of half a machine: each team's quota (16) would let it take
    // the whole cluster, so only the order decides who gets what. team-a weighs 2.
    // A half-life of 1 400 s stands in for a week: the run (2-3 minutes) is about a
    // seventh of it, as a day is of the default (ordered by GPUs held alone, team-a
    // would get about 1.4×).
    let gw =
        forge_tests::policy::gateway("h100=2x8", &[("FORGE_FAIR_SHARE_HALF_LIFE_S", "1400")]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    set_weights(&admin, json!({"team-a": 2})).await;
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));
    let half = |name: String| {
        json!({
            "name": name,
            "framework": "nemo-rl",
            "entrypoint": "python3 -c \"import time; time.sleep(1)\"",
            "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 4}]
        })
    };
    let (mut a_ids, mut b_ids) = (Vec::new(), Vec::new());
    for i in 0..60 {
        a_ids.push(alice.submit_ok(&half(format!("a{i}")), note_zip()).await);
        b_ids.push(bob.submit_ok(&half(format!("b{i}")), note_zip()).await);
    }
    let a_done = alice.wait_terminal(&a_ids, Duration::from_secs(240)).await;
    let b_done = bob.wait_terminal(&b_ids, Duration::from_secs(240)).await;
    // Each job's run: from its dispatch to its end.
    let runs = |done: &std::collections::BTreeMap<String, Value>| -> Vec<(i64, i64)> {
        done.values()
            .map(|j| {
                assert_eq!(j["state"], "succeeded", "{j:#}");
                (
                    dispatched_at(j),
                    j["updatedAtMs"].as_i64().expect("updatedAtMs"),
                )
            })
            .collect()
    };
    let (a_runs, b_runs) = (runs(&a_done), runs(&b_done));
    // What each team was granted while both had jobs waiting: the runs of the jobs
    // dispatched up to the last dispatch of the team whose backlog ran out first.
    let last = |r: &[(i64, i64)]| r.iter().map(|(d, _)| *d).max().unwrap_or(0);
    let start = a_runs
        .iter()
        .chain(&b_runs)
        .map(|(d, _)| *d)
        .min()
        .unwrap_or(0);
    let end = last(&a_runs).min(last(&b_runs));
    let used = |r: &[(i64, i64)]| -> f64 {
        r.iter()
            .filter(|(d, _)| *d <= end)
            .map(|(d, e)| 4.0 * (e - d) as f64 / 1000.0)
            .sum()
    };
    let (a, b) = (used(&a_runs), used(&b_runs));
    let ratio = a / b;
    // The GPU-seconds each team held up to `cut` (every run cut there): the quantity
    // fair share orders by.
    let held = |r: &[(i64, i64)], cut: i64| -> f64 {
        r.iter()
            .map(|(d, e)| 4.0 * ((*e).min(cut) - d).max(0) as f64 / 1000.0)
            .sum()
    };
    let (ha, hb) = (held(&a_runs, end), held(&b_runs, end));
    // Cut at `end` alone, the ratio is read at its low point: `end` is the dispatch of
    // team-a's last job, when team-a is furthest behind (that job holds nothing yet),
    // and one job is 1.5-3 % of a team's total. So the ratio is read at 20 cuts over
    // the second half of the window, each at another phase of the teams' turns, and
    // their mean is asserted.
    let cuts: Vec<f64> = (1..=20)
        .map(|k| {
            let cut = start + (end - start) / 2 + (end - start) * k / 40;
            held(&a_runs, cut) / held(&b_runs, cut)
        })
        .collect();
    let mean = cuts.iter().sum::<f64>() / cuts.len() as f64;
    let (lo, hi) = cuts
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    println!(
        "weights 2:1 over {:.1} s: team-a {a:.0} GPU-s, team-b {b:.0} GPU-s, ratio {ratio:.3}; \
         held at the window's end {ha:.0} / {hb:.0} = {:.3}; over 20 cuts of its second half \
         {mean:.3} (from {lo:.3} to {hi:.3})",
        (end - start) as f64 / 1000.0,
        ha / hb
    );
    assert!(
        (mean - 2.0).abs() <= 0.1,
        "2:1 within 5 %, got {mean:.3} held over the window's second half (from {lo:.3} to \
         {hi:.3}; at its end {ha:.0} / {hb:.0} GPU-s = {:.3}; whole runs {a:.0} / {b:.0} = \
         {ratio:.3})",
        ha / hb
    );
    let all: BTreeMap<String, Value> = a_done.into_iter().chain(b_done).collect();
    the_day_replays_byte_for_byte_and_previews_other_weights(&gw, &admin, &all).await;
}

/// The dispatch journal of the weights run: replayed, it is byte-identical, and its
/// order is the order the jobs' histories show; previewed with the weights the other
/// way round, passes dispatch otherwise; members may not replay; and the CLI says so.
async fn the_day_replays_byte_for_byte_and_previews_other_weights(
    gw: &forge_tests::gateway::TestGateway,
    admin: &PolicyClient,
    jobs: &BTreeMap<String, Value>,
) {
    let path = "/v1/fair-share/replay";
    let (status, replay) = admin.send(Method::POST, path, &json!({})).await;
    assert_eq!(status, 200, "{replay:#}");
    assert_eq!(replay["identical"], true, "{replay:#}");
    assert_eq!(replay["recordedSha256"], replay["replayedSha256"]);
    assert_eq!(replay["recorded"], replay["replayed"]);
    // Every job once, each dispatched between its pass's start and the next's.
    let passes = replay["recorded"].as_array().expect("passes");
    let mut seen = BTreeSet::new();
    for (i, pass) in passes.iter().enumerate() {
        let at = pass["atMs"].as_i64().expect("atMs");
        let next = passes
            .get(i + 1)
            .and_then(|p| p["atMs"].as_i64())
            .unwrap_or(i64::MAX);
        for id in pass["dispatched"].as_array().expect("dispatched") {
            let id = id.as_str().expect("id");
            assert!(seen.insert(id.to_string()), "{id} dispatched twice");
            let when = dispatched_at(&jobs[id]);
            assert!(
                (at..=next).contains(&when),
                "{id} dispatched at {when}, outside its pass [{at}, {next}]"
            );
        }
    }
    assert_eq!(seen.len(), jobs.len(), "every job, from the journal");
    // The weights the other way round: the same passes hand GPUs out otherwise.
    let preview = json!({"fairShare": {"weights": {"team-b": 2}}});
    let (status, other) = admin.send(Method::POST, path, &preview).await;
    assert_eq!(status, 200, "{other:#}");
    assert_eq!(other["recorded"], replay["recorded"], "the same record");
    assert!(other["passesChanged"].as_u64() > Some(0), "{other:#}");
    assert_eq!(other["identical"], false);
    let (status, current) = admin.get("/v1/policy").await;
    assert_eq!(status, 200);
    assert_eq!(
        current["global"]["fairShare"]["weights"],
        json!({"team-a": 2.0}),
        "a preview changes nothing"
    );
    // Bad windows and members are refused.
    let (status, bad) = admin.send(Method::POST, path, &json!({"seconds": 0})).await;
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid-replay")),
        "{bad:#}"
    );
    assert_eq!(bad["error"]["details"]["field"], "seconds", "{bad:#}");
    let (status, bad) = admin.send(Method::POST, path, &json!([null])).await;
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid-replay")),
        "{bad:#}"
    );
    let (status, _) = PolicyClient::new(gw, BOB)
        .send(Method::POST, path, &json!({}))
        .await;
    assert_eq!(status, 403, "the journal names every team's jobs");
    // The CLI.
    let forge = Forge::new(gw);
    let out = forge.run(&["fair-share", "replay"]).await.expect(0);
    assert!(
        out.stdout
            .contains("recorded passes: byte-identical (sha256 "),
        "{}",
        out.stdout
    );
    let out = forge
        .run(&["fair-share", "replay", "--weight", "team-b=2"])
        .await
        .expect(0);
    assert!(
        out.stdout.contains("with weights team-b=2 (others 1)")
            && out.stdout.contains("recorded: "),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sets_weights_from_a_chain_file_and_prints_the_table() {
    let gw = forge_tests::policy::gateway("h100=1x8", &[]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    let dir = tempfile::tempdir().expect("tempdir");
    let chain = dir.path().join("chain.json");
    let file = json!({
        "plugins": current_links(&admin).await,
        "fairShare": {"weights": {"team-b": 3}},
        "comment": "team-b funds half the cluster"
    });
    std::fs::write(&chain, file.to_string()).expect("chain file");
    let chain = chain.display().to_string();
    let forge = Forge::new(&gw);
    forge.run(&["policy", "set", "-f", &chain]).await.expect(0);
    let shown = forge.run(&["policy", "show"]).await.expect(0);
    assert!(
        shown.stdout.contains("fair-share weights: team-b=3"),
        "{}",
        shown.stdout
    );

    // team-b waits behind a job of team-a's: its row shows weight 3 and the queue.
    let bob = gw.client(BOB);
    gw.client(ALICE)
        .submit_ok(&sleeper("a", 20), note_zip())
        .await;
    let b = bob.submit_ok(&sleeper("b", 1), note_zip()).await;
    eventually("team-b's standing", Duration::from_secs(10), || async {
        let j = bob.job(&b).await;
        match j.pointer("/queue/standing") {
            Some(_) => Ok(()),
            None => Err(not_yet(j["queue"].clone())),
        }
    })
    .await;
    let table = forge.run(&["fair-share"]).await.expect(0);
    let row = table
        .stdout
        .lines()
        .find(|l| l.contains("team-b"))
        .unwrap_or_else(|| panic!("no team-b row: {}", table.stdout));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..3],
        ["h100", "team-b", "3"],
        "SERIES TEAM WEIGHT: {}",
        table.stdout
    );
    assert_eq!(cells[5], "8", "QUEUED: {}", table.stdout);
    assert_eq!(cells[7], "6.0", "FAIR SHARE 8 × 3/4: {}", table.stdout);
    let as_bob = Forge {
        token: BOB.to_string(),
        ..Forge::new(&gw)
    };
    let mine = as_bob.run(&["fair-share"]).await.expect(0);
    assert!(
        mine.stdout.contains("team-b") && !mine.stdout.contains("team-a"),
        "a member sees their own team only: {}",
        mine.stdout
    );
    let jobs = as_bob.run(&["jobs"]).await.expect(0);
    assert!(
        jobs.stdout.contains("#1 on h100; team-b uses"),
        "forge jobs shows the standing: {}",
        jobs.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_borrows_idle_gpus_and_gives_them_back_to_the_team_they_are_guaranteed_to() {
    // Each team is guaranteed one machine of two (8 GPUs) and may borrow 8 more.
    let gw = forge_tests::policy::gateway("h100=2x8", &[]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    let quota =
        json!({"default": {"*": 8}, "borrow_limit": {"*": {"*": 8}}, "max_priority": {"*": 100}});
    let body = json!({
        "expectedVersion": admin.global_version().await,
        "plugins": admin.global_links_with("team-quota", quota).await,
    });
    let (s, answer) = admin.put_policy(None, &body).await;
    assert_eq!(s, 200, "{answer:#}");
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));

    // team-a runs its guaranteed machine, then borrows the idle one.
    let own = alice.submit_ok(&sleeper("own", 300), note_zip()).await;
    alice.wait_running(&own, Duration::from_secs(60)).await;
    let lent = alice.submit_ok(&sleeper("lent", 300), note_zip()).await;
    alice.wait_running(&lent, Duration::from_secs(60)).await;
    let (own_job, lent_job) = (alice.job(&own).await, alice.job(&lent).await);
    assert!(
        own_job["terms"].get("borrowedGpus").is_none(),
        "{own_job:#}"
    );
    assert_eq!(lent_job["terms"]["borrowedGpus"], 8, "{lent_job:#}");
    let as_alice = Forge {
        token: ALICE.to_string(),
        ..Forge::new(&gw)
    };
    let status = as_alice.run(&["status", &lent]).await.expect(0);
    assert!(
        status.stdout.contains(
            "terms     priority 0, preemptible, 8 GPUs borrowed beyond the team's guarantee"
        ),
        "{}",
        status.stdout
    );
    // Past its borrow limit a job waits for team-a's own jobs.
    let more = alice.submit_ok(&sleeper("more", 1), note_zip()).await;
    let waiting = alice
        .wait_state(&more, "queued", Duration::from_secs(5))
        .await;
    let code = eventually("more's queue code", Duration::from_secs(10), || async {
        let j = alice.job(&more).await;
        match j.pointer("/queue/code").and_then(Value::as_str) {
            Some(c) => Ok(c.to_string()),
            None => Err(not_yet(j["queue"].clone())),
        }
    })
    .await;
    assert_eq!(code, "quota.exceeded", "{waiting:#}");

    // team-b's job, within its guarantee, reclaims the borrowed machine (same
    // priority: only borrowing makes team-a's job a candidate), not team-a's own.
    let b = bob.submit_ok(&sleeper("b", 1), note_zip()).await;
    alice
        .wait_state(&lent, "preempting", Duration::from_secs(30))
        .await;
    let released = alice
        .wait_state(&lent, "queued", Duration::from_secs(90))
        .await;
    assert_eq!(released["preemptions"][0]["gpus"], 8, "{released:#}");
    let done = bob
        .wait_terminal(std::slice::from_ref(&b), Duration::from_secs(90))
        .await;
    assert_eq!(done[&b]["state"], "succeeded", "{}", done[&b]);
    let own_job = alice.job(&own).await;
    assert_eq!(
        (&own_job["state"], &own_job["attempt"]),
        (&json!("running"), &json!(0)),
        "the guaranteed job is never a candidate: {own_job:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_read_every_teams_share_and_a_team_link_its_own() {
    // A global link that holds every job naming the shares it was shown (the hostile
    // fixture's `shares` mode), after team-b took the one machine.
    let gw = forge_tests::policy::gateway("h100=1x8", &[]).await;
    let (admin, alice) = (
        PolicyClient::new(&gw, &gw.token),
        PolicyClient::new(&gw, ALICE),
    );
    // Built before team-b's job starts: a build can take minutes on a loaded machine,
    // and the job must still hold the machine when the shares are read.
    let component = forge_tests::plugins::component("hostile");
    let bob = gw.client(BOB);
    let b = bob.submit_ok(&sleeper("b", 600), note_zip()).await;
    bob.wait_running(&b, Duration::from_secs(60)).await;
    let (s, body) = admin
        .upload("shares", "1.0.0", component.clone(), None, Some("global"))
        .await;
    assert_eq!(s, 201, "{body:#}");
    let mut links = current_links(&admin).await;
    links.push(json!({"name": "shares", "version": "1.0.0", "settings": {"mode": "shares"}}));
    let body = json!({"expectedVersion": admin.global_version().await, "plugins": links});
    let (s, answer) = admin.put_policy(None, &body).await;
    assert_eq!(s, 200, "{answer:#}");
    let reason = |id: String| {
        let client = gw.client(ALICE);
        async move {
            eventually("the shares hold", Duration::from_secs(20), || async {
                let j = client.job(&id).await;
                match (&j["queue"]["code"], j["queue"]["reason"].as_str()) {
                    (code, Some(r)) if code == "shares.seen" => Ok(r.to_string()),
                    _ => Err(not_yet(j["queue"].clone())),
                }
            })
            .await
        }
    };
    let a = gw
        .client(ALICE)
        .submit_ok(&sleeper("a", 1), note_zip())
        .await;
    let seen = reason(a).await;
    // team-b holds the machine, team-a wants it: each is entitled to half.
    assert!(
        seen.contains("team-a/h100 share=0.00 fair=0.50 held=0 weight=1")
            && seen.contains("team-b/h100 share=1.00 fair=0.50 held=8 weight=1"),
        "{seen}"
    );
    // team-a's own link sees team-a's standing only (it holds first, so its reason).
    let (s, body) = alice.upload("mine", "1.0.0", component, None, None).await;
    assert_eq!(s, 201, "{body:#}");
    let mine = json!({"expectedVersion": 0,
        "plugins": [{"name": "mine", "version": "1.0.0", "settings": {"mode": "shares"}}]});
    let (s, answer) = alice.put_policy(Some("team-a"), &mine).await;
    assert_eq!(s, 200, "{answer:#}");
    let a2 = gw
        .client(ALICE)
        .submit_ok(&sleeper("a2", 1), note_zip())
        .await;
    let seen = reason(a2).await;
    assert!(
        seen.contains("team-a/h100") && !seen.contains("team-b"),
        "a team link sees its own team only: {seen}"
    );
}
