//! Playgrounds in the console: `GET /console/playgrounds` lists the viewer's team's
//! playgrounds (admins: every team's) with a form to start one; `GET
//! /console/playgrounds/{id}` shows one — its state and the pod's phase with the same
//! pending reason as the API (a crash loop's last lines), when it will be reclaimed
//! and why, the warning once given, the endpoint to call — and lets its team talk to
//! it (a chat form: one non-streamed completion through the gateway, as the API
//! proxies it), extend it and end it. Every form carries the session's CSRF token;
//! ending asks for a confirmation. The summary (`?part=live`) is re-read when the
//! playground's feed (`/console/live/playgrounds/{id}`) reports a change.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use futures::StreamExt;
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{self, Nav, csrf_field};
use super::present;
use super::session::Viewer;
use super::{Console, PageError};
use crate::playground::{CreatePlayground, PlaygroundView};

/// Longest chat answer read for the page (the rest is cut).
const MAX_ANSWER_BYTES: usize = 256 << 10;

/// A playground's state: its name in text, the colour only a hint.
fn badge(state: &str) -> Markup {
    html! { span class={ "state state-" (state) } data-state=(state) { (state) } }
}

/// `GET /console/playgrounds`.
pub async fn list(State(console): State<Console>, viewer: Viewer) -> Result<Response, PageError> {
    let playgrounds = console.app.playgrounds.list(&viewer.caller).await?;
    let enabled = console.app.config.image_for("vllm").is_some();
    let body = html! {
        h1 { "Playgrounds" }
        p { "An inference server for a model on your team's GPUs, reached through the gateway and reclaimed when its time is up." }
        @if enabled {
            section aria-labelledby="new-title" {
                h2 #new-title { "Start one" }
                form method="post" action="/console/playgrounds" #new-playground {
                    (csrf_field(&viewer))
                    label { "Model (an id, or a directory on your team's storage) " input #model name="model" required maxlength="512"; }
                    label { "GPUs " input #gpus name="gpus" type="number" min="1" max="8" value="1" required; }
                    label { "Series (optional) " input #series name="series"; }
                    label { "Lifetime, seconds " input #ttl name="ttl_seconds" type="number" min="1" value="3600" required; }
                    label { "Idle time-out, seconds (optional) " input #idle name="idle_seconds" type="number" min="1"; }
                    button type="submit" #start { "Start" }
                }
            }
        } @else {
            p.error { "Playgrounds are not enabled on this gateway (no inference image is configured)." }
        }
        h2 { "Yours" }
        @if playgrounds.is_empty() { p { "No playgrounds." } }
        @else {
            div.scroll { table #playgrounds {
                thead { tr {
                    th scope="col" { "Id" } th scope="col" { "Team" } th scope="col" { "Model" }
                    th scope="col" { "GPUs" } th scope="col" { "State" } th scope="col" { "Ends" }
                } }
                tbody { @for p in &playgrounds {
                    tr #{ "pg-" (p.record.id) } {
                        td { a href={ "/console/playgrounds/" (p.record.id) } { (p.record.id) } }
                        td { (p.record.team) } td { (p.record.model) }
                        td { (p.record.gpus) @if let Some(s) = &p.record.series { " × " (s) } }
                        td { (badge(p.record.state.as_str())) }
                        td { @match (&p.reclaim, p.record.ended_at_ms) {
                            (Some(r), _) => { (reclaim_words(r.at_ms)) " " (present::when(r.at_ms)) " (" (r.reason.as_str()) ")" },
                            (None, Some(at)) => { "ended " (present::when(at)) },
                            (None, None) => {},
                        } }
                    }
                } }
            } }
        }
    };
    Ok(layout::page(
        "Playgrounds",
        Some(&viewer),
        Nav::Playgrounds,
        body,
    ))
}

/// The start form (blank optional fields are absent).
#[derive(Debug, Deserialize)]
pub struct StartForm {
    #[serde(default)]
    csrf: String,
    model: String,
    gpus: u32,
    #[serde(default)]
    series: String,
    ttl_seconds: u64,
    #[serde(default)]
    idle_seconds: String,
}

/// `POST /console/playgrounds`.
pub async fn start(
    State(console): State<Console>,
    viewer: Viewer,
    Form(f): Form<StartForm>,
) -> Result<Response, PageError> {
    if !viewer.csrf_ok(&f.csrf) {
        return Err(PageError::csrf());
    }
    let idle_seconds = match f.idle_seconds.trim() {
        "" => None,
        s => Some(s.parse::<u64>().map_err(|_| {
            PageError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "the idle time-out is a number of seconds",
            )
        })?),
    };
    let req = CreatePlayground {
        model: f.model.trim().to_string(),
        series: Some(f.series.trim().to_string()).filter(|s| !s.is_empty()),
        gpus: f.gpus,
        ttl_seconds: f.ttl_seconds,
        idle_seconds,
        args: Vec::new(),
    };
    let view = console.app.playgrounds.create(&viewer.caller, req).await?;
    Ok(Redirect::to(&format!("/console/playgrounds/{}", view.record.id)).into_response())
}

/// The detail page's query.
#[derive(Debug, Default, Deserialize)]
pub struct DetailParams {
    #[serde(default)]
    part: Option<String>,
}

/// The summary: state, phase, pending reason, reclaim, endpoint.
fn summary(p: &PlaygroundView) -> Markup {
    let r = &p.record;
    html! {
        p { "State: " span #pg-state { (badge(r.state.as_str())) }
            @if let Some(reason) = &r.reason { " — " span #pg-reason { (reason) } } }
        @if let Some(pod) = &p.pod {
            p #pg-phase { "Server: " strong { (pod.phase) }
                @if let Some(why) = &pod.reason { " — " (why) } }
            @if let Some(pending) = &pod.pending {
                @if !pending.last_lines.is_empty() {
                    details open { summary { "Its last lines" }
                        pre.log #pg-last-lines { @for l in &pending.last_lines { (l) "\n" } } }
                }
            }
        }
        @if let Some(rc) = &p.reclaim {
            p #pg-reclaim { (reclaim_words(rc.at_ms)) " " span #pg-expires { (present::when(rc.at_ms)) } " (" (rc.reason.as_str()) ")"
                @if let Some(w) = rc.warned_at_ms { strong.warning { " — warned " (present::when(w)) } } }
        }
        @if let Some(at) = r.ended_at_ms { p { "Ended " (present::when(at)) } }
        p { "Endpoint (OpenAI-compatible, with your token): " code #pg-endpoint { (p.endpoint) } }
    }
}

/// A reclaim still ahead is announced, one past is reported.
fn reclaim_words(at_ms: i64) -> &'static str {
    if at_ms > crate::store::now_ms() {
        "Will be reclaimed"
    } else {
        "Reclaimed"
    }
}

/// The question asked and the server's answer (or why there is none).
type Exchange = Option<(String, Result<String, String>)>;

fn detail_page(p: &PlaygroundView, viewer: &Viewer, exchange: &Exchange) -> Response {
    let r = &p.record;
    let live = !r.state.is_terminal();
    let body = html! {
        h1 { "Playground " (r.id) }
        p { "Team " (r.team) " · model " code { (r.model) } " · " (r.gpus) " GPU(s)"
            @if let Some(s) = &r.series { " on " (s) } " · started " (present::when(r.created_at_ms)) " by " (r.created_by) }
        @if live {
            section #live data-refresh={ "/console/playgrounds/" (r.id) "?part=live" } data-feed={ "/console/live/playgrounds/" (r.id) } {
                (summary(p))
            }
        } @else {
            section #live { (summary(p)) }
        }
        @if live {
            section aria-labelledby="chat-title" {
                h2 #chat-title { "Talk to it" }
                form method="post" action={ "/console/playgrounds/" (r.id) "/chat" } #chat-form {
                    (csrf_field(viewer))
                    label { "Message " textarea #message name="message" rows="3" required maxlength="4000" {} }
                    button type="submit" #send { "Send" }
                }
                @if let Some((asked, answer)) = exchange {
                    div #chat {
                        p { strong { "You: " } (asked) }
                        @match answer {
                            Ok(text) => p #answer { strong { "Model: " } (text) },
                            Err(why) => p.error #answer role="alert" { (why) },
                        }
                    }
                }
            }
            section aria-labelledby="extend-title" {
                h2 #extend-title { "Extend" }
                form method="post" action={ "/console/playgrounds/" (r.id) "/extend" } #extend-form {
                    (csrf_field(viewer))
                    label { "Seconds " input #extend-seconds name="seconds" type="number" min="1" value="3600" required; }
                    button type="submit" #extend { "Extend" }
                }
            }
            section aria-labelledby="end-title" {
                h2 #end-title { "End" }
                form method="post" action={ "/console/playgrounds/" (r.id) "/end" } #end-form {
                    (csrf_field(viewer))
                    label { input type="checkbox" name="confirm" value="yes" required; " Yes, end this playground and free its GPUs" }
                    button type="submit" #end { "End playground" }
                }
            }
        }
    };
    layout::page(
        &format!("Playground {}", r.id),
        Some(viewer),
        Nav::Playgrounds,
        body,
    )
}

