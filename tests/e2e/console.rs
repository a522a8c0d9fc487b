//! The web console in a real headless Chromium (WebDriver, `forge_tests::browser`)
//! against a dev gateway: log in with a token; watch the sample job go from queued to
//! succeeded without a reload; read its log on its page; read why a job waits on
//! capacity; as an admin change the global chain's settings, see the new version and
//! its diff, roll back, see a shadow candidate's disagreements; as another team's member see none of team-a's jobs and be
//! refused on a forged (CSRF) cancel form; log out. Every page is saved as a screenshot
//! under `target/e2e-artifacts/console/`. The cookie and CSRF rules are also checked
//! over plain HTTP.

use std::time::Duration;

use forge_tests::browser::Browser;
use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{one_gpu_spec, rayjobs, wait_no_rayjobs, zip_of};
use forge_tests::policy::PolicyClient;
use forge_tests::sse::next_event;
use forge_tests::wait::{eventually, not_yet};
use serde_json::{Value, json};

/// A `team-b` member's token (its SHA-256 is in the tokens file below).
const TEAM_B_TOKEN: &str = "console-team-b-member";

const WITHIN: Duration = Duration::from_secs(60);

async fn gateway() -> TestGateway {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n  - name: bob\n    team: team-b\n    role: member\n    token_sha256: {}\n",
            forge_gateway::auth::hash_token(TEAM_B_TOKEN),
        ),
    )
    .expect("tokens file");
    let tokens = tokens.display().to_string();
    // One 8-GPU node: a 16-GPU job waits on capacity.
    TestGateway::start("h100=1x8", &[("FORGE_TOKENS_FILE", tokens.as_str())]).await
}

fn sample_zip() -> Vec<u8> {
    zip_of(&[(
        "train.py",
        "print('hello from forge', flush=True)\nfor i in range(3):\n    print(f'step {i}', flush=True)\n",
    )])
}

/// 16 GPUs on two 8-GPU pools: within the dev quota, never fits one 8-GPU node.
fn sixteen_gpus(name: &str) -> Value {
    json!({"name": name, "framework": "nemo-rl", "entrypoint": "python3 train.py",
        "pools": [{"name": "a", "nodes": 1, "gpusPerNode": 8},
                  {"name": "b", "nodes": 1, "gpusPerNode": 8}]})
}

async fn submit(gw: &TestGateway, token: &str, spec: &Value) -> String {
    let (status, body) = gw.client(token).submit(spec, sample_zip()).await;
    assert_eq!(status, 202, "{body:#}");
    body["id"].as_str().expect("id").to_string()
}

async fn log_in(b: &Browser, gw: &TestGateway, token: &str) {
    b.goto(&format!("{}/", gw.url)).await;
    b.fill("#token", token).await;
    b.click("#login").await;
    eventually("the jobs page after login", WITHIN, || async {
        match b.path().await.as_str() {
            "/console/jobs" => Ok(()),
            other => Err(not_yet(other.to_string())),
        }
    })
    .await;
}

