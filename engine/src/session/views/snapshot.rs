//! Projection caches in snapshot files (`format-spec/FORMAT.md` §12).
//!
//! A snapshot holds a projection's state (bincode 2, serde, standard config)
//! with the number of events it has folded, the projection's name and
//! version, and the identity of the source log (store id, the position of the
//! session's `session-define` frame, and a checksum of the last folded
//! event). Invariant 5: a snapshot is written only after the log is durable up
//! to what it covers, atomically (temp file, fsync, rename, fsync directory);
//! on read it is used only if every field matches, else it is discarded and
//! the state rebuilt from the log. A cache may lag the log, never lead it.

use std::path::{Path, PathBuf};

use crate::derived::{write_atomic, DerivedKind};
use crate::error::{Error, Result};
use crate::session::codec::envelope;
use crate::session::codec::envelope::decode_error;
use crate::session::codec::event::Registry;
use crate::session::log::LogRef;
use crate::session::views::projection::Projection;
use crate::types::LogPos;

/// Directory of snapshot files inside the store (FORMAT.md §12).
pub const SNAPSHOT_DIR: &str = "snapshots";
/// Magic of a snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"TSTNSNP\0";
/// Version of the snapshot file format.
pub const SNAPSHOT_VERSION: u32 = 1;
/// Bytes of the fixed header.
pub const SNAPSHOT_HEADER_BYTES: usize = 64;

/// Identity of what a snapshot covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// The store's id.
    pub store_id: [u8; 16],
    /// Position of the session's `session-define` frame (its incarnation).
    pub define_pos: LogPos,
    /// Events folded: seqs `0..covered`.
    pub covered: u64,
    /// The projection's version.
    pub projection_version: u32,
    /// [`event_crc`] of event `covered - 1` (0 when `covered` is 0).
    pub last_event_crc: u32,
    /// The projection name.
    pub projection: String,
    /// The session id.
    pub session: String,
}

