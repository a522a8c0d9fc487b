//! What the HTTP handlers share: the store, fault injection, pod logs, the shutdown
//! token that ends streams, the bookmark interval, the advertised address, the
//! bearer token requests must carry (if any), and the pod proxy's backends and client.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::controllers::Dashboard;
use crate::endpoints::PodEndpoints;
use crate::faults::Faults;
use crate::logs::LogStore;
use crate::store::Store;

/// Shared state of the HTTP handlers: [`Shared`] behind one `Arc` (fields read through
/// `Deref`). axum clones the state for every request; one reference count is all that
/// clone should cost (the advertised address alone was a string copied per request).
#[derive(Clone, Debug)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The state over its parts.
    pub fn new(shared: Shared) -> Self {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
#[derive(Debug)]
pub struct Shared {
    /// Object store.
    pub store: Arc<Store>,
    /// Fault injection.
    pub faults: Arc<Faults>,
    /// Pod logs.
    pub logs: Arc<LogStore>,
    /// Cancelled on shutdown (ends watches and log follows).
    pub shutdown: CancellationToken,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// `host:port` advertised in `/api`.
    pub address: String,
    /// The bearer token every request must carry; `None` accepts any request.
    pub token: Option<Arc<str>>,
    /// What the pods serve (the `pods/proxy` backends).
    pub endpoints: Arc<PodEndpoints>,
    /// The Ray heads' Jobs API: a simulated head's answers come from its table
    /// (`pod_proxy.rs`), as a real head's come from its dashboard.
    pub dashboard: Arc<Dashboard>,
    /// The HTTP client of the pod proxy.
    pub proxy_client: reqwest::Client,
}
