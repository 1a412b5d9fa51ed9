//! The `turnstone` command line: run a fleet, inspect, repair, move sessions.
//! A library so that the Python package can ship the same CLI as a console
//! script ([`main_from`]); `src/main.rs` is the binary.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod archive;
mod copy;
mod dump;
mod export;
mod failure;
mod fleet;
mod gc;
mod import;
mod kinds;
mod messages;
mod meta;
mod pg_views;
mod place;
mod progress;
mod raw;
mod recover;
mod retention;
mod schema;
mod signals;
mod stats;
mod store_open;
mod style;
mod torture;
mod verify;
mod views;

pub use failure::Failure;

#[derive(Debug, Parser)]
#[command(
    name = "turnstone",
    version,
    about = "Tools for turnstone stores: an embedded, event-sourced storage engine for agent sessions",
    after_help = "Examples:\n  turnstone fleet ./demo-store\n  turnstone verify ./demo-store\n  turnstone dump ./demo-store --session sess-000003 --kind tool/call,tool/result\n  turnstone messages ./demo-store --session sess-000003 --json\n\nExit status: 0 success, 1 damage found (or a session could not be repaired), 2 the command could not run."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Simulate an agent fleet writing through the session layer; print one JSON line of results.
    #[command(
        after_help = "Example:\n  turnstone fleet ./demo-store --sessions 256 --threads 8 --events 200000\n\n\
Each session runs turns of: turn/start, user/message, then steps of step/start,\n\
request/header (initial, change on a model switch, resume after a reopen),\n\
request/context now and then, a durability checkpoint before the model request,\n\
20 assistant/chunk, assistant/message with a tool use, the tool run after its\n\
tool/call is durable, step/end and a checkpoint before the next step. Every few\n\
turns a compaction, now and then a pruned tool result and an empty assistant\n\
message. Reopening a store continues its sessions (repairing them when the\n\
previous run was killed; the repairs are counted on stderr)."
    )]
    Fleet(fleet::FleetArgs),
    /// Print the messages the model sees for one session (derive_messages), read-only.
    #[command(
        after_help = "Examples:\n  turnstone messages ./demo-store --session sess-000003\n  turnstone messages ./demo-store --session sess-000003 --json | jq -c 'select(.role == \"assistant\")'\n  turnstone messages ./demo-store --session sess-000003 --format anthropic | jq '.messages | length'\n\n\
With --json, one object per line: {\"role\":\"user\"|\"assistant\",\"source_seq\":N,\"kind\":\"user/message\"|\"assistant/message\"|\"tool/result\",\"content\":[blocks]}.\n\
With --format anthropic|openai-responses|openai-chat, the request body the log\n\
rebuilds for that API (model, parameters, system, tools, messages), as JSON."
    )]
    Messages(messages::MessagesArgs),
    /// Open a store for writing (recovery pass) and repair every session left open by a crash.
    #[command(
        after_help = "Examples:\n  turnstone recover ./demo-store\n  turnstone recover ./demo-store --json | jq .turns_interrupted\n\n\
Recovery truncates a torn tail (unacknowledged writes of an interrupted commit)\n\
and refuses corruption unless --point-in-time is given. Repair only appends:\n\
a TOOL_OUTCOME_UNKNOWN result for a recorded tool call without a result, a\n\
TOOL_NOT_STARTED result for a requested tool that was never recorded, step/end\n\
and turn/end {interrupted} for an open step and turn. Deleted sessions are\n\
passed over; staging sessions an interrupted import left (.staging/...) are\n\
deleted. Running it twice repairs nothing the second time. Exit status 1 when\n\
a session could not be repaired."
    )]
    Recover(recover::RecoverArgs),
    /// Print the frames of a store or of one segment file in log order (read-only, never locks).
    #[command(
        after_help = "Examples:\n  turnstone dump ./demo-store\n  turnstone dump ./demo-store/0000000002.tseg --raw\n  turnstone dump ./demo-store --session sess-000003 --from-seq 10 --to-seq 20\n  turnstone dump ./demo-store --kind tool/call,tool/result --json | jq -c '{session, seq, kind}'\n  turnstone dump ./demo-store --follow          # like tail -f while a fleet runs\n\n\
Damage is shown in place (offset, stored vs computed checksum, bytes skipped)\n\
and dumping goes on past it. Exit status: 0 no corruption (a torn tail is not\n\
corruption), 1 corruption found, 2 nothing could be read.\n\
The --json field names are documented in docs/CLI.md, \"dump --json fields\"."
    )]
    Dump(dump::DumpArgs),
    /// Check every segment and frame of a store (read-only, full scan); report per segment.
    #[command(
        after_help = "Examples:\n  turnstone verify ./demo-store\n  turnstone verify ./demo-store --json | jq '.per_segment[] | select(.status != \"ok\")'\n\n\
Exit status: 0 when clean or when the only damage is a torn tail, 1 on\n\
corruption, 2 when the store cannot be read at all."
    )]
    Verify(verify::VerifyArgs),
    /// Summarise a store: segments, bytes, sessions, events and bytes per kind, largest sessions, open turns.
    #[command(
        after_help = "Examples:\n  turnstone stats ./demo-store\n  turnstone stats ./demo-store --json | jq .kinds"
    )]
    Stats(stats::StatsArgs),
    /// Write one session's events as JSONL (seq, kind, data, surface op), read-only.
    #[command(
        after_help = "Examples:\n  turnstone export ./demo-store --session sess-000003 > sess-000003.jsonl\n  turnstone import ./other-store sess-000003.jsonl --session copy-of-3\n\n\
One line per event: {\"seq\":N,\"kind\":\"user/message\",\"data\":{...},\"surface\":{\"op\":\"append\"}};\n\
plugin events also carry \"ignorable\"."
    )]
    Export(export::ExportArgs),
    /// Append a JSONL file (as written by export) to a store as a new session; validates every line first.
    #[command(
        after_help = "Examples:\n  turnstone import ./demo-store sess-000003.jsonl                # session id from the file name\n  turnstone import ./demo-store sess-000003.jsonl --session restored-3\n\n\
Every line is checked before anything is written: JSON shape, kind, event data,\n\
surface ops (replayed against a scratch surface) and dense seqs 0, 1, 2, ...\n\
On the first bad line the import is refused with its line number and the store\n\
is not touched. The events are written all or nothing (one atomic batch, or\n\
for more than one batch holds, a staging session the new session then forks),\n\
each with the ts of its line, followed by session/end-seed (they are the new session's seed\n\
history) unless the file holds one already (an export of an imported session).\n\
A store directory that does not exist yet is created (as `fleet` does)."
    )]
    Import(import::ImportArgs),
    /// Stream one session's events in order (chunks and inherited fork events included), read-only.
    #[command(
        after_help = "Examples:\n  turnstone replay ./demo-store --session sess-000003\n  turnstone replay ./demo-store --session sess-000003 --json --pace\n  turnstone replay ./demo-store --session sess-000003 --follow   # like tail -f while it runs\n\n\
With --json, one object per event in the shape of `dump --json` (session is the replayed session's id).\n\
--follow prints each new event once the writing process has made it durable\n\
(the store is checked every 50 ms with one small read; the follower never\n\
slows the writer or makes it sync)."
    )]
    Replay(views::ReplayArgs),
    /// Fork a session: the child references a stable prefix of the source (no event body is copied).
    #[command(
        after_help = "Examples:\n  turnstone fork ./demo-store --session sess-000003\n  turnstone fork ./demo-store --session sess-000003 --at 120 --child experiment-1\n\n\
The child holds the source's events with seq < AT; the default is the end of the last closed turn.\n\
A boundary inside an unfinished turn is refused. Prints the child's id."
    )]
    Fork(views::ForkArgs),
    /// List sessions: events, created/updated time, open turn, fork parent, metadata; with filters and pages (read-only).
    #[command(
        after_help = "Examples:\n  turnstone sessions ./demo-store\n  turnstone sessions ./demo-store --json | jq -c 'select(.open_turn)'\n  turnstone sessions ./demo-store --tag ci --where user=alice --json\n  turnstone sessions ./demo-store --open-turn --newest-first --limit 50 --after c1234\n\n\
Filters combine (all must hold). Sessions are listed in creation order (or newest first);\n\
with --limit, the cursor of the next page is printed on stderr (\"next: --after cN\"); a cursor\n\
stays valid while sessions are added. Deleted sessions are not listed. --json prints one\n\
object per session: id, events, created_ms, updated_ms, open_turn, parent, metadata {title, tags, fields}."
    )]
    Sessions(views::SessionsArgs),
    /// Show or change a session's metadata (title, tags, KEY=VALUE fields), written as a session/meta event.
    #[command(
        after_help = "Examples:\n  turnstone meta ./demo-store --session sess-000003\n  turnstone meta ./demo-store --session sess-000003 --set user=alice --set git_branch=main --tag ci\n  turnstone meta ./demo-store --session sess-000003 --untag ci --unset git_branch --title \"flaky test\" --json\n\n\
Without a change the metadata is printed (read-only). With changes, one session/meta event is\n\
appended and made durable (the store must not be open by another process), then the\n\
result is printed. Fork children inherit metadata up to the fork point."
    )]
    Meta(meta::MetaArgs),
    /// Delete a session: append a durable session/delete tombstone (its forks keep working).
    #[command(
        after_help = "Example:\n  turnstone delete ./demo-store --session sess-000003\n\n\
The session is then not found by loads, sessions, search, replay and fork. Forks of it\n\
keep the events they inherit. Its bytes become reclaimable: `turnstone gc` frees them."
    )]
    Delete(meta::DeleteArgs),
    /// Segment collection: free the bytes of deleted sessions (takes the store's lock; FORMAT.md §14).
    #[command(
        after_help = "Examples:\n  turnstone gc ./demo-store --dry-run\n  turnstone gc ./demo-store --json | jq .bytes_reclaimed\n\n\
Sealed segments whose live bytes are below --threshold of their data are rewritten\n\
into one compacted file per run of them, holding only live frames grouped by session;\n\
the other files of the run are removed. Live: every frame of a session not deleted,\n\
and the prefix of a deleted session that a live fork reads through it. The segment\n\
appends go to is never touched. The store must not be open for writing elsewhere.\n\
Retention: the store's policy (turnstone retention, retention.json) applies; --expire-after D,\n\
--max-age D and --max-bytes N override its store-wide rules for this run (by the events' ts;\n\
sessions without ts never expire by time; --max-bytes evicts the oldest sessions first).\n\
--json prints {dry_run, segments_examined, ranges_rewritten, segment_files_removed,\n\
sessions_reclaimed, bytes_before, bytes_live, bytes_after, bytes_reclaimed, duration_us}."
    )]
    Gc(gc::GcArgs),
    /// Show or change the store's retention policy (retention.json, FORMAT.md §18).
    #[command(
        after_help = "Examples:\n  turnstone retention ./demo-store\n  turnstone retention ./demo-store --expire-after 30d --max-bytes 500G\n  turnstone retention ./demo-store --session sess-000003 --keep\n  turnstone retention ./demo-store --clear\n\n\
Expired sessions vanish at once from loads, lists and search, like deleted ones, and the next\n\
collection (turnstone gc, or a store's background collector) frees their bytes. --max-bytes is\n\
applied by collections: the sessions whose last event is oldest go first. Times are the events' ts;\n\
sessions whose events carry none (raw appends, serve's streams) expire only by --max-bytes (streams never).\n\
Needs no lock: the file is replaced atomically and read by every opener. Prints the policy as JSON."
    )]
    Retention(retention::RetentionArgs),
    /// Full-text search over message text of every session (user, assistant, tool results, summaries).
    #[command(
        after_help = "Examples:\n  turnstone search ./demo-store \"disk full\"\n  turnstone search ./demo-store 'error NOT retry' --json\n  turnstone search ./demo-store deploy --session fork-1\n\n\
Events a fork inherits are indexed once, under the session that wrote them; --session searches\n\
one session with its inherited prefix. The index (DIR/search.sqlite, SQLite FTS5) is derived from the durable log, updated on each search,\n\
and can be deleted at any time. --json prints {\"session\",\"seq\",\"snippet\"} per hit."
    )]
    Search(views::SearchArgs),
    /// Write one session (with its inherited history and its blobs) to one self-contained, checksummed file.
    #[command(
        after_help = "Examples:\n  turnstone archive ./demo-store --session sess-000003 --out sess-000003.tsarc\n  turnstone archive ./demo-store --session sess-000003 --out /cold/s3.tsarc --delete\n\n\
The file (FORMAT.md §16) holds every event as stored (seqs, kinds, flags, payloads with their ts),\n\
a fork's inherited events included, and every blob they reference. It is written to FILE.partial,\n\
fsynced, renamed to FILE and its directory fsynced; an existing FILE is refused. With --delete the\n\
session's tombstone is appended only after that (its bytes become reclaimable, not reclaimed).\n\
`turnstone dump FILE` and `turnstone verify FILE` read an archive as a lone file."
    )]
    Archive(archive::ArchiveArgs),
    /// Bring an archived session back into a store, with its original seqs and timestamps.
    #[command(
        after_help = "Examples:\n  turnstone restore ./demo-store sess-000003.tsarc\n  turnstone restore ./other-store sess-000003.tsarc --session s3-again\n\n\
The whole file is checked first (a damaged archive is refused with its file and offset, and the\n\
store is not touched); then its blobs are written and its events appended all or nothing (one\n\
atomic batch, or for more than one batch holds, a staging session the new session then forks).\n\
A name the store already has, even a deleted one, is refused: restore under another id with --session.\n\
A store directory that does not exist yet is created."
    )]
    Restore(archive::RestoreArgs),
    /// Copy every live session between a store directory and PostgreSQL (either way), keeping seqs, payloads (with their ts) and forks.
    #[command(
        after_help = "Examples:\n  turnstone copy ./demo-store postgres://me@db.example/agents\n  turnstone copy postgresql://me@db.example/agents ./local-copy --json\n\n\
SRC and DST are each a store directory or a postgres:// (postgresql://) URL; DST is created\n\
when it is a directory that does not exist. Every live session is copied, parents before\n\
children: a fork stays a fork of the same parent at the same fork point (its inherited events\n\
are not copied), every event keeps its seq, kind, flags and payload (the envelope's ts with it).\n\
A deleted session is copied only as far as a live fork reads through it, then deleted again.\n\
Blob references are resolved: the database gets the content inline, a store directory stores\n\
large blocks as its own blobs again; a missing or damaged blob stops the copy, naming the\n\
session and seq. If DST already has any of the sessions (deleted ones included) nothing is\n\
written and the names are listed. The copy is not atomic: after a failure DST holds the\n\
sessions copied so far. --json prints {sessions, deleted_ancestors, events, bytes, duration_us}."
    )]
    Copy(copy::CopyArgs),
    /// Crash torture: kill a child fleet at random moments and power-cut a simulated store, checking every acknowledged event and every repair.
    Torture(torture::TortureArgs),
    /// Serve the store over HTTP with the Durable Streams protocol (create, append, read, live tail, fork).
    #[command(
        after_help = "Examples:\n  turnstone serve ./streams-store\n  turnstone serve ./streams-store --listen 127.0.0.1:8080 --token \"$TOKEN\"\n\n\
Each stream is a session, each append an atomic event group; a 2xx answer to a\n\
write means it is durable. See docs/SERVE.md."
    )]
    #[cfg(feature = "serve")]
    Serve(turnstone_server::cli::ServeArgs),
    /// Print the JSON Schema of each core kind's data (or docs/EVENTS.md with --markdown).
    #[command(
        after_help = "Examples:\n  turnstone schema turn/end\n  turnstone schema | jq 'keys'\n  turnstone schema --markdown > docs/EVENTS.md\n\n\
Generated from the engine's types, so it cannot drift from what append accepts.\n\
x-turnstone-surface says whether the kind needs a surface op."
    )]
    Schema(schema::SchemaArgs),
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    match cli.cmd {
        Cmd::Fleet(a) => fleet::run(&a).map(|()| ExitCode::SUCCESS),
        Cmd::Messages(a) => messages::run(&a),
        Cmd::Recover(a) => recover::run(&a),
        Cmd::Dump(a) => dump::run(&a),
        Cmd::Verify(a) => verify::run(&a),
        Cmd::Stats(a) => stats::run(&a),
        Cmd::Export(a) => export::run(&a),
        Cmd::Import(a) => import::run(&a),
        Cmd::Replay(a) => views::run_replay(&a),
        Cmd::Fork(a) => views::run_fork(&a),
        Cmd::Sessions(a) => views::run_sessions(&a),
        Cmd::Search(a) => views::run_search(&a),
        Cmd::Meta(a) => meta::run_meta(&a),
        Cmd::Delete(a) => meta::run_delete(&a),
        Cmd::Gc(a) => gc::run(&a),
        Cmd::Retention(a) => retention::run(&a),
        Cmd::Copy(a) => copy::run(&a),
        Cmd::Torture(a) => torture::run(&a),
        Cmd::Archive(a) => archive::run_archive(&a),
        Cmd::Restore(a) => archive::run_restore(&a),
        Cmd::Schema(a) => schema::run(&a),
        #[cfg(feature = "serve")]
        Cmd::Serve(a) => turnstone_server::cli::run(&a)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::io),
    }
}

/// Run the command line on `args` (the program name first), as the
/// `turnstone` binary does: parse, run, print a failure as one line, and
/// return the exit status. `--help`, `--version` and a usage error print
/// and exit the process, as clap does.
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("turnstone: internal error (a bug, please report it): {info}");
    }));
    // `turnstone dump | head` ends quietly, as other Unix tools do.
    signals::default_sigpipe();
    let cli = Cli::parse_from(args);
    let code = match run(cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("turnstone: {}", f.msg);
            ExitCode::from(f.code)
        }
    };
    // Run inside a Python or Node process (the packages' `turnstone`), no
    // Rust `main` returns to flush what the last line left buffered.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    code
}

/// Paths in messages: as given.
pub fn show(p: &std::path::Path) -> String {
    p.display().to_string()
}