/// Checksum identifying one stored event: crc32 of kind (u16 LE), flags
/// (u16 LE) and payload.
pub fn event_crc(kind: u16, flags: u16, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&kind.to_le_bytes());
    h.update(&flags.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Encode a snapshot file.
pub fn encode(h: &SnapshotHeader, state: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        SNAPSHOT_HEADER_BYTES + h.projection.len() + h.session.len() + state.len() + 12,
    );
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    out.extend_from_slice(&(SNAPSHOT_HEADER_BYTES as u32).to_le_bytes());
    out.extend_from_slice(&h.store_id);
    out.extend_from_slice(&h.define_pos.0.to_le_bytes());
    out.extend_from_slice(&h.covered.to_le_bytes());
    out.extend_from_slice(&h.projection_version.to_le_bytes());
    out.extend_from_slice(&h.last_event_crc.to_le_bytes());
    out.extend_from_slice(&(h.projection.len() as u16).to_le_bytes());
    out.extend_from_slice(&(h.session.len() as u16).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    debug_assert_eq!(out.len(), SNAPSHOT_HEADER_BYTES);
    out.extend_from_slice(h.projection.as_bytes());
    out.extend_from_slice(h.session.as_bytes());
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(state);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decode a snapshot file; `Err(reason)` if anything is off.
pub fn decode(b: &[u8]) -> std::result::Result<(SnapshotHeader, &[u8]), String> {
    if b.len() < SNAPSHOT_HEADER_BYTES + 12 {
        return Err(format!("snapshot has only {} bytes", b.len()));
    }
    let body = crate::derived::checked_body(b, "snapshot")?;
    if body[0..8] != SNAPSHOT_MAGIC {
        return Err("bad snapshot magic".into());
    }
    let u16_at = |o: usize| u16::from_le_bytes([body[o], body[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().expect("4"));
    let u64_at = |o: usize| u64::from_le_bytes(body[o..o + 8].try_into().expect("8"));
    if u32_at(8) != SNAPSHOT_VERSION {
        return Err(format!("snapshot format version {}", u32_at(8)));
    }
    if u32_at(12) as usize != SNAPSHOT_HEADER_BYTES || body[60..64] != [0; 4] {
        return Err("snapshot header malformed".into());
    }
    let (pn, sn) = (u16_at(56) as usize, u16_at(58) as usize);
    let names_end = SNAPSHOT_HEADER_BYTES + pn + sn;
    if names_end + 8 > body.len() {
        return Err("snapshot names run past the end".into());
    }
    let projection = std::str::from_utf8(&body[SNAPSHOT_HEADER_BYTES..SNAPSHOT_HEADER_BYTES + pn])
        .map_err(|_| "snapshot projection name is not UTF-8")?
        .to_string();
    let session = std::str::from_utf8(&body[SNAPSHOT_HEADER_BYTES + pn..names_end])
        .map_err(|_| "snapshot session name is not UTF-8")?
        .to_string();
    let state_len = u64_at(names_end) as usize;
    if names_end + 8 + state_len != body.len() {
        return Err("snapshot state length does not match the file".into());
    }
    Ok((
        SnapshotHeader {
            store_id: body[16..32].try_into().expect("16"),
            define_pos: LogPos(u64_at(32)),
            covered: u64_at(40),
            projection_version: u32_at(48),
            last_event_crc: u32_at(52),
            projection,
            session,
        },
        &body[names_end + 8..],
    ))
}

/// Snapshot file of (session, projection): a hash of the session id keeps
/// names short and safe; the file itself names the session, so a collision
/// only costs a rebuild.
pub fn snapshot_path(dir: &Path, session: &str, projection: &str) -> PathBuf {
    let a = crc32fast::hash(session.as_bytes());
    let mut h = crc32fast::Hasher::new_with_initial(0x9e37_79b9);
    h.update(session.as_bytes());
    let b = h.finalize();
    let safe: String = projection
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(SNAPSHOT_DIR)
        .join(format!("{a:08x}{b:08x}-{safe}.snap"))
}

/// After a collection moved define frames (FORMAT.md §14.4;
/// [`crate::gc::CollectReport::moved_defines`]): point the snapshot files
/// of those sessions (projections, §12, and session state, §17) whose
/// `define_pos` is the old position at the new one, so that they stay
/// usable instead of being discarded as another incarnation's. Only the
/// header changes; every other check still applies when the file is read.
/// Derived files: a crash in between leaves the old file (discarded at the
/// next read, as before) or the new one. Returns the files rewritten.
pub fn rebase_defines(
    vfs: &dyn crate::vfs::Vfs,
    store_dir: &Path,
    moved: &[(String, LogPos, LogPos)],
) -> Result<usize> {
    let dir = store_dir.join(SNAPSHOT_DIR);
    if moved.is_empty() || !vfs.is_dir(&dir) {
        return Ok(0);
    }
    let names = vfs
        .list(&dir)
        .map_err(|e| Error::io("list snapshot directory", &dir, e))?;
    let mut rewritten = 0;
    for (session, from, to) in moved {
        let a = crc32fast::hash(session.as_bytes());
        let mut hasher = crc32fast::Hasher::new_with_initial(0x9e37_79b9);
        hasher.update(session.as_bytes());
        let prefix = format!("{a:08x}{:08x}", hasher.finalize());
        for n in names
            .iter()
            .filter(|n| n.starts_with(&prefix) && (n.ends_with(".snap") || n.ends_with(".state")))
        {
            let path = dir.join(n);
            let Ok(bytes) = crate::vfs::read_whole(vfs, &path) else {
                continue;
            };
            let Ok((mut h, state)) = decode(&bytes) else {
                continue;
            };
            if h.session != *session || h.define_pos != *from {
                continue;
            }
            h.define_pos = *to;
            let new = encode(&h, state);
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".tmp");
            write_atomic(vfs, DerivedKind::Snapshot, &PathBuf::from(tmp), &path, &new)?;
            rewritten += 1;
        }
    }
    Ok(rewritten)
}

/// What reading through the cache did.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheRead<S> {
    /// The projection state.
    pub state: S,
    /// Events covered by the snapshot used (None: folded from seq 0).
    pub snapshot_covered: Option<u64>,
    /// Events folded after the snapshot.
    pub folded: u64,
    /// Why a snapshot present on disk was not used.
    pub discarded: Option<String>,
}

/// A usable snapshot (events covered, state), or why there is none
/// (`None`: no file).
type Loaded<S> = std::result::Result<(u64, S), Option<String>>;

fn load_snapshot<P: Projection>(log: LogRef<'_>, session: &str, p: &P) -> Result<Loaded<P::State>> {
    let slot = Slot::of(log, |dir| snapshot_path(dir, session, p.name()));
    let (h, state) = match read_checked(log, session, &slot, p.name(), p.version())? {
        Ok(x) => x,
        Err(why) => return Ok(Err(why)),
    };
    match bincode::serde::decode_from_slice::<P::State, _>(&state, bincode::config::standard()) {
        Ok((s, used)) if used == state.len() => Ok(Ok((h.covered, s))),
        Ok(_) => Ok(Err(Some("snapshot state has trailing bytes".into()))),
        Err(e) => Ok(Err(Some(format!("snapshot state does not decode: {e}")))),
    }
}

/// A snapshot that passed every check (header, state bytes), or why there
/// is none to use (`None`: no file).
pub(crate) type Checked = std::result::Result<(SnapshotHeader, Vec<u8>), Option<String>>;

/// Where a snapshot is kept: a file of the embedded store's `snapshots/`
/// directory, or (any other log) the log's own snapshot table under the
/// header's name.
pub(crate) enum Slot {
    File(PathBuf),
    Log,
}

impl Slot {
    /// The slot of a snapshot in `log`; `path` names the file from the
    /// store's directory.
    pub(crate) fn of(log: LogRef<'_>, path: impl FnOnce(&Path) -> PathBuf) -> Slot {
        match log.as_log().files() {
            Some((dir, _)) => Slot::File(path(dir)),
            None => Slot::Log,
        }
    }
}

/// Read the snapshot in `slot` and check it against the log of `session`
/// by every rule of FORMAT.md §12: checksum and layout; store id, session
/// id, `name` and `version`; the session's current `define_pos`; `covered`
/// at most the session's length; the log's event `covered - 1` has
/// `last_event_crc`. `Ok(Err(None))`: no snapshot; `Ok(Err(Some(why)))`:
/// one that is not to be used; `Err`: it or the log could not be read.
pub(crate) fn read_checked(
    log: LogRef<'_>,
    session: &str,
    slot: &Slot,
    name: &str,
    version: u32,
) -> Result<Checked> {
    let bytes = match (log.as_log().files(), slot) {
        (Some((_, vfs)), Slot::File(path)) => {
            if !vfs.exists(path) {
                return Ok(Err(None));
            }
            crate::vfs::read_whole(vfs.as_ref(), path)
                .map_err(|e| Error::io("read snapshot", path, e))?
        }
        (None, Slot::Log) => match log.as_log().snapshot(session, name)? {
            Some(b) => b,
            None => return Ok(Err(None)),
        },
        // A slot of another log's kind: nothing kept there.
        _ => return Ok(Err(None)),
    };
    let (h, state) = match decode(&bytes) {
        Ok(x) => x,
        Err(why) => return Ok(Err(Some(why))),
    };
    // The identity the snapshot must carry, and the session's length.
    let missing = || Error::UnknownSession(session.to_string());
    let (store_id, define_pos) = log.as_log().incarnation(session)?.ok_or_else(missing)?;
    let len = log.appended_len(session)?.ok_or_else(missing)?;
    let why = if h.store_id != store_id {
        Some("snapshot belongs to another store".to_string())
    } else if h.session != session || h.projection != name {
        Some("snapshot names another session or projection".to_string())
    } else if h.projection_version != version {
        Some(format!(
            "snapshot of projection version {}, current is {}",
            h.projection_version, version
        ))
    } else if h.define_pos != define_pos {
        Some("snapshot of an earlier incarnation of this session".to_string())
    } else if h.covered > len {
        Some(format!(
            "snapshot covers {} events but the log has {}: it leads the log",
            h.covered, len
        ))
    } else {
        None
    };
    if let Some(why) = why {
        return Ok(Err(Some(why)));
    }
    if h.covered > 0 {
        let crate::session::codec::envelope::EncodedEvent {
            kind,
            flags,
            payload,
        } = log.stored_event(session, h.covered - 1)?;
        if event_crc(kind, flags, &payload) != h.last_event_crc {
            return Ok(Err(Some(
                "the log's event at the snapshot point differs: the source changed".into(),
            )));
        }
    }
    let state = state.to_vec();
    Ok(Ok((h, state)))
}

/// Read projection `p` of `session`: from its snapshot if one matches, then
/// folding only the events after it; otherwise from seq 0.
pub fn read<'a, P: Projection>(
    log: impl Into<LogRef<'a>>,
    registry: &Registry,
    session: &str,
    p: &P,
) -> Result<CacheRead<P::State>> {
    let log = log.into();
    let len = log
        .appended_len(session)?
        .ok_or_else(|| Error::UnknownSession(session.to_string()))?;
    let (start, mut state, snapshot_covered, discarded) = match load_snapshot(log, session, p)? {
        Ok((covered, s)) => (covered, s, Some(covered), None),
        Err(why) => (0, P::State::default(), None, why),
    };
    let mut at = start;
    while at < len {
        let to = (at + 4096).min(len);
        // Decoded straight from the log's bytes (payloads lent, not copied).
        let mut failed = None;
        log.visit(session, at..to, |e| {
            let payload = match e.payload {
                Ok(p) => p,
                Err(err) => {
                    failed = Some(err);
                    return std::ops::ControlFlow::Break(());
                }
            };
            match envelope::decode(e.seq, e.kind, e.flags, &payload, registry) {
                Ok(ev) => {
                    if let Some(next) = p.fold(&state, &ev) {
                        state = next;
                    }
                    std::ops::ControlFlow::Continue(())
                }
                Err(err) => {
                    failed = Some(decode_error(session, e.seq, err));
                    std::ops::ControlFlow::Break(())
                }
            }
        })?;
        if let Some(err) = failed {
            return Err(err);
        }
        at = to;
    }
    Ok(CacheRead {
        state,
        snapshot_covered,
        folded: len - start,
        discarded,
    })
}

/// Write a snapshot of `state`, which must be `p` folded over events
/// `0..covered`. Refused unless those events are durable (a cache never
/// leads the log). Atomic: temp file, fsync, rename, fsync directory.
pub fn write<'a, P: Projection>(
    log: impl Into<LogRef<'a>>,
    session: &str,
    p: &P,
    state: &P::State,
    covered: u64,
) -> Result<()> {
    let log = log.into();
    let state_bytes = bincode::serde::encode_to_vec(state, bincode::config::standard())
        .map_err(|e| Error::InvalidArgument(format!("projection state does not encode: {e}")))?;
    let slot = Slot::of(log, |dir| snapshot_path(dir, session, p.name()));
    write_file(
        log,
        session,
        &slot,
        p.name(),
        p.version(),
        covered,
        &state_bytes,
    )
    .map(|_| ())
}

