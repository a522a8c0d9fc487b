//! Following a job: its changes (`GET /v1/jobs/{id}/watch`, server-sent events) and
//! its log (`GET /v1/jobs/{id}/logs?follow=true&offset=N`). A dropped connection is
//! picked up again on its own — the watch from a fresh snapshot, the log from the
//! last byte received, so no line is lost or repeated — and both end with the job's
//! final state. Ctrl-C detaches ([`CliError::Detached`]); nothing here ever cancels.

use std::io::Write;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::Method;
use serde_json::Value;

use crate::api::{Api, check};
use crate::exit::CliError;
use crate::output::{Format, emit_item, field};
use crate::progress::note;

/// Pause before reconnecting.
const RECONNECT: Duration = Duration::from_millis(500);
/// Reconnections in a row without progress before giving up.
const MAX_RETRIES: u32 = 20;

/// The job's final (or current) state and reason.
#[derive(Debug, Clone)]
pub struct Ended {
    pub state: String,
    pub reason: Option<String>,
}

fn terminal(state: &str) -> bool {
    matches!(
        state,
        "succeeded" | "failed" | "cancelled" | "timed-out" | "rejected"
    )
}

/// Runs `work` until it finishes or Ctrl-C, which detaches from job `id`.
pub async fn detachable<T>(
    id: &str,
    work: impl Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    tokio::select! {
        r = work => r,
        _ = tokio::signal::ctrl_c() => Err(CliError::Detached(id.to_string())),
    }
}

/// A server-sent event's data; with `-o json|yaml` the event is printed as
/// `{"event", "data"}` on stdout.
pub fn event_data(format: Format, event: &eventsource_stream::Event) -> Result<Value, CliError> {
    let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
    if format.is_data() {
        emit_item(
            format,
            &serde_json::json!({"event": event.event, "data": data}),
        )?;
    }
    Ok(data)
}

/// A line for people describing a watch event.
pub fn describe(name: &str, data: &Value) -> Option<String> {
    match name {
        "snapshot" => {
            let mut line = format!("{}: {}", field(data, "/job/id"), field(data, "/job/state"));
            if let Some(q) = data.get("queue") {
                line.push_str(&format!(
                    " (#{} in {}: {} {})",
                    field(q, "/position"),
                    field(q, "/series"),
                    field(q, "/code"),
                    field(q, "/reason")
                ));
            } else if let Some(r) = data.pointer("/job/reason").and_then(Value::as_str) {
                line.push_str(&format!(" ({r})"));
            }
            Some(line)
        }
        "state" => {
            let mut line = format!("{}: {}", field(data, "/jobId"), field(data, "/to"));
            if let Some(r) = data.get("reason").and_then(Value::as_str) {
                line.push_str(&format!(" ({r})"));
            }
            Some(line)
        }
        "standing" => Some(format!(
            "{}: queued #{} in {}: {} {}",
            field(data, "/jobId"),
            field(data, "/queue/position"),
            field(data, "/queue/series"),
            field(data, "/queue/code"),
            field(data, "/queue/reason")
        )),
        "pending" => Some(format!(
            "pending: {} {} ({})",
            field(data, "/code"),
            field(data, "/message"),
            field(data, "/object")
        )),
        _ => None,
    }
}