async fn log_out(b: &Browser, gw: &TestGateway) {
    b.click("#logout").await;
    b.wait_text("h1", "Log in", WITHIN).await;
    // The session is gone: console pages send the browser back to the login page.
    b.goto(&format!("{}/console/jobs", gw.url)).await;
    assert_eq!(b.path().await, "/login");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_in_a_real_browser() {
    let gw = gateway().await;
    let b = Browser::start("console").await;
    let url = &gw.url;

    // Not logged in: `/` is the login page.
    b.goto(&format!("{url}/")).await;
    assert!(b.text("h1").await.unwrap_or_default().contains("Log in"));
    b.screenshots("login").await;
    b.fill("#token", "not-a-token").await;
    b.click("#login").await;
    b.wait_text("#login-error", "not valid", WITHIN).await;

    // The admin (dev token, team-a) logs in; the cookie is HttpOnly and SameSite=Strict.
    log_in(&b, &gw, &gw.token).await;
    let cookie = b
        .client
        .get_named_cookie("forge_session")
        .await
        .expect("session cookie");
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(format!("{:?}", cookie.same_site()), "Some(Strict)");
    assert_ne!(cookie.value(), gw.token, "the token is not the cookie");

    // The sample job goes from queued to succeeded on the open page, without a reload.
    b.client
        .execute("window.forgeNoReload = 42; return null;", vec![])
        .await
        .expect("mark the page");
    let sample = submit(&gw, &gw.token, &one_gpu_spec("sample", "python3 train.py")).await;
    let row = format!("#job-{sample} .state");
    b.wait_text(&row, "succeeded", WITHIN).await;
    // The row came live, drawn as the list draws it: its name and its life.
    b.wait_text(&format!("#job-{sample} td a"), "sample", WITHIN)
        .await;
    b.wait_text(
        &format!("#job-{sample} td.life rect[data-state=running]"),
        "",
        WITHIN,
    )
    .await;
    let marker = b
        .client
        .execute("return window.forgeNoReload;", vec![])
        .await
        .expect("read the mark");
    assert_eq!(marker, json!(42), "the jobs page reloaded");
    assert!(
        b.text("#no-jobs").await.is_none(),
        "the list still says it is empty"
    );
    b.screenshots("jobs").await;

    // Its page: the state and the archived log.
    b.goto(&format!("{url}/console/jobs/{sample}")).await;
    b.wait_text("#job-state", "succeeded", WITHIN).await;
    b.wait_text("#log", "hello from forge", WITHIN).await;
    assert!(b.text("#log").await.unwrap_or_default().contains("step 2"));
    assert!(
        b.text("#timeline")
            .await
            .unwrap_or_default()
            .contains("admit")
    );
    // Its life drawn: a stretch running, the admission marked; times are relative,
    // the exact UTC time on hover.
    let ran = b
        .attr("figure.gantt rect[data-state=running]", "data-ms")
        .await
        .expect("a running stretch");
    assert!(ran.parse::<i64>().expect("ms") > 0, "{ran}");
    assert!(
        b.attr("figure.gantt path[data-kind=decision]", "class")
            .await
            .is_some()
    );
    let exact = b.attr("#timeline time", "title").await.expect("a time");
    assert!(exact.ends_with(" UTC") && exact.len() == 23, "{exact}");
    let ago = b.text("#timeline time").await.expect("a time");
    assert!(ago.ends_with("ago") || ago == "just now", "{ago}");
    b.screenshots("job").await;

    // The Kubernetes events stay with the job once its objects are gone, in time
    // order, each with its time.
    let kube = gw.sim.client().expect("client");
    wait_no_rayjobs(&rayjobs(kube, &gw.state.config.k8s.namespace), WITHIN).await;
    b.goto(&format!("{url}/console/jobs/{sample}")).await;
    let events = b.wait_text("#events", "Scheduled", WITHIN).await;
    assert!(
        events.contains("Last seen") && events.contains("kept with"),
        "{events}"
    );
    // …and sit on its drawn life.
    assert!(
        b.attr("figure.gantt path[data-kind=event]", "class")
            .await
            .is_some(),
        "no event marked on the timeline"
    );

    // A 100 000-line log opens at its tail (500 lines) and pages backwards.
    let long = gw
        .client(&gw.token)
        .submit_ok(
            &one_gpu_spec("long-log", "python3 long.py"),
            zip_of(&[(
                "long.py",
                "import sys\nsys.stdout.write(''.join(f'line {i}\\n' for i in range(100000)))\n",
            )]),
        )
        .await;
    let done = gw
        .client(&gw.token)
        .wait_terminal(std::slice::from_ref(&long), WITHIN)
        .await;
    assert_eq!(done[&long]["state"], "succeeded", "{:#}", done[&long]);
    b.goto(&format!("{url}/console/jobs/{long}")).await;
    let tail = b.wait_text("#log", "line 99999", WITHIN).await;
    // What it was admitted on, in words.
    let terms = b.text("#terms").await.expect("terms");
    assert!(
        terms.contains("Runs at priority 0, preemptible."),
        "{terms}"
    );
    // Where it ran: the dev gateway's one fleet.
    let fleet = b.text("#fleet").await.expect("fleet");
    assert_eq!(fleet, "Fleet: default", "{fleet}");
    assert_eq!(done[&long]["fleet"], "default", "{:#}", done[&long]);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 500, "the page shows the last 500 lines");
    // The driver log ends with the job's output (and the submitter's closing lines).
    let last = lines
        .iter()
        .position(|l| *l == "line 99999")
        .expect("the last line");
    let first = 99_999 - last;
    assert_eq!(lines[0], format!("line {first}"));
    b.screenshots("job-long-log").await;
    b.click("a[rel=prev]").await;
    let earlier = b
        .wait_text("#log", &format!("line {}", first - 1), WITHIN)
        .await;
    let earlier: Vec<&str> = earlier.lines().collect();
    assert_eq!(earlier.len(), 500);
    assert_eq!(earlier[0], format!("line {}", first - 500));
    assert_eq!(earlier[499], format!("line {}", first - 1));

    // A job waiting on capacity says why, in words, with the numbers.
    let waiting = submit(&gw, &gw.token, &sixteen_gpus("too-big")).await;
    gw.dispatcher_settled().await;
    b.goto(&format!("{url}/console/jobs/{waiting}")).await;
    let sentence = b
        .wait_text("#pending-sentence", "Pending because", WITHIN)
        .await;
    assert!(
        sentence.contains("not enough free capacity on h100"),
        "{sentence}"
    );
    b.screenshots("job-pending").await;

    // Capacity per series, drawn with the API's numbers.
    b.goto(&format!("{url}/console/capacity")).await;
    let capacity = b.source().await;
    assert!(capacity.contains("Largest free block"), "{capacity}");
    let (_, api) = gw
        .client(&gw.token)
        .call(reqwest::Method::GET, "/v1/capacity")
        .await;
    let h100 = api["series"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["series"] == "h100"))
        .unwrap_or_else(|| panic!("{api:#}"));
    let bar = "#capacity-drawn figure.bar[data-series=h100]";
    for (attr, field) in [
        ("data-free", "free"),
        ("data-in-use", "inUse"),
        ("data-total", "total"),
    ] {
        assert_eq!(
            b.attr(bar, attr).await,
            Some(h100[field].to_string()),
            "{attr} against {api:#}"
        );
    }
    assert_eq!(
        b.text(&format!("{bar} .free-gpus")).await,
        Some(h100["free"].to_string())
    );
    // The admin sees the node; the queue shows the waiting job as team-a's 16 GPUs.
    assert_eq!(
        b.attr("figure.strip[data-series=h100]", "data-nodes")
            .await
            .as_deref(),
        Some("1")
    );
    let queue = "#queues-drawn figure.queue[data-series=h100]";
    assert_eq!(b.attr(queue, "data-own-gpus").await.as_deref(), Some("16"));
    assert!(
        b.attr(&format!("{queue} rect[data-job='{waiting}']"), "data-value")
            .await
            .is_some()
    );
    // The last day, for admins: the two jobs dispatched so far, and GPUs held.
    assert_eq!(
        b.attr(
            "#last-day figure.waits[data-series=h100]",
            "data-dispatched"
        )
        .await
        .as_deref(),
        Some("2")
    );
    assert!(
        b.attr(
            "#last-day figure.use[data-series=h100] rect[data-percent]",
            "data-hour"
        )
        .await
        .is_some()
    );
    // The team's use drawn against its quota, as the reference chain's team-quota
    // states it (`default: {"*": 16}`).
    assert_eq!(
        b.attr("#team-drawn figure.team[data-series=h100]", "data-quota")
            .await
            .as_deref(),
        Some("16")
    );
    // Who stands where against their fair share: the waiting job's team wants h100.
    let shares = b.text("#fair-share").await.expect("fair-share table");
    assert!(
        shares.contains("team-a") && shares.contains("Fair share"),
        "{shares}"
    );
    b.screenshots("capacity").await;

    // Plugins.
    b.goto(&format!("{url}/console/plugins")).await;
    assert!(
        b.text("#plugins")
            .await
            .unwrap_or_default()
            .contains("team-quota")
    );
    b.screenshots("plugins").await;

    // The admin changes the global chain's team-quota settings: a new version, its
    // diff, then a rollback.
    b.goto(&format!("{url}/console/policies")).await;
    assert_eq!(
        b.text("#policy-global .version").await.as_deref(),
        Some("1")
    );
    let form = "#settings-global-team-quota";
    b.fill(
        &format!("{form} textarea[name=settings]"),
        r#"{"default": {"*": 24}}"#,
    )
    .await;
    b.fill(&format!("{form} input[name=comment]"), "more GPUs")
        .await;
    b.click(&format!("{form} button")).await;
    b.wait_text("#policy-global .version", "2", WITHIN).await;
    let diff = b.text("#diff-global").await.expect("a diff");
    assert!(diff.contains("- ") && diff.contains("16"), "{diff}");
    assert!(diff.contains("+ ") && diff.contains("24"), "{diff}");
    assert!(
        b.text("#policy-global .history")
            .await
            .unwrap_or_default()
            .contains("more GPUs")
    );
    b.screenshots("policies-changed").await;
    let (_, policy) = gw
        .client(&gw.token)
        .call(reqwest::Method::GET, "/v1/policy")
        .await;
    assert_eq!(
        policy["global"]["plugins"][1]["settings"]["default"]["*"],
        24
    );
    b.click("#rollback-global button").await;
    b.wait_text("#policy-global .version", "3", WITHIN).await;
    let (_, policy) = gw
        .client(&gw.token)
        .call(reqwest::Method::GET, "/v1/policy")
        .await;
    assert_eq!(
        policy["global"]["plugins"][1]["settings"]["default"]["*"],
        16
    );
    b.screenshots("policies-rolled-back").await;

    // A shadow candidate (team-a: 1 GPU per job) and the submissions it would decide
    // differently.
    let admin = PolicyClient::new(&gw, &gw.token);
    let strict = admin
        .global_links_with(
            "team-quota",
            json!({"default": {"*": 16}, "limits": {"team-a": {"*": 1}}}),
        )
        .await;
    let (status, body) = admin
        .send(
            reqwest::Method::PUT,
            "/v1/policy/shadow",
            &json!({"plugins": strict, "comment": "1 GPU per job"}),
        )
        .await;
    assert_eq!(status, 200, "{body:#}");
    let shadowed = submit(&gw, &gw.token, &sixteen_gpus("shadowed")).await;
    eventually("the shadow comparison", WITHIN, || async {
        let (_, r) = admin.get("/v1/policy/shadow").await;
        if r["compared"] == 1 {
            Ok(())
        } else {
            Err(not_yet(r))
        }
    })
    .await;
    b.goto(&format!("{url}/console/policies")).await;
    let agreement = b.text("#agreement").await.expect("agreement");
    assert!(agreement.contains("Agreed on 0 of 1"), "{agreement}");
    let differences = b.text("#differences").await.expect("differences");
    assert!(differences.contains(&shadowed), "{differences}");
    b.screenshots("policies-shadow").await;
    log_out(&b, &gw).await;

    // team-b's member: team-a's jobs are nowhere.
    let own = submit(&gw, TEAM_B_TOKEN, &sixteen_gpus("b-waits")).await;
    log_in(&b, &gw, TEAM_B_TOKEN).await;
    b.wait_text(&format!("#job-{own} .state"), "queued", WITHIN)
        .await;
    let list = b.source().await;
    assert!(
        !list.contains(&sample) && !list.contains(&waiting),
        "{list}"
    );
    // Its row draws its life so far: queued.
    assert!(
        b.attr(
            &format!("#job-{own} td.life rect[data-state=queued]"),
            "class"
        )
        .await
        .is_some(),
        "{list}"
    );
    // Their capacity page draws team-a's two waiting jobs only as another team's
    // GPUs (16 each, beside this team's 16), and no node strip.
    b.goto(&format!("{url}/console/capacity")).await;
    let queue = "#queues-drawn figure.queue[data-series=h100]";
    b.wait_text(queue, "jobs ask for", WITHIN).await;
    assert_eq!(b.attr(queue, "data-own-gpus").await.as_deref(), Some("16"));
    assert_eq!(b.attr(queue, "data-gpus").await.as_deref(), Some("48"));
    let page = b.source().await;
    for hidden in [waiting.as_str(), "too-big", shadowed.as_str(), "team-a:"] {
        assert!(!page.contains(hidden), "{hidden} shown to team-b: {page}");
    }
    assert!(b.attr("figure.strip", "data-nodes").await.is_none());
    assert!(
        b.text("#last-day").await.is_none(),
        "the last day is for admins"
    );
    b.screenshots("member-capacity").await;
    b.goto(&format!("{url}/console/jobs?team=team-a")).await;
    assert!(b.text("h1").await.unwrap_or_default().contains("403"));
    b.goto(&format!("{url}/console/jobs/{sample}")).await;
    assert!(b.text("h1").await.unwrap_or_default().contains("404"));
    assert!(!b.source().await.contains("hello from forge"));
    // The member sees no settings forms on the global chain, and no other team's job
    // among the shadow differences.
    b.goto(&format!("{url}/console/policies")).await;
    assert!(b.text(&format!("{form} textarea")).await.is_none());
    assert!(b.text("#agreement").await.is_some());
    assert!(!b.source().await.contains(&shadowed));

    // A forged cancel form (wrong CSRF token) is refused and changes nothing.
    b.goto(&format!("{url}/console/jobs/{own}")).await;
    b.screenshots("member-job").await;
    b.client
        .execute(
            "const f = document.getElementById('cancel-form');
             f.querySelector('input[name=csrf]').value = 'forged';
             f.querySelector('input[name=confirm]').checked = true;
             f.submit(); return null;",
            vec![],
        )
        .await
        .expect("submit the forged form");
    b.wait_text("h1", "403", WITHIN).await;
    assert!(b.text("p.error").await.unwrap_or_default().contains("CSRF"));
    b.screenshots("csrf-refused").await;
    let job = gw.client(TEAM_B_TOKEN).job(&own).await;
    assert_eq!(job["state"], "queued", "{job:#}");

    // The real form, confirmed, cancels.
    b.goto(&format!("{url}/console/jobs/{own}")).await;
    b.click("#cancel-form input[name=confirm]").await;
    b.click("#cancel").await;
    b.wait_text("#job-state", "cancelled", WITHIN).await;
    log_out(&b, &gw).await;
    b.screenshots("logged-out").await;
    assert!(b.artifacts().join("job-pending.png").is_file());
}