/// `GET /console/playgrounds/{id}`.
pub async fn detail(
    State(console): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(q): Query<DetailParams>,
) -> Result<Response, PageError> {
    let view = console.app.playgrounds.get(&viewer.caller, &id).await?;
    if q.part.as_deref() == Some("live") {
        return Ok(Html(summary(&view).into_string()).into_response());
    }
    Ok(detail_page(&view, &viewer, &None))
}

/// The chat form.
#[derive(Debug, Deserialize)]
pub struct ChatForm {
    #[serde(default)]
    csrf: String,
    message: String,
}

/// `POST /console/playgrounds/{id}/chat`: one non-streamed chat completion.
pub async fn chat(
    State(console): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(f): Form<ChatForm>,
) -> Result<Response, PageError> {
    if !viewer.csrf_ok(&f.csrf) {
        return Err(PageError::csrf());
    }
    let pgs = &console.app.playgrounds;
    let view = pgs.get(&viewer.caller, &id).await?;
    let body = serde_json::json!({"model": view.record.model, "max_tokens": 512,
        "messages": [{"role": "user", "content": f.message}]});
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let answer = match pgs
        .call(
            &viewer.caller,
            &id,
            http::Method::POST,
            "/v1/chat/completions",
            headers,
            bytes::Bytes::from(body.to_string()),
        )
        .await
    {
        Ok(resp) => {
            let status = resp.status;
            let mut text = Vec::new();
            let mut stream = resp.body;
            while let Some(Ok(chunk)) = stream.next().await {
                text.extend_from_slice(&chunk);
                if text.len() > MAX_ANSWER_BYTES {
                    break;
                }
            }
            let v: serde_json::Value = serde_json::from_slice(&text).unwrap_or_default();
            match v["choices"][0]["message"]["content"].as_str() {
                Some(t) if status.is_success() => Ok(t.to_string()),
                _ => Err(format!(
                    "the server answered {status}: {}",
                    v["error"]["message"]
                        .as_str()
                        .or(v["message"].as_str())
                        .unwrap_or("no answer")
                )),
            }
        }
        Err(e) => Err(PageError::from(e).1),
    };
    let view = pgs.get(&viewer.caller, &id).await?;
    Ok(detail_page(&view, &viewer, &Some((f.message, answer))))
}

