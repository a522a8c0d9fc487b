//! The in-memory object store behind the API server: one global resourceVersion
//! counter (like etcd's revision), optimistic concurrency, a bounded window of watch
//! events (older resourceVersions are "compacted" and answer 410 Gone), finalizers and
//! deletionTimestamp, and the ownerReference garbage collector (background,
//! foreground and orphan propagation, namespace content deletion).
//!
//! All mutations happen under one `std::sync::Mutex` (never held across `.await`);
//! every committed change is broadcast to watchers while the lock is held, so the
//! broadcast order is the resourceVersion order.
//!
//! One file per concern: [`state`] holds the objects and the single write path
//! (`commit`); `create`, `update`, `patch`, `delete`, `binding` are the verbs (with
//! `defaults`, `admission` and `builtin` for what create and update apply); `list` and `watch`
//! read; `gc` is the garbage collector; `meta` reads object metadata; `event` is the
//! committed-change record.

mod admission;
mod binding;
mod builtin;
mod create;
mod defaults;
mod delete;
mod event;
mod gc;
mod list;
mod meta;
mod patch;
mod state;
mod update;
mod watch;

pub use defaults::DEFAULT_STORAGE_CLASS;
pub use delete::DeleteOpts;
pub use event::{EventKind, WatchEvent};
pub use list::ListPage;
pub use meta::now_rfc3339;
pub use patch::PatchKind;
pub use state::{Created, Store};
pub use update::Sub;
pub use watch::WatchStart;