/// The login-CSRF attack, in a real browser: a page on another site (`localhost` is
/// not the gateway's `127.0.0.1`) auto-submits a team-b token to the console's login
/// form. The browser must not become team-b's member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_posted_from_another_site_opens_no_session() {
    let gw = gateway().await;
    let page = format!(
        "<!doctype html><title>free GPUs</title>\
         <form id=f method=post action=\"{}/login\">\
         <input type=hidden name=token value=\"{TEAM_B_TOKEN}\"></form>\
         <script>document.getElementById('f').submit()</script>",
        gw.url
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("attacker listener");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let b = Browser::start("console-login-csrf").await;
    b.goto(&format!("http://localhost:{port}/")).await;
    // The form posted (the browser is on the gateway now), and was refused.
    b.wait_text("#login-error", "another site", WITHIN).await;
    b.screenshots("login-csrf-refused").await;
    b.goto(&format!("{}/console/jobs", gw.url)).await;
    assert_eq!(
        b.path().await,
        "/login",
        "the attacker's login opened a session"
    );
    // The console's own form still logs in.
    log_in(&b, &gw, TEAM_B_TOKEN).await;
}

/// The cookie and form rules over plain HTTP (no browser needed).
#[tokio::test]
async fn sessions_cookies_and_csrf_over_http() {
    let gw = gateway().await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let login = |token: &'static str, https: bool| {
        let mut r = http
            .post(format!("{}/login", gw.url))
            .form(&[("token", token)]);
        if https {
            r = r.header("x-forwarded-proto", "https");
        }
        r.send()
    };
    let root = http
        .get(format!("{}/", gw.url))
        .send()
        .await
        .expect("GET /");
    assert_eq!(root.status(), 200);
    assert!(root.text().await.expect("body").contains("name=\"token\""));
    let bad = login("wrong", false).await.expect("login");
    assert_eq!(bad.status(), 401);
    assert!(bad.headers().get("set-cookie").is_none());
    // Login CSRF: a good token posted from another site opens no session; the
    // console's own page (its origin, or the browser's same-origin mark) does.
    for (name, value, status) in [
        ("origin", "http://attacker.example", 403),
        ("sec-fetch-site", "cross-site", 403),
        ("sec-fetch-site", "same-site", 403),
        ("origin", gw.url.as_str(), 303),
        ("sec-fetch-site", "same-origin", 303),
    ] {
        let answer = http
            .post(format!("{}/login", gw.url))
            .header(name, value)
            .form(&[("token", TEAM_B_TOKEN)])
            .send()
            .await
            .expect("login");
        assert_eq!(answer.status(), status, "{name}: {value}");
        let cookie = answer.headers().get("set-cookie").is_some();
        assert_eq!(cookie, status == 303, "{name}: {value}");
    }

    let ok = login(TEAM_B_TOKEN, false).await.expect("login");
    assert_eq!(ok.status(), 303);
    let cookie = ok.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_string();
    assert!(cookie.starts_with("forge_session="), "{cookie}");
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "{cookie}");
    let secure = login(TEAM_B_TOKEN, true).await.expect("login");
    assert!(
        secure.headers()["set-cookie"]
            .to_str()
            .expect("ascii")
            .contains("Secure")
    );

    let session = cookie.split(';').next().expect("pair").to_string();
    // Logging out needs the session's CSRF token.
    let forged = http
        .post(format!("{}/logout", gw.url))
        .header("cookie", &session)
        .form(&[("csrf", "forged")])
        .send()
        .await
        .expect("logout");
    assert_eq!(forged.status(), 403);
    let page = http
        .get(format!("{}/console/jobs", gw.url))
        .header("cookie", &session)
        .send()
        .await
        .expect("jobs page");
    assert_eq!(page.status(), 200, "the session survived the forged logout");
    let html = page.text().await.expect("html");
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a CSRF field")
        .to_string();
    let out = http
        .post(format!("{}/logout", gw.url))
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .expect("logout");
    assert_eq!(out.status(), 303);
    assert!(
        out.headers()["set-cookie"]
            .to_str()
            .expect("ascii")
            .contains("Max-Age=0")
    );
    let after = http
        .get(format!("{}/console/jobs", gw.url))
        .header("cookie", &session)
        .send()
        .await
        .expect("jobs page");
    assert_eq!(after.status(), 303);
    assert_eq!(after.headers()["location"], "/login");
    // No session, no feed.
    let feed = http
        .get(format!("{}/console/live/jobs", gw.url))
        .send()
        .await
        .expect("feed");
    assert_eq!(feed.status(), 303);
}