/// The extend form.
#[derive(Debug, Deserialize)]
pub struct ExtendForm {
    #[serde(default)]
    csrf: String,
    seconds: u64,
}

/// `POST /console/playgrounds/{id}/extend`.
pub async fn extend(
    State(console): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(f): Form<ExtendForm>,
) -> Result<Response, PageError> {
    if !viewer.csrf_ok(&f.csrf) {
        return Err(PageError::csrf());
    }
    console
        .app
        .playgrounds
        .extend(&viewer.caller, &id, f.seconds)
        .await?;
    Ok(Redirect::to(&format!("/console/playgrounds/{id}")).into_response())
}

/// The end form.
#[derive(Debug, Deserialize)]
pub struct EndForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirm: Option<String>,
}

/// `POST /console/playgrounds/{id}/end`.
pub async fn end(
    State(console): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(f): Form<EndForm>,
) -> Result<Response, PageError> {
    if !viewer.csrf_ok(&f.csrf) {
        return Err(PageError::csrf());
    }
    if f.confirm.as_deref() != Some("yes") {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "confirm the end (the checkbox); nothing was changed",
        ));
    }
    console.app.playgrounds.delete(&viewer.caller, &id).await?;
    Ok(Redirect::to(&format!("/console/playgrounds/{id}")).into_response())
}
