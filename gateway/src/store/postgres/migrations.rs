//! PostgreSQL schema migrations: the same numbered steps as SQLite's (see
//! [`crate::store::migration`]) in PostgreSQL's dialect — `BIGSERIAL` keys, `BIGINT`
//! times in Unix ms, JSON kept as `TEXT` exactly as written (the two backends return
//! byte-identical documents).
//!
//! Applied at open, all pending steps in **one transaction** holding a transaction-level
//! advisory lock, and recorded in `schema_migrations`: replicas starting at once queue
//! on the lock, and each step runs exactly once. A database newer than this binary (a
//! recorded version it does not know) is refused rather than written to.

use crate::store::StoreError;
use crate::store::migration::{Migration, contiguous};

/// The advisory lock key of migrations (any constant; the same for every replica).
const MIGRATION_LOCK: i64 = 0x0046_6f72_6765_4d31; // "ForgeM1"

/// The migrations, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "jobs, state history, decisions",
        sql: r#"
    CREATE TABLE jobs (
        seq            BIGSERIAL PRIMARY KEY,
        id             TEXT      NOT NULL UNIQUE,
        team           TEXT      NOT NULL,
        name           TEXT      NOT NULL,
        spec           TEXT      NOT NULL,
        state          TEXT      NOT NULL,
        reason         TEXT,
        capsule_sha256 TEXT,
        rayjob_name    TEXT,
        queue_series   TEXT,
        created_at_ms  BIGINT    NOT NULL,
        updated_at_ms  BIGINT    NOT NULL
    );
    CREATE INDEX jobs_team_seq  ON jobs (team, seq);
    CREATE INDEX jobs_state_seq ON jobs (state, seq);
    CREATE INDEX jobs_queue     ON jobs (state, queue_series, seq);

    CREATE TABLE job_history (
        id         BIGSERIAL PRIMARY KEY,
        job_id     TEXT      NOT NULL REFERENCES jobs (id),
        from_state TEXT,
        to_state   TEXT      NOT NULL,
        reason     TEXT,
        at_ms      BIGINT    NOT NULL
    );
    CREATE INDEX job_history_job ON job_history (job_id, id);

    CREATE TABLE decisions (
        id            BIGSERIAL PRIMARY KEY,
        job_id        TEXT      NOT NULL,
        kind          TEXT      NOT NULL,
        code          TEXT,
        message       TEXT,
        field         TEXT,
        plugins       TEXT      NOT NULL,
        chain_version TEXT      NOT NULL,
        at_ms         BIGINT    NOT NULL
    );
    CREATE INDEX decisions_job ON decisions (job_id, id);
    "#,
    },
    Migration {
        version: 2,
        name: "dispatch placement",
        sql: "ALTER TABLE jobs ADD COLUMN placement TEXT;",
    },
    Migration {
        version: 3,
        name: "policy management",
        sql: r#"
    ALTER TABLE decisions ADD COLUMN team TEXT;
    ALTER TABLE decisions ADD COLUMN request TEXT;

    CREATE TABLE plugins (
        owner          TEXT   NOT NULL,
        name           TEXT   NOT NULL,
        version        TEXT   NOT NULL,
        digest         TEXT   NOT NULL,
        size           BIGINT NOT NULL,
        description    TEXT   NOT NULL,
        world          TEXT   NOT NULL,
        uploaded_by    TEXT   NOT NULL,
        uploaded_at_ms BIGINT NOT NULL,
        PRIMARY KEY (owner, name, version)
    );

    CREATE TABLE policy_versions (
        scope        TEXT   NOT NULL,
        version      BIGINT NOT NULL,
        links        TEXT   NOT NULL,
        from_version BIGINT,
        action       TEXT   NOT NULL,
        author       TEXT   NOT NULL,
        comment      TEXT   NOT NULL,
        at_ms        BIGINT NOT NULL,
        PRIMARY KEY (scope, version)
    );

    CREATE TABLE shadow_results (
        id        BIGSERIAL PRIMARY KEY,
        candidate TEXT      NOT NULL,
        job_id    TEXT      NOT NULL,
        team      TEXT      NOT NULL,
        live      TEXT      NOT NULL,
        shadow    TEXT      NOT NULL,
        agree     BOOLEAN   NOT NULL,
        at_ms     BIGINT    NOT NULL
    );
    CREATE INDEX shadow_results_candidate ON shadow_results (candidate, id);
    "#,
    },
    Migration {
        version: 4,
        name: "per-plugin limits",
        // Per-plugin limits chosen at upload (NULL: the operator's defaults). Issue 20's
        // migration 4 (already on main), carried here so both backends have it.
        sql: r#"
    ALTER TABLE plugins ADD COLUMN memory_mib BIGINT;
    ALTER TABLE plugins ADD COLUMN deadline_ms BIGINT;
    "#,
    },
    Migration {
        version: 5,
        name: "capsule ownership",
        // The teams that uploaded each capsule's bytes (a capsule is referenced by
        // digest only by its owners). Issue 13's migration 5 (branch wt-isolation),
        // carried here so the numbering stays contiguous and identical everywhere.
        sql: r#"
    CREATE TABLE capsule_owners (
        digest        TEXT    NOT NULL,
        team          TEXT    NOT NULL,
        granted_at_ms BIGINT  NOT NULL,
        PRIMARY KEY (digest, team)
    );
    "#,
    },
    Migration {
        version: 6,
        name: "leader lease and installation identity",
        sql: r#"
    CREATE TABLE leases (
        name           TEXT   PRIMARY KEY,
        holder         TEXT   NOT NULL,
        epoch          BIGINT NOT NULL,
        acquired_at_ms BIGINT NOT NULL,
        renewed_at_ms  BIGINT NOT NULL,
        expires_at_ms  BIGINT NOT NULL
    );

    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    "#,
    },
    Migration {
        version: 7,
        name: "playgrounds",
        sql: r#"
    CREATE TABLE playgrounds (
        id                 TEXT    PRIMARY KEY,
        team               TEXT    NOT NULL,
        created_by         TEXT    NOT NULL,
        model              TEXT    NOT NULL,
        series             TEXT,
        gpus               BIGINT  NOT NULL,
        args               TEXT    NOT NULL,
        state              TEXT    NOT NULL,
        reason             TEXT,
        created_at_ms      BIGINT  NOT NULL,
        expires_at_ms      BIGINT  NOT NULL,
        idle_seconds       BIGINT,
        last_request_at_ms BIGINT  NOT NULL,
        warned_at_ms       BIGINT,
        ended_at_ms        BIGINT
    );
    CREATE INDEX playgrounds_by_team ON playgrounds (team, created_at_ms);
    CREATE INDEX playgrounds_by_state ON playgrounds (state);
    "#,
    },
    Migration {
        version: 8,
        name: "retention",
        sql: r#"
    ALTER TABLE capsule_owners ADD COLUMN last_used_ms BIGINT;
    CREATE TABLE capsule_deletions (
        digest TEXT    PRIMARY KEY,
        state  TEXT    NOT NULL,
        at_ms  BIGINT  NOT NULL
    );
    ALTER TABLE jobs ADD COLUMN logs_deleted_at_ms BIGINT;
    CREATE INDEX jobs_state_updated ON jobs (state, updated_at_ms);
    "#,
    },
    Migration {
        version: 9,
        name: "job trace context",
        sql: "ALTER TABLE jobs ADD COLUMN trace_parent TEXT;",
    },
    Migration {
        version: 10,
        name: "acknowledged checkpoints",
        sql: r#"
    ALTER TABLE jobs ADD COLUMN checkpoint_step BIGINT;
    ALTER TABLE jobs ADD COLUMN checkpoint_at_ms BIGINT;
    "#,
    },
    Migration {
        version: 11,
        name: "preemptions",
        // Each job's attempt (releases after a preemption) and admitted terms, and one
        // row per preemption (issue 38); the open ones indexed: the leader's release loop
        // reads them every 250 ms.
        sql: r#"
    ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN terms TEXT;
    CREATE TABLE preemptions (
        job_id           TEXT    NOT NULL,
        attempt          INTEGER NOT NULL,
        by_job           TEXT    NOT NULL,
        at_ms            BIGINT  NOT NULL,
        notice_ms        BIGINT  NOT NULL,
        gpus             INTEGER NOT NULL,
        series           TEXT    NOT NULL,
        planned_lost     DOUBLE PRECISION NOT NULL,
        attempt_started_ms BIGINT NOT NULL,
        released_ms      BIGINT,
        checkpoint_step  BIGINT,
        lost_gpu_seconds DOUBLE PRECISION,
        PRIMARY KEY (job_id, attempt)
    );
    CREATE INDEX preemptions_at ON preemptions (at_ms);
    CREATE INDEX preemptions_open ON preemptions (job_id) WHERE released_ms IS NULL;
    "#,
    },
    Migration {
        version: 12,
        name: "usage_ledger",
        // Each team's decayed GPU-seconds per series, as of its last write (issue 39).
        sql: r#"
    CREATE TABLE usage_ledger (
        team        TEXT    NOT NULL,
        series      TEXT    NOT NULL,
        gpu_seconds DOUBLE PRECISION NOT NULL,
        at_ms       BIGINT NOT NULL,
        PRIMARY KEY (team, series)
    );
    "#,
    },
    Migration {
        version: 13,
        name: "policy_fair_share",
        // Fair-share weights, settings of the global policy's versions (issue 39).
        sql: r#"
    ALTER TABLE policy_versions ADD COLUMN fair_share TEXT NOT NULL DEFAULT '{}';
    "#,
    },
    Migration {
        version: 14,
        name: "dispatch_journal",
        // What each dispatching pass ordered and decided, for replay (issue 39).
        sql: r#"
    CREATE TABLE dispatch_journal (
        id    BIGSERIAL PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        body  TEXT    NOT NULL
    );
    CREATE INDEX dispatch_journal_at ON dispatch_journal (at_ms);
    "#,
    },
    Migration {
        version: 15,
        name: "console_sessions",
        // Console sessions, shared by every replica (issue 40).
        sql: r#"
    CREATE TABLE console_sessions (
        id_sha256     TEXT   PRIMARY KEY,
        token_sha256  TEXT   NOT NULL,
        csrf          TEXT   NOT NULL,
        expires_at_ms BIGINT NOT NULL
    );
    CREATE INDEX console_sessions_expiry ON console_sessions (expires_at_ms);
    "#,
    },
    Migration {
        version: 16,
        name: "upload_sessions",
        // Resumable upload sessions and their parts, shared by every replica (issue 40).
        sql: r#"
    CREATE TABLE upload_sessions (
        id               TEXT   PRIMARY KEY,
        team             TEXT   NOT NULL,
        digest           TEXT   NOT NULL,
        size             BIGINT NOT NULL,
        part_bytes       BIGINT NOT NULL,
        multipart_id     TEXT   NOT NULL,
        created_at_ms    BIGINT NOT NULL,
        touched_at_ms    BIGINT NOT NULL,
        claimed_until_ms BIGINT NOT NULL
    );
    CREATE INDEX upload_sessions_team ON upload_sessions (team);
    CREATE INDEX upload_sessions_touched ON upload_sessions (touched_at_ms);
    CREATE TABLE upload_parts (
        upload_id TEXT   NOT NULL,
        number    INTEGER NOT NULL,
        len       BIGINT NOT NULL,
        etag      TEXT   NOT NULL,
        PRIMARY KEY (upload_id, number)
    );
    "#,
    },
    Migration {
        version: 17,
        name: "job_history_at",
        // The console's last day of queue waits and GPU use reads the history by time
        // (issue 43).
        sql: r#"
    CREATE INDEX job_history_at ON job_history (at_ms);
    "#,
    },
    Migration {
        version: 18,
        name: "job_writes",
        // SQLite counts the writes to jobs and preemptions for its change version
        // (one writer: the count costs nothing). Here a counter row would be one more
        // lock every job write waits for; the change version is the job feed's head
        // instead (`job_history` ids, in commit order under the feed's lock), so this
        // step only keeps the two lists of steps alike.
        sql: r#"
    SELECT 1;
    "#,
    },
    Migration {
        version: 19,
        name: "preemption_released_by",
        // What released a preempted job (exited, checkpointed, grace-ended,
        // rayjob-gone), shown with its preemptions; NULL for the releases before.
        sql: r#"
    ALTER TABLE preemptions ADD COLUMN released_by TEXT;
    "#,
    },
    Migration {
        version: 20,
        name: "job_fleet",
        // The fleet (cluster) a job was dispatched to, committed with its dispatch
        // intent before anything is created there; NULL for jobs dispatched before.
        sql: r#"
    ALTER TABLE jobs ADD COLUMN fleet TEXT;
    "#,
    },
];

/// Brings the database to the newest schema; returns the version reached.
pub async fn migrate(client: &mut tokio_postgres::Client) -> Result<u32, StoreError> {
    if !contiguous(MIGRATIONS) {
        return Err(StoreError::Corrupt(
            "migrations are not numbered 1..n".into(),
        ));
    }
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version       INTEGER PRIMARY KEY,
            name          TEXT    NOT NULL,
            applied_at_ms BIGINT  NOT NULL
        )",
    )
    .await?;
    let current: i32 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            &[],
        )
        .await?
        .get(0);
    let current = u32::try_from(current).unwrap_or(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.version);
    if current > known {
        return Err(StoreError::Corrupt(format!(
            "the database is at schema version {current}, newer than this gateway knows \
             ({known}): upgrade the gateway"
        )));
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        tx.batch_execute(m.sql).await?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES ($1, $2, $3)",
            &[
                &i32::try_from(m.version).unwrap_or(i32::MAX),
                &m.name,
                &crate::store::now_ms(),
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(known)
}
