//! The schema, created and migrated in place by [`migrate`]: a version
//! table and one step per version, applied in order under an advisory lock
//! so that concurrent connects do not race.

use crate::error::{db, PgError, Result};

/// The steps; index `i` brings the schema from version `i` to `i + 1`.
/// A step is never edited once released: a change is a new step.
pub(crate) const STEPS: &[&str] = &[
    // 1: sessions, events, snapshots.
    "CREATE TABLE turnstone_sessions (
        id            text PRIMARY KEY,
        parent        text REFERENCES turnstone_sessions(id),
        fork_seq      bigint NOT NULL DEFAULT 0,
        len           bigint NOT NULL DEFAULT 0,
        meta          jsonb NOT NULL DEFAULT '{}',
        lease_owner   text,
        lease_epoch   bigint NOT NULL DEFAULT 0,
        lease_expires timestamptz,
        deleted       boolean NOT NULL DEFAULT false,
        created_at    timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE turnstone_events (
        session      text NOT NULL REFERENCES turnstone_sessions(id),
        seq          bigint NOT NULL,
        kind         integer NOT NULL,
        flags        integer NOT NULL,
        payload      bytea NOT NULL,
        epoch        bigint NOT NULL,
        committed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (session, seq)
    );
    CREATE TABLE turnstone_snapshots (
        session text NOT NULL REFERENCES turnstone_sessions(id),
        name    text NOT NULL,
        upto    bigint NOT NULL,
        data    bytea NOT NULL,
        PRIMARY KEY (session, name)
    );",
    // 2: full-text search over each event's searchable text (what the
    // session layer's `searchable_text` gives: message text, tool results,
    // summaries), with PostgreSQL's own text search.
    "ALTER TABLE turnstone_events ADD COLUMN text text;
     CREATE INDEX turnstone_events_text ON turnstone_events
         USING gin (to_tsvector('simple', text)) WHERE text IS NOT NULL;",
    // 3: no foreign key from events to sessions. Its check (a lookup and a
    // row lock on the session per inserted event) was over half of the
    // server's work per insert, and it guards nothing the commit does not:
    // events are written only in the transaction whose fence `UPDATE` has
    // just found and locked their session's row, and session rows are
    // never removed (deletion is a flag).
    "ALTER TABLE turnstone_events DROP CONSTRAINT IF EXISTS turnstone_events_session_fkey;",
    // 4: `turnstone serve` on a database (issue 18 §3): which session holds
    // each stream path, when a stream was last accessed (sliding TTLs shared
    // by every instance), and incarnation numbers for new streams' sessions
    // (`ds/<n>`), handed out by the database so instances never collide.
    "CREATE TABLE turnstone_streams (
        path       text PRIMARY KEY,
        session    text NOT NULL,
        touched_ms bigint NOT NULL DEFAULT 0
    );
    CREATE INDEX turnstone_sessions_parent ON turnstone_sessions (parent) WHERE parent IS NOT NULL;
    CREATE SEQUENCE turnstone_stream_incarnations;",
    // 5: each stream's expiry beside its mapping (a sliding `Stream-TTL` in
    // ms, renewed through `touched_ms`, or a fixed `Stream-Expires-At`), so
    // that any instance finds the expired streams no instance has loaded
    // (paths mapped before this step have neither: they expire when next
    // used, as before); and which deleted sessions a collection has
    // emptied for good (`collect.rs`), so that later collections read only
    // the deleted sessions still holding events and their descendants.
    "ALTER TABLE turnstone_streams ADD COLUMN ttl_ms bigint, ADD COLUMN expires_ms bigint;
     ALTER TABLE turnstone_sessions ADD COLUMN collected boolean NOT NULL DEFAULT false;
     CREATE INDEX turnstone_sessions_uncollected ON turnstone_sessions (id)
         WHERE deleted AND NOT collected;",
];

/// The version this build writes.
pub const SCHEMA_VERSION: i32 = STEPS.len() as i32;

/// Bring the database to [`SCHEMA_VERSION`]; refuse a newer one.
pub(crate) fn migrate(client: &mut postgres::Client) -> Result<()> {
    let mut tx = client.transaction().map_err(db("begin migration"))?;
    // One migrator at a time (the key is "tstn" in ASCII).
    tx.execute("SELECT pg_advisory_xact_lock(1953723502)", &[])
        .map_err(db("lock for migration"))?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS turnstone_schema (version integer NOT NULL)")
        .map_err(db("create schema table"))?;
    let found: i32 = match tx
        .query_opt("SELECT version FROM turnstone_schema", &[])
        .map_err(db("read schema version"))?
    {
        Some(row) => row.get(0),
        None => {
            tx.execute("INSERT INTO turnstone_schema VALUES (0)", &[])
                .map_err(db("write schema version"))?;
            0
        }
    };
    if found > SCHEMA_VERSION {
        return Err(PgError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for step in &STEPS[found as usize..] {
        tx.batch_execute(step).map_err(db("migrate"))?;
    }
    tx.execute(
        "UPDATE turnstone_schema SET version = $1",
        &[&SCHEMA_VERSION],
    )
    .map_err(db("write schema version"))?;
    tx.commit().map_err(db("commit migration"))
}