/// Watches job `id`, printing each change (to stderr for people; to stdout with
/// `-o json|yaml`), until it reaches a terminal state — or, with `until_running`,
/// until it runs.
pub async fn watch(
    api: &Api,
    id: &str,
    format: Format,
    until_running: bool,
) -> Result<Ended, CliError> {
    let mut retries = 0;
    loop {
        let req = api
            .request(Method::GET, &format!("/v1/jobs/{id}/watch"))
            .header("accept", "text/event-stream");
        let resp = match api.send(req).await {
            Ok(r) => r,
            Err(e @ CliError::Unreachable { .. }) if retries < MAX_RETRIES => {
                retries += 1;
                note(format!("{e}; reconnecting"));
                tokio::time::sleep(RECONNECT).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut events = resp.bytes_stream().eventsource();
        let mut last = None;
        while let Some(event) = events.next().await {
            let Ok(event) = event else { break };
            retries = 0;
            let data = event_data(format, &event)?;
            if !format.is_data()
                && let Some(line) = describe(&event.event, &data)
            {
                note(line);
            }
            let (state, reason) = match event.event.as_str() {
                "snapshot" => (field(&data, "/job/state"), data.pointer("/job/reason")),
                "state" => (field(&data, "/to"), data.get("reason")),
                _ => continue,
            };
            let ended = Ended {
                state: state.clone(),
                reason: reason.and_then(Value::as_str).map(str::to_string),
            };
            if terminal(&state) || (until_running && state == "running") {
                return Ok(ended);
            }
            last = Some(ended);
        }
        // The stream ended without a terminal state: the connection dropped.
        retries += 1;
        if retries > MAX_RETRIES {
            return Err(CliError::Unreachable {
                url: api.base().to_string(),
                detail: format!(
                    "the watch of job {id} keeps dropping (last state {:?})",
                    last.map(|l| l.state)
                ),
            });
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Where a log read starts.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    Offset(u64),
    Tail(usize),
}

/// One read of the log into `out`; returns the offset reached.
async fn read_once(
    api: &Api,
    id: &str,
    which: &str,
    from: Start,
    follow: bool,
    out: &mut impl Write,
) -> Result<(u64, bool), CliError> {
    let query = match from {
        Start::Offset(n) => format!("offset={n}"),
        Start::Tail(n) => format!("tail={n}"),
    };
    let req = api.request(
        Method::GET,
        &format!("/v1/jobs/{id}/logs?{which}&{query}&follow={follow}"),
    );
    let resp = req.send().await.map_err(|e| CliError::Unreachable {
        url: api.base().to_string(),
        detail: e.to_string(),
    })?;
    let resp = check(resp).await?;
    let mut offset: u64 = resp
        .headers()
        .get("x-forge-log-offset")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(match from {
            Start::Offset(n) => n,
            Start::Tail(_) => 0,
        });
    let mut body = resp.bytes_stream();
    let mut clean = true;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(bytes) => {
                out.write_all(&bytes)
                    .and_then(|()| out.flush())
                    .map_err(|e| CliError::local("stdout", e))?;
                offset += bytes.len() as u64;
            }
            Err(_) => {
                clean = false;
                break;
            }
        }
    }
    Ok((offset, clean))
}

/// Prints the log of job `id` (`which`: the query selecting it, `name=driver`, `pod=…`) from `from`; with
/// `follow`, until the job has ended, reconnecting from the last byte received.
/// Returns the job's state at the end (followed) or `None`.
pub async fn logs(
    api: &Api,
    id: &str,
    which: &str,
    from: Start,
    follow: bool,
) -> Result<Option<Ended>, CliError> {
    let mut out = std::io::stdout();
    if !follow {
        read_once(api, id, which, from, false, &mut out).await?;
        return Ok(None);
    }
    let mut from = from;
    let mut retries = 0;
    loop {
        match read_once(api, id, which, from, true, &mut out).await {
            Ok((offset, _)) => {
                if let Start::Offset(before) = from
                    && offset > before
                {
                    retries = 0;
                }
                from = Start::Offset(offset);
            }
            Err(e @ CliError::Unreachable { .. }) if retries < MAX_RETRIES => {
                note(format!("{e}; reconnecting"));
            }
            Err(e) => return Err(e),
        }
        let job: Value = api.get(&format!("/v1/jobs/{id}")).await?;
        let state = field(&job, "/state");
        if terminal(&state) {
            // Whatever the job wrote last (archived by now, or still on the pod).
            if let Start::Offset(n) = from {
                match read_once(api, id, which, Start::Offset(n), false, &mut out).await {
                    Ok(_) | Err(CliError::Api { status: 404, .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(Some(Ended {
                state,
                reason: job["reason"].as_str().map(str::to_string),
            }));
        }
        retries += 1;
        if retries > MAX_RETRIES {
            return Err(CliError::Unreachable {
                url: api.base().to_string(),
                detail: format!("the log of job {id} keeps dropping"),
            });
        }
        tokio::time::sleep(RECONNECT).await;
    }
}