/// Write the snapshot in `slot` holding `state_bytes`, the state of
/// `name` at `version` over events `0..covered` of `session`. Refused
/// unless those events are durable (a cache never leads the log). A file
/// is written atomically: temp file, fsync, rename, fsync directory; a log
/// with its own snapshot table replaces the row in one statement. Returns
/// whether the snapshot is kept (a log may keep none).
pub(crate) fn write_file(
    log: LogRef<'_>,
    session: &str,
    slot: &Slot,
    name: &str,
    version: u32,
    covered: u64,
    state_bytes: &[u8],
) -> Result<bool> {
    let missing = || Error::UnknownSession(session.to_string());
    let (store_id, define_pos) = log.as_log().incarnation(session)?.ok_or_else(missing)?;
    let durable = log.durable_len(session)?.ok_or_else(missing)?;
    if covered > durable {
        return Err(Error::Refused(format!(
            "snapshot would cover {covered} events of {session:?} but only {durable} are durable"
        )));
    }
    let last_event_crc = if covered > 0 {
        let crate::session::codec::envelope::EncodedEvent {
            kind,
            flags,
            payload,
        } = log.stored_event(session, covered - 1)?;
        event_crc(kind, flags, &payload)
    } else {
        0
    };
    let header = SnapshotHeader {
        store_id,
        define_pos,
        covered,
        projection_version: version,
        last_event_crc,
        projection: name.to_string(),
        session: session.to_string(),
    };
    let bytes = encode(&header, state_bytes);
    match (log.as_log().files(), slot) {
        (Some((dir, vfs)), Slot::File(path)) => {
            let dir = dir.join(SNAPSHOT_DIR);
            vfs.create_dir_all(&dir)
                .map_err(|e| Error::io("create snapshot directory", &dir, e))?;
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".tmp");
            let tmp = PathBuf::from(tmp);
            write_atomic(vfs.as_ref(), DerivedKind::Snapshot, &tmp, path, &bytes)?;
            Ok(true)
        }
        (None, Slot::Log) => log.as_log().put_snapshot(session, name, covered, &bytes),
        // A slot of another log's kind: not kept.
        _ => Ok(false),
    }
}

/// Read through the cache and, when the durable prefix has grown past the
/// snapshot, write a fresh snapshot of that prefix.
pub fn refresh<'a, P: Projection>(
    log: impl Into<LogRef<'a>>,
    registry: &Registry,
    session: &str,
    p: &P,
) -> Result<CacheRead<P::State>> {
    let log = log.into();
    let r = read(log, registry, session, p)?;
    let missing = || Error::UnknownSession(session.to_string());
    let len = log.appended_len(session)?.ok_or_else(missing)?;
    let durable = log.durable_len(session)?.ok_or_else(missing)?;
    let covered = r.snapshot_covered.unwrap_or(0);
    if durable > covered && durable == len {
        write(log, session, p, &r.state, len)?;
    }
    Ok(r)
}
