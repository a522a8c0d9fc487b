//! How a playground's answer is passed on: chunk by chunk as it arrives (nothing is
//! buffered), with SSE keep-alive comments while the server is silent (e.g. still on
//! its first token), an **idle** timeout (no chunk for that long ends the stream; a
//! long generation that keeps producing is never cut), and an explicit SSE `error`
//! event when the upstream stream breaks or idles out, so a client can tell a broken
//! answer from a finished one. Notices (the reclaim warning, [`reclaim_notice`]) go
//! into an SSE stream as comments. Comments are only ever written between two events
//! (after a chunk that ends one), never inside an event the server split across
//! chunks. When the gateway begins to stop ([`ending_at`]) the relay ends too, with an
//! error event, so the server can drain ([`crate::shutdown`]).

use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::domain::EndReason;

/// The comment sent while the server is silent (ignored by SSE clients).
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// Relay settings.
#[derive(Debug, Clone, Copy)]
pub struct RelayTimes {
    /// Silence after which a keep-alive comment goes out (SSE only).
    pub keep_alive: Duration,
    /// Silence after which the stream is ended with an error event.
    pub idle: Duration,
}

impl Default for RelayTimes {
    fn default() -> Self {
        RelayTimes {
            keep_alive: Duration::from_secs(10),
            idle: Duration::from_secs(300),
        }
    }
}

/// An SSE `error` event (OpenAI clients raise on a `data` object with `error`).
pub fn error_event(message: &str) -> Bytes {
    let data =
        serde_json::json!({"error": {"message": message, "type": "upstream_error", "code": 502}});
    Bytes::from(format!("event: error\ndata: {data}\n\n"))
}

/// The reclaim warning as an SSE comment: `: forge-warning {json}` with when the
/// playground will be reclaimed and why, and how to keep it (`extend` for the hard
/// TTL; any request restarts the idle clock). A comment, not an event: OpenAI
/// clients hand every `data` of an unnamed or unknown event to the caller as a chunk,
/// so an event would break them; clients that want the warning read the comment.
pub fn reclaim_notice(playground: &str, at_ms: i64, reason: EndReason) -> Bytes {
    let keep = match reason {
        EndReason::Idle => "send a request (any request restarts the idle clock)".to_string(),
        _ => format!("POST /v1/playgrounds/{playground}/extend"),
    };
    let data = serde_json::json!({"playground": playground, "reclaimAtMs": at_ms,
        "reason": reason.as_str(), "keep": keep});
    Bytes::from(format!(": forge-warning {data}\n\n"))
}

type Upstream<E> = Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>>;
/// Comments to pass into an SSE stream at the next boundary between events.
pub type Notices = Pin<Box<dyn Stream<Item = Bytes> + Send>>;

struct State<E> {
    upstream: Upstream<E>,
    notices: Option<Notices>,
    /// A notice waiting for the end of the event in progress.
    held: Option<Bytes>,
    /// Whether what was sent so far ends between two events.
    boundary: bool,
    last: Instant,
    done: bool,
}

/// Whether `chunk` leaves an SSE stream between two events (it ends one).
fn ends_event(chunk: &[u8]) -> bool {
    chunk.ends_with(b"\n\n") || chunk.ends_with(b"\r\n\r\n")
}

/// Relays `upstream`. With `sse`, silence gets keep-alive comments, `notices` are
/// passed on as they come, and a failure gets an error event; otherwise notices are
/// polled but not written, and a failure just ends the body (a client sees it
/// truncated).
pub fn relay<E: std::fmt::Display + Send + 'static>(
    upstream: Upstream<E>,
    sse: bool,
    times: RelayTimes,
    notices: Option<Notices>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let state = State {
        upstream,
        notices,
        held: None,
        boundary: true,
        last: Instant::now(),
        done: false,
    };
    futures::stream::unfold(state, move |mut st| async move {
        if st.done {
            return None;
        }
        loop {
            if st.boundary
                && let Some(notice) = st.held.take()
            {
                return Some((Ok(notice), st));
            }
            let idle_left = times.idle.saturating_sub(st.last.elapsed());
            if idle_left.is_zero() {
                st.done = true;
                tracing::warn!(idle = ?times.idle, "playground stream idle: ended");
                return sse.then(|| {
                    (
                        Ok(error_event("the model server sent nothing for too long")),
                        st,
                    )
                });
            }
            let wait = if sse {
                times.keep_alive.min(idle_left)
            } else {
                idle_left
            };
            let notice = async {
                match st.notices.as_mut() {
                    Some(n) => n.next().await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                biased;
                item = tokio::time::timeout(wait, st.upstream.next()) => Ok(item),
                n = notice => Err(n),
            };
            match next {
                // Polled either way (the notice stream may do work, e.g. keep the
                // playground's idle clock running), written only into SSE.
                Err(Some(n)) => {
                    if sse {
                        st.held = Some(n);
                    }
                }
                Err(None) => st.notices = None,
                Ok(Ok(Some(Ok(chunk)))) => {
                    st.last = Instant::now();
                    st.boundary = ends_event(&chunk);
                    return Some((Ok(chunk), st));
                }
                Ok(Ok(Some(Err(e)))) => {
                    st.done = true;
                    tracing::warn!(error = %e, "playground stream broke");
                    let end = if st.boundary {
                        error_event("the model server's stream broke")
                    } else {
                        // End the event in progress, so the error is an event of its own.
                        let e = error_event("the model server's stream broke");
                        Bytes::from([&b"\n\n"[..], &e[..]].concat())
                    };
                    return sse.then(|| (Ok(end), st));
                }
                Ok(Ok(None)) => return None,
                Ok(Err(_)) if sse && st.boundary && st.last.elapsed() < times.idle => {
                    return Some((Ok(Bytes::from_static(KEEP_ALIVE)), st));
                }
                Ok(Err(_)) => continue,
            }
        }
    })
}

