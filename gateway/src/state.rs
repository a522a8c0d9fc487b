//! [`AppState`]: what the HTTP handlers share — the configuration, the tokens, the job
//! domain, the playgrounds, the policy manager, the uploads, the metrics, the database and this
//! replica's leadership. Cheap to clone (every part is behind an
//! `Arc` or is itself a cheap handle). Built once by [`crate::compose`].

use std::sync::Arc;

use crate::cluster::Capacity;
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

/// State shared by all handlers.
#[derive(Clone, Debug)]
pub struct AppState {
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

impl AppState {
    /// The live capacity caches.
    pub fn capacity(&self) -> &Capacity {
        &self.jobs.cluster().capacity
    }
}
