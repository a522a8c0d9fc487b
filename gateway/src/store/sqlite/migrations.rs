//! SQLite schema migrations (jobs, policy and coordination tables alike), applied in
//! order at open and tracked in `PRAGMA user_version` (migration *n* brings the schema
//! to version *n*). Released migrations are never edited: a change is a new entry at
//! the end, here and in `postgres/migrations.rs` (see [`crate::store::migration`]).

use rusqlite::Connection;

use crate::store::migration::Migration;

/// The migrations, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "jobs, state history, decisions",
        // The queue is the jobs table ordered by seq.
        sql: r#"
    CREATE TABLE jobs (
        seq            INTEGER PRIMARY KEY AUTOINCREMENT,
        id             TEXT    NOT NULL UNIQUE,
        team           TEXT    NOT NULL,
        name           TEXT    NOT NULL,
        spec           TEXT    NOT NULL,
        state          TEXT    NOT NULL,
        reason         TEXT,
        capsule_sha256 TEXT,
        rayjob_name    TEXT,
        queue_series   TEXT,
        created_at_ms  INTEGER NOT NULL,
        updated_at_ms  INTEGER NOT NULL
    );
    CREATE INDEX jobs_team_seq  ON jobs (team, seq);
    CREATE INDEX jobs_state_seq ON jobs (state, seq);
    CREATE INDEX jobs_queue     ON jobs (state, queue_series, seq);

    CREATE TABLE job_history (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id     TEXT    NOT NULL REFERENCES jobs (id),
        from_state TEXT,
        to_state   TEXT    NOT NULL,
        reason     TEXT,
        at_ms      INTEGER NOT NULL
    );
    CREATE INDEX job_history_job ON job_history (job_id, id);

    CREATE TABLE decisions (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id        TEXT    NOT NULL,
        kind          TEXT    NOT NULL,
        code          TEXT,
        message       TEXT,
        field         TEXT,
        plugins       TEXT    NOT NULL,
        chain_version TEXT    NOT NULL,
        at_ms         INTEGER NOT NULL
    );
    CREATE INDEX decisions_job ON decisions (job_id, id);
    "#,
    },
    Migration {
        version: 2,
        name: "dispatch placement",
        // The placement a job was dispatched with (JSON), so GPU accounting and the
        // RayJob can be rebuilt after a restart.
        sql: r#"
    ALTER TABLE jobs ADD COLUMN placement TEXT;
    "#,
    },
    Migration {
        version: 3,
        name: "policy management",
        // The plugin registry, versioned policy chains per scope (`global`,
        // `team:<name>`), shadow-mode results, and the team and policy request of each
        // decision (so a candidate chain can be replayed against recent decisions).
        sql: r#"
    ALTER TABLE decisions ADD COLUMN team TEXT;
    ALTER TABLE decisions ADD COLUMN request TEXT;

    CREATE TABLE plugins (
        owner          TEXT    NOT NULL,
        name           TEXT    NOT NULL,
        version        TEXT    NOT NULL,
        digest         TEXT    NOT NULL,
        size           INTEGER NOT NULL,
        description    TEXT    NOT NULL,
        world          TEXT    NOT NULL,
        uploaded_by    TEXT    NOT NULL,
        uploaded_at_ms INTEGER NOT NULL,
        PRIMARY KEY (owner, name, version)
    );

    CREATE TABLE policy_versions (
        scope        TEXT    NOT NULL,
        version      INTEGER NOT NULL,
        links        TEXT    NOT NULL,
        from_version INTEGER,
        action       TEXT    NOT NULL,
        author       TEXT    NOT NULL,
        comment      TEXT    NOT NULL,
        at_ms        INTEGER NOT NULL,
        PRIMARY KEY (scope, version)
    );

    CREATE TABLE shadow_results (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        candidate TEXT    NOT NULL,
        job_id    TEXT    NOT NULL,
        team      TEXT    NOT NULL,
        live      TEXT    NOT NULL,
        shadow    TEXT    NOT NULL,
        agree     INTEGER NOT NULL,
        at_ms     INTEGER NOT NULL
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
    ALTER TABLE plugins ADD COLUMN memory_mib INTEGER;
    ALTER TABLE plugins ADD COLUMN deadline_ms INTEGER;
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
        granted_at_ms INTEGER NOT NULL,
        PRIMARY KEY (digest, team)
    ) WITHOUT ROWID;
    "#,
    },
    Migration {
        version: 6,
        name: "leader lease and installation identity",
        // The leader lease (holder, epoch = fencing token, times in Unix ms) and
        // key/value metadata (the installation identity).
        sql: r#"
    CREATE TABLE leases (
        name           TEXT    PRIMARY KEY,
        holder         TEXT    NOT NULL,
        epoch          INTEGER NOT NULL,
        acquired_at_ms INTEGER NOT NULL,
        renewed_at_ms  INTEGER NOT NULL,
        expires_at_ms  INTEGER NOT NULL
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
        // Inference servers teams start (issue 18): what they serve, their clocks
        // (absolute hard-TTL end, idle TTL from the last proxied request, the warning)
        // and how they ended.
        sql: r#"
    CREATE TABLE playgrounds (
        id                 TEXT    PRIMARY KEY,
        team               TEXT    NOT NULL,
        created_by         TEXT    NOT NULL,
        model              TEXT    NOT NULL,
        series             TEXT,
        gpus               INTEGER NOT NULL,
        args               TEXT    NOT NULL,
        state              TEXT    NOT NULL,
        reason             TEXT,
        created_at_ms      INTEGER NOT NULL,
        expires_at_ms      INTEGER NOT NULL,
        idle_seconds       INTEGER,
        last_request_at_ms INTEGER NOT NULL,
        warned_at_ms       INTEGER,
        ended_at_ms        INTEGER
    );
    CREATE INDEX playgrounds_by_team ON playgrounds (team, created_at_ms);
    CREATE INDEX playgrounds_by_state ON playgrounds (state);
    "#,
    },
    Migration {
        version: 8,
        name: "retention",
        // When each team last used each capsule (upload or submission; NULL: at its
        // grant), the capsules whose bytes retention is deleting or has deleted (an
        // upload racing a deletion stores the bytes again), when a job's archived logs
        // were deleted, and the index the sweeps of ended jobs read.
        sql: r#"
    ALTER TABLE capsule_owners ADD COLUMN last_used_ms INTEGER;
    CREATE TABLE capsule_deletions (
        digest TEXT    PRIMARY KEY,
        state  TEXT    NOT NULL,
        at_ms  INTEGER NOT NULL
    ) WITHOUT ROWID;
    ALTER TABLE jobs ADD COLUMN logs_deleted_at_ms INTEGER;
    CREATE INDEX jobs_state_updated ON jobs (state, updated_at_ms);
    "#,
    },
    Migration {
        version: 9,
        name: "job trace context",
        // The W3C traceparent of each job's trace (issue 41; NULL: not traced).
        sql: "ALTER TABLE jobs ADD COLUMN trace_parent TEXT;",
    },
    Migration {
        version: 10,
        name: "acknowledged checkpoints",
        // Each job's last acknowledged checkpoint (issue 38; NULL: none yet).
        sql: r#"
    ALTER TABLE jobs ADD COLUMN checkpoint_step INTEGER;
    ALTER TABLE jobs ADD COLUMN checkpoint_at_ms INTEGER;
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
        at_ms            INTEGER  NOT NULL,
        notice_ms        INTEGER  NOT NULL,
        gpus             INTEGER NOT NULL,
        series           TEXT    NOT NULL,
        planned_lost     REAL NOT NULL,
        attempt_started_ms INTEGER NOT NULL,
        released_ms      INTEGER,
        checkpoint_step  INTEGER,
        lost_gpu_seconds REAL,
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
        gpu_seconds REAL NOT NULL,
        at_ms       INTEGER NOT NULL,
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
        id    INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms INTEGER NOT NULL,
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
        id_sha256     TEXT    PRIMARY KEY,
        token_sha256  TEXT    NOT NULL,
        csrf          TEXT    NOT NULL,
        expires_at_ms INTEGER NOT NULL
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
        size             INTEGER NOT NULL,
        part_bytes       INTEGER NOT NULL,
        multipart_id     TEXT   NOT NULL,
        created_at_ms    INTEGER NOT NULL,
        touched_at_ms    INTEGER NOT NULL,
        claimed_until_ms INTEGER NOT NULL
    );
    CREATE INDEX upload_sessions_team ON upload_sessions (team);
    CREATE INDEX upload_sessions_touched ON upload_sessions (touched_at_ms);
    CREATE TABLE upload_parts (
        upload_id TEXT   NOT NULL,
        number    INTEGER NOT NULL,
        len       INTEGER NOT NULL,
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
        // The store's change version counts the writes the dispatcher decides from —
        // jobs and preemptions — and no other: a lease renewal or a console session
        // no longer makes an idle pass list the queue again (`PRAGMA data_version`
        // moved with every commit). The triggers run in the writing transaction, so a
        // reader sees the count and the rows it counts together.
        sql: r#"
    CREATE TABLE job_writes (
        id    INTEGER PRIMARY KEY CHECK (id = 1),
        count INTEGER NOT NULL
    );
    INSERT INTO job_writes (id, count) VALUES (1, 0);
    CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs
        BEGIN UPDATE job_writes SET count = count + 1 WHERE id = 1; END;
    CREATE TRIGGER jobs_updated AFTER UPDATE ON jobs
        BEGIN UPDATE job_writes SET count = count + 1 WHERE id = 1; END;
    CREATE TRIGGER jobs_deleted AFTER DELETE ON jobs
        BEGIN UPDATE job_writes SET count = count + 1 WHERE id = 1; END;
    CREATE TRIGGER preemptions_inserted AFTER INSERT ON preemptions
        BEGIN UPDATE job_writes SET count = count + 1 WHERE id = 1; END;
    CREATE TRIGGER preemptions_updated AFTER UPDATE ON preemptions
        BEGIN UPDATE job_writes SET count = count + 1 WHERE id = 1; END;
    CREATE TRIGGER preemptions_deleted AFTER DELETE ON preemptions
        BEGIN UPDATE job_writes SET count = count + 1 WHERE id = 1; END;
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
/// Each step runs in an `IMMEDIATE` transaction that re-reads the version, so two
/// processes opening the same database at once (gateway replicas) apply it once.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<usize> {
    loop {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let current: usize = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let Some(m) = MIGRATIONS.get(current) else {
            return Ok(current.max(MIGRATIONS.len()));
        };
        tx.execute_batch(m.sql)?;
        tx.pragma_update(None, "user_version", current + 1)?;
        tx.commit()?;
    }
}
