//! How a playground's answer is passed on: chunk by chunk as it arrives (nothing is
//! buffered), with SSE keep-alive comments while the server is silent (e.g. still on
//! its first token), an **idle** timeout (no chunk for that long ends the stream; a
//! long generation that keeps producing is never cut), and an explicit SSE `error`
//! event when the upstream stream breaks or idles out, so a client can tell a broken
//! answer from a finished one. When the gateway begins to stop ([`ending_at`]) the
//! relay ends too, with an error event, so the server can drain
//! ([`crate::shutdown`]).

use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

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

type Upstream<E> = Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>>;

struct State<E> {
    upstream: Upstream<E>,
    last: Instant,
    done: bool,
}

/// Relays `upstream`. With `sse`, silence gets keep-alive comments and a failure an
/// error event; otherwise a failure just ends the body (a client sees it truncated).
pub fn relay<E: std::fmt::Display + Send + 'static>(
    upstream: Upstream<E>,
    sse: bool,
    times: RelayTimes,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let state = State {
        upstream,
        last: Instant::now(),
        done: false,
    };
    futures::stream::unfold(state, move |mut st| async move {
        if st.done {
            return None;
        }
        loop {
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
            match tokio::time::timeout(wait, st.upstream.next()).await {
                Ok(Some(Ok(chunk))) => {
                    st.last = Instant::now();
                    return Some((Ok(chunk), st));
                }
                Ok(Some(Err(e))) => {
                    st.done = true;
                    tracing::warn!(error = %e, "playground stream broke");
                    return sse.then(|| (Ok(error_event("the model server's stream broke")), st));
                }
                Ok(None) => return None,
                Err(_) if sse && st.last.elapsed() < times.idle => {
                    return Some((Ok(Bytes::from_static(KEEP_ALIVE)), st));
                }
                Err(_) => continue,
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
        let out = collect(relay(Box::pin(up), true, times())).await;
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
        let out = collect(relay(Box::pin(up), true, times())).await;
        assert_eq!(out.len(), 2);
        assert!(out[1].starts_with("event: error\ndata: {"), "{out:?}");
        assert!(out[1].contains("broke"));
        let silent = futures::stream::pending::<Result<Bytes, String>>();
        let out = collect(relay(Box::pin(silent), true, times())).await;
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
            collect(relay(Box::pin(silent), false, times()))
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
}
