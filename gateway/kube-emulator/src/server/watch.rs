//! Watches: a newline-delimited JSON stream of ADDED / MODIFIED / DELETED events from
//! the store's broadcast, after the replay a watch starts with. Selector transitions
//! become ADDED / DELETED like the watch cache; `allowWatchBookmarks` adds a BOOKMARK
//! every bookmark interval; `timeoutSeconds`, shutdown and the fault injector's
//! "drop watches" end the stream. A watcher that lags behind the broadcast catches up
//! from the history, or ends with a 410 ERROR event when the history no longer covers
//! it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch as signal};
use tokio_util::sync::CancellationToken;

use super::state::AppState;
use super::target::{Query, Target, flag};
use crate::error::ApiError;
use crate::resources::{ResId, res};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{EventKind, Store, WatchEvent, WatchStart};

type Sink = mpsc::Sender<Result<Bytes, Infallible>>;

/// Starts a watch of `t` and answers with its stream.
pub(super) fn watch(
    st: &AppState,
    t: &Target,
    labels: LabelSelector,
    fields: FieldSelector,
    q: &Query,
) -> Result<Response, ApiError> {
    let rv = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {s}")))?,
        ),
    };
    let ends = Ends {
        shutdown: st.shutdown.clone(),
        dropped: st.faults.drop_signal(),
        timeout: q
            .get("timeoutSeconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_secs),
        bookmarks: flag(q, "allowWatchBookmarks").then_some(st.bookmark_interval),
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    let start = st.store.watch(t.rid, t.ns.as_deref(), rv);
    let feed = Feed {
        tx,
        store: st.store.clone(),
        rid: t.rid,
        ns: t.ns.clone(),
        labels,
        fields,
        last: 0,
    };
    tokio::spawn(feed.run(start, ends));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}

fn watch_line(kind: &str, obj: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": obj}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// What ends a watch, and its bookmark interval (when bookmarks were asked for).
struct Ends {
    shutdown: CancellationToken,
    dropped: signal::Receiver<u64>,
    timeout: Option<Duration>,
    bookmarks: Option<Duration>,
}

/// One watch connection: its filter, its sink and how far it has delivered.
struct Feed {
    tx: Sink,
    store: Arc<Store>,
    rid: ResId,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    /// Highest resourceVersion delivered (or filtered out).
    last: u64,
}

impl Feed {
    async fn run(mut self, start: Result<WatchStart, ApiError>, mut ends: Ends) {
        let start = match start {
            Ok(s) => s,
            Err(e) => {
                let _ = self.tx.send(Ok(watch_line("ERROR", &e.status()))).await;
                return;
            }
        };
        self.last = start.start_rv;
        for ev in &start.replay {
            if let Some(kind) = self.classify(ev)
                && !self.line(kind, &ev.object).await
            {
                return;
            }
        }
        let mut live = start.rx;
        let deadline =
            tokio::time::sleep(ends.timeout.unwrap_or(Duration::from_secs(3600 * 24 * 365)));
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(ends.bookmarks.unwrap_or(Duration::from_secs(1)));
        ticker.tick().await;
        ends.dropped.mark_unchanged();
        loop {
            let ev = tokio::select! {
                _ = ends.shutdown.cancelled() => return,
                _ = &mut deadline => return,
                _ = ends.dropped.changed() => return,
                _ = ticker.tick(), if ends.bookmarks.is_some() => {
                    if !self.bookmark(&mut live).await {
                        return;
                    }
                    continue;
                }
                ev = live.recv() => ev,
            };
            let alive = match ev {
                Ok(ev) => self.send_event(&ev).await,
                Err(broadcast::error::RecvError::Lagged(_)) => self.catch_up().await,
                Err(broadcast::error::RecvError::Closed) => false,
            };
            if !alive {
                return;
            }
        }
    }

    /// Sends one line; `false` when the client went away.
    async fn line(&self, kind: &str, obj: &Value) -> bool {
        self.tx.send(Ok(watch_line(kind, obj))).await.is_ok()
    }

    /// The event type this watch sees for `ev`, if any (selector transitions become
    /// ADDED / DELETED).
    fn classify(&self, ev: &WatchEvent) -> Option<&'static str> {
        if ev.res != self.rid {
            return None;
        }
        if let Some(n) = &self.ns
            && ev.object["metadata"]["namespace"].as_str().unwrap_or("") != n
        {
            return None;
        }
        let m = |o: &Value| self.labels.matches(o) && self.fields.matches(o);
        let now = m(&ev.object);
        match ev.kind {
            EventKind::Added => now.then_some("ADDED"),
            EventKind::Deleted => now.then_some("DELETED"),
            EventKind::Modified => {
                let before = ev.old.as_deref().is_some_and(m);
                match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        }
    }

    /// Delivers `ev` unless an earlier replay already covered it.
    async fn send_event(&mut self, ev: &WatchEvent) -> bool {
        if ev.rv <= self.last {
            return true;
        }
        self.last = ev.rv;
        match self.classify(ev) {
            Some(kind) => self.line(kind, &ev.object).await,
            None => true,
        }
    }

    /// After the broadcast channel overflowed: replay from the store's history, or end
    /// the watch with a 410 ERROR event if the history no longer covers it.
    async fn catch_up(&mut self) -> bool {
        match self.store.history_since(self.last) {
            Ok(events) => {
                for ev in events {
                    if !self.send_event(&ev).await {
                        return false;
                    }
                }
                true
            }
            Err(e) => {
                let _ = self.line("ERROR", &e.status()).await;
                false
            }
        }
    }

    /// Sends a BOOKMARK at the current resourceVersion, after everything up to it.
    async fn bookmark(&mut self, live: &mut broadcast::Receiver<Arc<WatchEvent>>) -> bool {
        let rv_now = self.store.current_rv();
        // Everything up to rv_now is already queued in `live`: drain it first.
        loop {
            let alive = match live.try_recv() {
                Ok(ev) => self.send_event(&ev).await,
                Err(broadcast::error::TryRecvError::Lagged(_)) => self.catch_up().await,
                Err(_) => break,
            };
            if !alive {
                return false;
            }
        }
        self.last = self.last.max(rv_now);
        let r = res(self.rid);
        let bm = json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": {"resourceVersion": self.last.to_string()}});
        self.line("BOOKMARK", &bm).await
    }
}