/// `body` until `stop` resolves (the gateway is stopping); then, for SSE, an error
/// event saying so (the client retries), and the end.
pub fn ending_at<S>(
    body: S,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    sse: bool,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    type Stop = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
    let stop: Stop = Box::pin(stop);
    futures::stream::unfold(
        (Box::pin(body), stop, false),
        move |(mut body, mut stop, done)| async move {
            if done {
                return None;
            }
            tokio::select! {
                biased;
                item = body.next() => item.map(|i| (i, (body, stop, false))),
                () = &mut stop => sse.then(|| {
                    let e = error_event("the gateway is restarting; send the request again");
                    (Ok(e), (body, stop, true))
                }),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times() -> RelayTimes {
        RelayTimes {
            keep_alive: Duration::from_secs(1),
            idle: Duration::from_secs(5),
        }
    }

    async fn collect(s: impl Stream<Item = Result<Bytes, Infallible>>) -> Vec<String> {
        s.map(|c| String::from_utf8_lossy(&c.expect("infallible")).into_owned())
            .collect()
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn silence_gets_keep_alives_then_the_chunks_pass_unchanged() {
        let up = futures::stream::iter([
            Ok::<_, String>(Bytes::from("data: 1\n\n")),
            Ok(Bytes::from("data: 2\n\n")),
        ])
        .then(|c| async move {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            c
        });
        let out = collect(relay(Box::pin(up), true, times(), None)).await;
        assert_eq!(
            out,
            [
                ": keep-alive\n\n",
                ": keep-alive\n\n",
                "data: 1\n\n",
                ": keep-alive\n\n",
                ": keep-alive\n\n",
                "data: 2\n\n"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_broken_or_idle_upstream_ends_with_an_error_event() {
        let up = futures::stream::iter([Ok(Bytes::from("data: 1\n\n")), Err("reset".to_string())]);
        let out = collect(relay(Box::pin(up), true, times(), None)).await;
        assert_eq!(out.len(), 2);
        assert!(out[1].starts_with("event: error\ndata: {"), "{out:?}");
        assert!(out[1].contains("broke"));
        let silent = futures::stream::pending::<Result<Bytes, String>>();
        let out = collect(relay(Box::pin(silent), true, times(), None)).await;
        assert_eq!(
            out.iter()
                .filter(|c| c.as_str() == ": keep-alive\n\n")
                .count(),
            4
        );
        assert!(out.last().expect("error").contains("sent nothing"));
        // Not SSE: no comments, no event — the body just ends.
        let silent = futures::stream::pending::<Result<Bytes, String>>();
        assert!(
            collect(relay(Box::pin(silent), false, times(), None))
                .await
                .is_empty()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopping_gateway_ends_the_relay_with_an_error_event() {
        let chunks = futures::stream::iter([Ok::<_, Infallible>(Bytes::from("data: 1\n\n"))])
            .chain(futures::stream::pending());
        let stop = tokio::time::sleep(Duration::from_secs(1));
        let out = collect(ending_at(chunks, stop, true)).await;
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0], "data: 1\n\n");
        assert!(
            out[1].starts_with("event: error\n") && out[1].contains("restarting"),
            "{out:?}"
        );
        // Not SSE: the body just ends.
        let chunks = futures::stream::iter([Ok::<_, Infallible>(Bytes::from("{}"))])
            .chain(futures::stream::pending());
        let stop = tokio::time::sleep(Duration::from_secs(1));
        assert_eq!(collect(ending_at(chunks, stop, false)).await, ["{}"]);
    }

    #[tokio::test(start_paused = true)]
    async fn notices_go_between_events_never_inside_one() {
        // The server splits its second event across two chunks, with a pause inside
        // it during which the notice arrives: it waits for the event's end.
        let up = futures::stream::iter([
            (0, "data: 1\n\n"),
            (100, "data: {\"par"),
            (3000, "t\": 2}\n\n"),
            (100, "data: [DONE]\n\n"),
        ])
        .then(|(ms, c)| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, String>(Bytes::from(c))
        });
        let notice = reclaim_notice("p1", 42, EndReason::TtlExpired);
        let notices: Notices = Box::pin(
            futures::stream::once({
                let n = notice.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    n
                }
            })
            .chain(futures::stream::pending()),
        );
        let out = collect(relay(Box::pin(up), true, times(), Some(notices))).await;
        let text = String::from(&out.concat());
        assert_eq!(
            out,
            [
                "data: 1\n\n",
                "data: {\"par",
                "t\": 2}\n\n",
                &String::from_utf8_lossy(&notice),
                "data: [DONE]\n\n"
            ],
            "{text}"
        );
        assert!(
            notice.starts_with(b": forge-warning {")
                && String::from_utf8_lossy(&notice).contains("\"reclaimAtMs\":42"),
            "{notice:?}"
        );
        // No keep-alive either inside the split event (3 s of silence, keep-alive 1 s).
        assert!(!out.iter().any(|c| c == ": keep-alive\n\n"), "{out:?}");
        // Not SSE: notices are not written into the body.
        let up = futures::stream::iter([Ok::<_, String>(Bytes::from("{}"))]);
        let notices: Notices = Box::pin(futures::stream::iter([notice]));
        assert_eq!(
            collect(relay(Box::pin(up), false, times(), Some(notices))).await,
            ["{}"]
        );
    }
}
