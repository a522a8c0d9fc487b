//! SQLite schema migrations (jobs and policy tables alike), applied in order at open and tracked in
//! `PRAGMA user_version` (migration *n* brings the schema to version *n*). Released
//! migrations are never edited: a change is a new entry at the end.

use rusqlite::Connection;

/// The migrations, oldest first.
pub const MIGRATIONS: &[&str] = &[
    // 1: jobs, state history, decisions; the queue is the jobs table ordered by seq.
    r#"
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
    // 2: the placement a job was dispatched with (JSON), so GPU accounting and the
    // RayJob can be rebuilt after a restart.
    r#"
    ALTER TABLE jobs ADD COLUMN placement TEXT;
    "#,
    // 3: policy management: the plugin registry, versioned policy chains per scope
    // (`global`, `team:<name>`), shadow-mode results, and the team and policy request
    // of each decision (so a candidate chain can be replayed against recent decisions).
    r#"
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
    // 5: capsule ownership: the teams that uploaded each capsule's bytes (a capsule is
    // referenced by digest only by its owners). It follows migration 4 (per-plugin
    // limits, merged from another branch). Not backfilled from `jobs`: a job row cannot
    // tell an upload from a reference, and a reference may be the cross-team reuse this
    // table exists to stop — teams re-upload once (the bytes are deduplicated).
    r#"
    CREATE TABLE capsule_owners (
        digest        TEXT    NOT NULL,
        team          TEXT    NOT NULL,
        granted_at_ms INTEGER NOT NULL,
        PRIMARY KEY (digest, team)
    ) WITHOUT ROWID;
    "#,
];

/// Brings the database to the newest schema; returns the version reached.
/// Each step runs in an `IMMEDIATE` transaction that re-reads the version, so two
/// processes opening the same database at once (gateway replicas) apply it once.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<usize> {
    loop {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let current: usize = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let Some(sql) = MIGRATIONS.get(current) else {
            return Ok(current.max(MIGRATIONS.len()));
        };
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", current + 1)?;
        tx.commit()?;
    }
}
