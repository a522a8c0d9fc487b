//! [`AppState`]: what the HTTP handlers share — the configuration, the tokens, the job
//! domain, the playgrounds, the policy manager, the uploads, the metrics, the database and this
//! replica's leadership. Built once by [`crate::compose`].
//!
//! One `Arc`: axum clones the state for every request (each `State` extractor and each
//! middleware given the state), and a copy of every handle inside was not cheap — the
//! job domain and the playgrounds hold the cluster's API handles, each a client (a
//! bounded-channel sender) and a URL string. Under submissions those clones and their
//! drops were ~4 % of the gateway's CPU; now a request clones one reference count.

use std::sync::Arc;

use crate::cluster::Capacities;
use crate::config::Config;
use crate::jobs::Jobs;
use crate::leader::Leadership;
use crate::live_tokens::LiveTokens;
use crate::metrics::Metrics;
use crate::objects::LocalStore;
use crate::playground::Playgrounds;
use crate::policy::PolicyManager;
use crate::shutdown::Shutdown;
use crate::store::Database;
use crate::uploads::Uploads;

/// State shared by all handlers: [`Shared`] behind one `Arc` (fields read through
/// `Deref`).
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
    pub config: Arc<Config>,
    /// The tokens in force (reloaded when the tokens file changes).
    pub tokens: Arc<LiveTokens>,
    /// Jobs: store, queue, dispatcher, lifecycle, cluster adapter, object storage.
    pub jobs: Jobs,
    /// Playgrounds: inference servers and their clocks.
    pub playgrounds: Playgrounds,
    /// The active policy (global and team chains), its registry and its history.
    pub policies: Arc<PolicyManager>,
    pub metrics: Arc<Metrics>,
    /// Resumable capsule uploads, and which capsules a team may name.
    pub uploads: Uploads,
    /// Set when object storage is the local store, whose signed URLs this app serves.
    pub local_objects: Option<Arc<LocalStore>>,
    /// The database (readiness pings it).
    pub database: Database,
    /// This replica's leadership (role in `/readyz`; the controllers follow it).
    pub leadership: Arc<Leadership>,
    /// Begun at SIGTERM: open event streams end so the server can drain.
    pub shutdown: Shutdown,
}

impl Shared {
    /// The live capacity caches.
    pub fn capacity(&self) -> &Capacities {
        self.jobs.fleets.capacity()
    }
}
