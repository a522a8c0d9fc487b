//! The store conformance suite: every behaviour the store traits promise, written once
//! against a [`Database`] handle and run against **both** backends — SQLite in a
//! temporary directory and PostgreSQL on the test server of `forge_testkit::postgres`
//! (a fresh database per test). A backend that passes it can replace the other.
//!
//! A case gets a [`Harness`]: `open()` gives a new handle on the same database, which
//! is how a case restarts the gateway or plays a second replica.

mod capsules;
mod coord;
mod job_feed;
pub(crate) mod jobs;
mod playgrounds;
mod policies;
mod retention;
mod sessions;
mod upload_sessions;
mod usage;

use async_trait::async_trait;

use super::Database;

/// A database under test.
#[async_trait]
pub trait Harness: Send + Sync {
    /// A new handle on the harness's database (migrating it on first open).
    async fn open(&self) -> Database;
}

/// SQLite in a temporary directory.
pub struct Sqlite(tempfile::TempDir);

#[async_trait]
impl Harness for Sqlite {
    async fn open(&self) -> Database {
        Database::open_sqlite(&self.0.path().join("data").join("forge.sqlite3")).expect("sqlite")
    }
}

/// A fresh database on the test PostgreSQL server.
pub struct Postgres(String);

#[async_trait]
impl Harness for Postgres {
    async fn open(&self) -> Database {
        Database::open_postgres(&self.0).await.expect("postgres")
    }
}

pub fn sqlite() -> Sqlite {
    Sqlite(tempfile::tempdir().expect("tempdir"))
}

pub fn postgres() -> Postgres {
    Postgres(forge_testkit::postgres::database())
}

/// Instantiates every case once per backend (`sqlite::<case>`, `postgres::<case>`).
macro_rules! suite {
    ($($case:ident => $run:path),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    $run(&super::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    $run(&super::postgres()).await;
                }
            )*
        }
    };
}

suite! {
    playground_clocks_and_states => super::playgrounds::playground_clocks_and_states,
    restart_keeps_everything => super::jobs::restart_keeps_everything,
    compare_and_set_conflicts => super::jobs::compare_and_set_conflicts,
    keyset_pagination_by_team_and_state => super::jobs::keyset_pagination_by_team_and_state,
    queue_is_fifo_per_series => super::jobs::queue_is_fifo_per_series,
    change_version_moves_with_every_writer => super::jobs::change_version_moves_with_every_writer,
    replicas_race_one_transition => super::jobs::replicas_race_one_transition,
    checkpoints_move_forward_while_the_job_runs => super::jobs::checkpoints_move_forward_while_the_job_runs,
    preemptions_are_recorded_with_their_transitions => super::jobs::preemptions_are_recorded_with_their_transitions,
    a_notice_ended_otherwise_closes_its_record => super::jobs::a_notice_ended_otherwise_closes_its_record,
    a_release_measures_from_the_checkpoint_it_commits_with => super::jobs::a_release_measures_from_the_checkpoint_it_commits_with,
    lives_cover_the_window_and_jobs_still_holding_gpus => super::jobs::lives_cover_the_window_and_jobs_still_holding_gpus,
    histories_read_a_page_at_once => super::jobs::histories_read_a_page_at_once,
    append_is_compare_and_set_and_survives_reopen => super::policies::append_is_compare_and_set_and_survives_reopen,
    replicas_race_one_append => super::policies::replicas_race_one_append,
    plugins_are_immutable_per_version => super::policies::plugins_are_immutable_per_version,
    per_plugin_limits_are_stored_with_the_record => super::policies::per_plugin_limits_are_stored_with_the_record,
    decisions_replay_and_shadow_results => super::policies::decisions_replay_and_shadow_results,
    appends_are_announced_to_replicas => super::policies::appends_are_announced_to_replicas,
    owners_are_per_team_and_idempotent => super::capsules::owners_are_per_team_and_idempotent,
    rejected_records_and_ended_logs_are_due => super::retention::rejected_records_and_ended_logs_are_due,
    capsules_are_claimed_only_when_unowned_and_unused => super::retention::capsules_are_claimed_only_when_unowned_and_unused,
    lease_terms_and_renewals => super::coord::lease_terms_and_renewals,
    fenced_writes_stop_at_a_newer_epoch => super::coord::fenced_writes_stop_at_a_newer_epoch,
    installation_identity_is_recorded_once => super::coord::installation_identity_is_recorded_once,
    replicas_migrate_once => super::coord::replicas_migrate_once,
    usage_accrues_decayed_per_team_and_series => super::usage::usage_accrues_decayed_per_team_and_series,
    a_stale_leaders_accrual_is_refused => super::usage::a_stale_leaders_accrual_is_refused,
    the_dispatch_journal_keeps_passes_in_order_and_forgets_old_ones => super::usage::the_dispatch_journal_keeps_passes_in_order_and_forgets_old_ones,
    a_stale_leaders_pass_is_not_journaled => super::usage::a_stale_leaders_pass_is_not_journaled,
    a_reader_following_the_feed_misses_no_change => super::job_feed::a_reader_following_the_feed_misses_no_change,
    sessions_outlive_a_handle_until_they_expire_or_close => super::sessions::sessions_outlive_a_handle_until_they_expire_or_close,
    upload_sessions_are_shared_claimed_once_and_removed_once => super::upload_sessions::upload_sessions_are_shared_claimed_once_and_removed_once,
}