/// The team feed is resumable: reconnecting with `Last-Event-ID` first replays what was
/// missed; an id the feed no longer knows gets `resync`.
#[tokio::test]
async fn the_job_feed_resumes_with_last_event_id() {
    let gw = gateway().await;
    let watch = |last: Option<String>| {
        let mut r = gw.get("/v1/jobs/watch");
        if let Some(id) = last {
            r = r.header("last-event-id", id);
        }
        r.send()
    };
    let mut first = watch(None).await.expect("watch");
    assert_eq!(first.status(), 200);
    let mut buf = String::new();
    let a = submit(&gw, &gw.token, &sixteen_gpus("feed-a")).await;
    let (name, id, data) = next_event(&mut first, &mut buf, WITHIN).await;
    assert_eq!(
        (name.as_str(), data["jobId"].as_str()),
        ("state", Some(a.as_str()))
    );
    let last = id.expect("an event id");
    drop(first);

    // Missed while disconnected.
    let b = submit(&gw, &gw.token, &sixteen_gpus("feed-b")).await;
    let mut resumed = watch(Some(last.to_string())).await.expect("watch");
    let mut buf = String::new();
    let mut previous = last;
    loop {
        let (name, id, data) = next_event(&mut resumed, &mut buf, WITHIN).await;
        let id = id.expect("changes carry ids");
        assert!(id > previous, "ids increase: {id} after {previous}");
        previous = id;
        if name == "state" && data["jobId"] == b.as_str() {
            assert!(data.get("from").is_none(), "{data}");
            break;
        }
    }

    // An id from before this process (or long gone) asks the client to re-read.
    let mut stale = watch(Some("1".into())).await.expect("watch");
    let (name, _, _) = next_event(&mut stale, &mut String::new(), WITHIN).await;
    assert_eq!(name, "resync");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_playground_in_a_real_browser() {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n  - name: bob\n    team: team-b\n    role: member\n    token_sha256: {}\n",
            forge_gateway::auth::hash_token(TEAM_B_TOKEN),
        ),
    )
    .expect("tokens file");
    let tokens = tokens.display().to_string();
    let gw = TestGateway::start(
        "h100=1x8",
        &[
            ("FORGE_TOKENS_FILE", tokens.as_str()),
            ("FORGE_IMAGE_VLLM", "vllm/vllm-openai:v0.11.0"),
        ],
    )
    .await;
    let b = Browser::start("playground").await;
    let url = &gw.url;
    log_in(&b, &gw, &gw.token).await;

    // Start one from the form; its page follows it to ready without a reload.
    b.goto(&format!("{url}/console/playgrounds")).await;
    b.fill("#model", "team-a/tiny").await;
    b.fill("#gpus", "1").await;
    b.fill("#ttl", "3600").await;
    b.fill("#idle", "600").await;
    b.click("#start").await;
    let id = eventually("the playground's page", WITHIN, || async {
        match b.path().await.strip_prefix("/console/playgrounds/") {
            Some(id) if !id.is_empty() => Ok(id.to_string()),
            _ => Err(not_yet(b.path().await)),
        }
    })
    .await;
    b.client
        .execute("window.forgeNoReload = 7; return null;", vec![])
        .await
        .expect("mark the page");
    b.wait_text("#pg-state", "ready", WITHIN).await;
    let marker = b
        .client
        .execute("return window.forgeNoReload;", vec![])
        .await
        .expect("read the mark");
    assert_eq!(marker, json!(7), "the page reloaded");
    b.wait_text("#pg-endpoint", &format!("/v1/playgrounds/{id}/v1"), WITHIN)
        .await;
    b.wait_text("#pg-reclaim", "idle", WITHIN).await;
    b.screenshots("playground-ready").await;

    // Talk to it.
    b.fill("#message", "hello from the console").await;
    b.click("#send").await;
    b.wait_text(
        "#answer",
        "Stand-in reply to: hello from the console",
        WITHIN,
    )
    .await;
    b.screenshots("playground-chat").await;

    // Extend it: the reclaim moves to the hard TTL's new end (the idle TTL is sooner).
    let before = b.text("#pg-expires").await.unwrap_or_default();
    b.fill("#extend-seconds", "600").await;
    b.click("#extend").await;
    b.wait_text("#pg-state", "ready", WITHIN).await;
    let (_, api) = gw
        .client(&gw.token)
        .call(reqwest::Method::GET, &format!("/v1/playgrounds/{id}"))
        .await;
    let created = api["createdAtMs"].as_i64().expect("created");
    assert_eq!(
        api["expiresAtMs"].as_i64(),
        Some(created + 4_200_000),
        "{api:#} (was {before})"
    );

    // Listed for its team; another team's member gets 404 on its page.
    b.goto(&format!("{url}/console/playgrounds")).await;
    b.wait_text(&format!("#pg-{id}"), "ready", WITHIN).await;
    b.screenshots("playgrounds").await;

    // End it (confirmed): the state says so.
    b.goto(&format!("{url}/console/playgrounds/{id}")).await;
    b.click("#end-form input[name=confirm]").await;
    b.click("#end").await;
    b.wait_text("#pg-state", "expired", WITHIN).await;
    b.wait_text("#pg-reason", "deleted", WITHIN).await;
    b.screenshots("playground-ended").await;
    log_out(&b, &gw).await;
    log_in(&b, &gw, TEAM_B_TOKEN).await;
    b.goto(&format!("{url}/console/playgrounds/{id}")).await;
    b.wait_text("h1", "404", WITHIN).await;
    b.goto(&format!("{url}/console/playgrounds")).await;
    b.wait_text("main", "No playgrounds.", WITHIN).await;
}
