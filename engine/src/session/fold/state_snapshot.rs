//! Session state snapshots (`format-spec/FORMAT.md` §17).
//!
//! [`Session::open`] of a long session starts from a snapshot of the
//! session's fold (surface, which surface nodes carry a message, header,
//! context, open turn/step/tool state, turns, metadata, seed end, the
//! kinds the fold has met) and folds only the events after it. The file is
//! the container of §12 (same header, same checks: store id, session id,
//! the session's `define_pos`, `covered` at most the log's length, the
//! checksum of event `covered - 1`), under its own name, with the state
//! below in place of a projection's. Like every derived file it is never
//! trusted: any mismatch discards it and the session is folded from seq 0.
//!
//! The messages themselves are not in the file: only the keys (surface
//! node seqs, and which of them derive no message). Their content is read
//! from the log the first time the messages are derived
//! ([`Session::try_derive_messages`]), so an open costs the snapshot plus
//! the tail, not the session.
//!
//! When written: by [`Session::save_state_snapshot`]; by [`Session::close`]
//! and by a writable [`Session::open`] when the fold since the snapshot
//! on disk is at least [`STATE_SNAPSHOT_TAIL`] events and every event of
//! the session is durable (a snapshot never leads the log). Only writable
//! handles write them (a read-only view folds unknown kinds leniently).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::session::codec::event::{
    EpochHeader, Registry, RequestContext, SessionMetadata, TurnEndReason,
};
use crate::session::fold::coords::TurnInfo;
use crate::session::fold::state::{KindsSeen, OpenState};
use crate::session::fold::surface::Surface;
use crate::session::log::LogRef;
use crate::session::views::snapshot::{read_checked, write_file, Slot, SNAPSHOT_DIR};

/// The name a state snapshot carries in the §12 header's projection field
/// (not a valid projection file name, so it never meets one).
pub const STATE_SNAPSHOT_NAME: &str = "session/state";
/// Version of the state encoding (the §12 header's `projection_version`).
pub const STATE_SNAPSHOT_VERSION: u32 = 2;
/// A writable open or a close writes a fresh snapshot when at least this
/// many events lie past the one on disk (about 2 ms of fold).
pub const STATE_SNAPSHOT_TAIL: u64 = 1024;

/// State snapshot file of `session`: `snapshots/HHHHHHHHhhhhhhhh.state`
/// (the two crc32s of §12's file name).
pub fn state_snapshot_path(dir: &Path, session: &str) -> PathBuf {
    let a = crc32fast::hash(session.as_bytes());
    let mut h = crc32fast::Hasher::new_with_initial(0x9e37_79b9);
    h.update(session.as_bytes());
    let b = h.finalize();
    dir.join(SNAPSHOT_DIR).join(format!("{a:08x}{b:08x}.state"))
}

/// One turn as stored: turn id, start seq, end seq, end reason code (0 none,
/// 1 completed, 2 cancelled, 3 error, 4 interrupted), the error's message.
type SavedTurn = (String, u64, Option<u64>, u8, Option<String>);

/// Everything [`Session`](crate::session::Session) folds, as stored
/// (bincode 2, serde, standard config; FORMAT.md §17 lists the fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedState {
    pub len: u64,
    pub surface_nodes: Vec<u64>,
    pub replace_generation: u64,
    /// Surface nodes that derive no message (an empty assistant message, a
    /// tool result answering nothing), ascending.
    pub no_message: Vec<u64>,
    /// `request/header` data of the latest header, JSON.
    pub header_json: Option<String>,
    /// The latest `request/context`, JSON.
    pub context_json: Option<String>,
    pub seed_end: Option<u64>,
    pub open_turn: Option<(String, u64)>,
    pub open_step: Option<(String, String, u64)>,
    pub open_calls: Vec<(String, u64)>,
    pub open_requested: Vec<(String, u64, String)>,
    pub open_origin: Vec<(String, u64, u32)>,
    pub open_unrequested: Vec<String>,
    /// (turn id, start seq, end seq, reason code, error message).
    pub turns: Vec<SavedTurn>,
    /// The metadata fold, JSON.
    pub metadata_json: String,
    pub deleted: Option<u64>,
    pub core_kinds: u64,
    pub plugin_kinds: Vec<String>,
    /// Tool-use ids answered: id, seq of the first `tool/result`; by id.
    pub answered: Vec<(String, u64)>,
}

/// The restored parts, decoded.
pub(crate) struct Restored {
    pub len: u64,
    pub surface: Surface,
    pub no_message: Vec<u64>,
    pub header: Option<EpochHeader>,
    pub context: Option<RequestContext>,
    pub seed_end: Option<u64>,
    pub open: OpenState,
    pub turns: Vec<TurnInfo>,
    pub metadata: SessionMetadata,
    pub deleted: Option<u64>,
    pub kinds: KindsSeen,
    pub answered: BTreeMap<String, u64>,
}

/// The parts of a session's fold a snapshot is made from.
pub(crate) struct Parts<'a> {
    pub len: u64,
    pub surface: &'a Surface,
    pub no_message: Vec<u64>,
    pub header: Option<&'a EpochHeader>,
    pub context: Option<&'a RequestContext>,
    pub seed_end: Option<u64>,
    pub open: &'a OpenState,
    pub turns: &'a [TurnInfo],
    pub metadata: &'a SessionMetadata,
    pub deleted: Option<u64>,
    pub kinds: &'a KindsSeen,
    pub answered: &'a BTreeMap<String, u64>,
}

fn reason_code(r: &Option<TurnEndReason>) -> (u8, Option<String>) {
    match r {
        None => (0, None),
        Some(TurnEndReason::Completed) => (1, None),
        Some(TurnEndReason::Cancelled) => (2, None),
        Some(TurnEndReason::Error { message }) => (3, Some(message.clone())),
        Some(TurnEndReason::Interrupted) => (4, None),
    }
}

fn reason_from(
    code: u8,
    message: Option<String>,
) -> std::result::Result<Option<TurnEndReason>, String> {
    Ok(match (code, message) {
        (0, None) => None,
        (1, None) => Some(TurnEndReason::Completed),
        (2, None) => Some(TurnEndReason::Cancelled),
        (3, Some(message)) => Some(TurnEndReason::Error { message }),
        (4, None) => Some(TurnEndReason::Interrupted),
        (c, _) => return Err(format!("turn end reason code {c} is not defined")),
    })
}

/// Encode the state of `p`.
pub(crate) fn encode_state(p: &Parts<'_>) -> Result<Vec<u8>> {
    let saved = SavedState {
        len: p.len,
        surface_nodes: p.surface.nodes.clone(),
        replace_generation: p.surface.replace_generation,
        no_message: p.no_message.clone(),
        header_json: p.header.map(json).transpose()?,
        context_json: p.context.map(json).transpose()?,
        seed_end: p.seed_end,
        open_turn: p.open.turn.clone(),
        open_step: p.open.step.clone(),
        open_calls: p.open.calls.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        open_requested: p
            .open
            .requested
            .iter()
            .map(|(k, (s, n))| (k.clone(), *s, n.clone()))
            .collect(),
        open_origin: p
            .open
            .origin
            .iter()
            .map(|(k, (s, i))| (k.clone(), *s, *i))
            .collect(),
        open_unrequested: p.open.unrequested.iter().cloned().collect(),
        turns: p
            .turns
            .iter()
            .map(|t| {
                let (code, msg) = reason_code(&t.reason);
                (t.turn_id.clone(), t.start_seq, t.end_seq, code, msg)
            })
            .collect(),
        metadata_json: json(p.metadata)?,
        deleted: p.deleted,
        core_kinds: p.kinds.core,
        plugin_kinds: p.kinds.plugins.iter().cloned().collect(),
        answered: p.answered.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    };
    bincode::serde::encode_to_vec(&saved, bincode::config::standard())
        .map_err(|e| Error::InvalidArgument(format!("session state does not encode: {e}")))
}

/// JSON text of a serde value.
fn json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v)
        .map_err(|e| Error::InvalidArgument(format!("session state does not encode: {e}")))
}

/// Decode and check a state (`Err(why)`: not to be used).
pub(crate) fn decode_state(
    bytes: &[u8],
    covered: u64,
    registry: &Registry,
) -> std::result::Result<Restored, String> {
    let s: SavedState = match bincode::serde::decode_from_slice(bytes, bincode::config::standard())
    {
        Ok((s, used)) if used == bytes.len() => s,
        Ok(_) => return Err("session state has trailing bytes".into()),
        Err(e) => return Err(format!("session state does not decode: {e}")),
    };
    if s.len != covered {
        return Err(format!(
            "session state of {} events in a snapshot covering {covered}",
            s.len
        ));
    }
    // Kinds: the fold from seq 0 would refuse what this process does not know.
    for code in (0..64u16).filter(|c| s.core_kinds & (1u64 << c) != 0) {
        if crate::session::codec::event::CoreKind::from_code(code).is_none() {
            return Err(format!(
                "the snapshot's fold applied kind code {code}, unknown here"
            ));
        }
    }
    if let Some(k) = s.plugin_kinds.iter().find(|k| !registry.knows(k)) {
        return Err(format!(
            "the snapshot's fold met plugin kind {k:?}, not registered here"
        ));
    }
    // Every key must point into the events covered.
    let bad_seq = |q: &u64| *q >= covered;
    if s.surface_nodes.iter().any(bad_seq)
        || s.no_message.iter().any(bad_seq)
        || s.no_message.windows(2).any(|w| w[0] >= w[1])
        || s.seed_end.as_ref().is_some_and(bad_seq)
        || s.deleted.as_ref().is_some_and(bad_seq)
        || s.open_turn.as_ref().is_some_and(|t| bad_seq(&t.1))
        || s.open_step.as_ref().is_some_and(|t| bad_seq(&t.2))
        || s.open_calls.iter().any(|c| bad_seq(&c.1))
        || s.open_requested.iter().any(|c| bad_seq(&c.1))
        || s.open_origin.iter().any(|c| bad_seq(&c.1))
        || s.answered.iter().any(|c| bad_seq(&c.1))
        || s.turns
            .iter()
            .any(|t| bad_seq(&t.1) || t.2.as_ref().is_some_and(bad_seq))
    {
        return Err("session state names an event past the snapshot point".into());
    }
    let from_json = |what: &str, t: &str| format!("session state's {what} does not decode: {t}");
    let header = match &s.header_json {
        Some(j) => Some(serde_json::from_str(j).map_err(|e| from_json("header", &e.to_string()))?),
        None => None,
    };
    let context = match &s.context_json {
        Some(j) => Some(serde_json::from_str(j).map_err(|e| from_json("context", &e.to_string()))?),
        None => None,
    };
    let metadata = serde_json::from_str(&s.metadata_json)
        .map_err(|e| from_json("metadata", &e.to_string()))?;
    let mut turns = Vec::with_capacity(s.turns.len());
    for (turn_id, start_seq, end_seq, code, msg) in s.turns {
        turns.push(TurnInfo {
            turn_id,
            start_seq,
            end_seq,
            reason: reason_from(code, msg)?,
        });
    }
    let open = OpenState {
        turn: s.open_turn,
        step: s.open_step,
        calls: s.open_calls.into_iter().collect::<BTreeMap<_, _>>(),
        requested: s
            .open_requested
            .into_iter()
            .map(|(k, q, n)| (k, (q, n)))
            .collect(),
        origin: s
            .open_origin
            .into_iter()
            .map(|(k, q, i)| (k, (q, i)))
            .collect(),
        unrequested: s.open_unrequested.into_iter().collect(),
    };
    Ok(Restored {
        len: s.len,
        surface: Surface {
            nodes: s.surface_nodes,
            replace_generation: s.replace_generation,
        },
        no_message: s.no_message,
        header,
        context,
        seed_end: s.seed_end,
        open,
        turns,
        metadata,
        deleted: s.deleted,
        kinds: KindsSeen {
            core: s.core_kinds,
            plugins: s.plugin_kinds.into_iter().collect(),
        },
        answered: s.answered.into_iter().collect(),
    })
}

/// What loading a session's state snapshot found.
pub(crate) enum Loaded {
    /// A snapshot that matches: its state covers events `0..len`.
    Use(Box<Restored>),
    /// No snapshot file.
    None,
    /// A snapshot that does not match, and why.
    Discarded(String),
}

/// Load the state snapshot of `session` and check it (§12's rules, then the
/// state's own).
pub(crate) fn load(log: LogRef<'_>, session: &str, registry: &Registry) -> Result<Loaded> {
    let slot = Slot::of(log, |dir| state_snapshot_path(dir, session));
    let (h, state) = match read_checked(
        log,
        session,
        &slot,
        STATE_SNAPSHOT_NAME,
        STATE_SNAPSHOT_VERSION,
    )? {
        Ok(x) => x,
        Err(None) => return Ok(Loaded::None),
        Err(Some(why)) => return Ok(Loaded::Discarded(why)),
    };
    Ok(match decode_state(&state, h.covered, registry) {
        Ok(r) => Loaded::Use(Box::new(r)),
        Err(why) => Loaded::Discarded(why),
    })
}

/// Write the state snapshot of `session` (its fold over `0..parts.len`,
/// all durable): a file written atomically, or the log's snapshot row.
/// Returns whether the log keeps it.
pub(crate) fn save(log: LogRef<'_>, session: &str, parts: &Parts<'_>) -> Result<bool> {
    let bytes = encode_state(parts)?;
    let slot = Slot::of(log, |dir| state_snapshot_path(dir, session));
    write_file(
        log,
        session,
        &slot,
        STATE_SNAPSHOT_NAME,
        STATE_SNAPSHOT_VERSION,
        parts.len,
        &bytes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved() -> SavedState {
        SavedState {
            len: 10,
            surface_nodes: vec![1, 4, 9],
            replace_generation: 0,
            no_message: vec![4],
            header_json: None,
            context_json: None,
            seed_end: None,
            open_turn: Some(("t".into(), 2)),
            open_step: None,
            open_calls: vec![("c".into(), 8)],
            open_requested: vec![],
            open_origin: vec![("c".into(), 8, 0)],
            open_unrequested: vec!["c".into()],
            turns: vec![("t".into(), 2, None, 0, None)],
            metadata_json: "{\"title\":null,\"tags\":[],\"fields\":{}}".into(),
            deleted: None,
            core_kinds: 1 << 5,
            plugin_kinds: vec![],
            answered: vec![("b".into(), 7)],
        }
    }

    fn enc(s: &SavedState) -> Vec<u8> {
        bincode::serde::encode_to_vec(s, bincode::config::standard()).unwrap()
    }

    #[test]
    fn a_state_decodes_only_if_it_fits_its_snapshot_point_and_this_process() {
        let reg = Registry::new();
        let r = decode_state(&enc(&saved()), 10, &reg).unwrap();
        assert_eq!(r.surface.nodes, vec![1, 4, 9]);
        assert_eq!(r.open.calls.get("c"), Some(&8));
        assert_eq!(r.answered.get("b"), Some(&7));
        // Covered must equal the state's length.
        assert!(decode_state(&enc(&saved()), 11, &reg).is_err());
        // A seq at or past the snapshot point, anywhere in the state.
        let mut s = saved();
        s.surface_nodes.push(10);
        assert!(decode_state(&enc(&s), 10, &reg)
            .err()
            .unwrap()
            .contains("past the snapshot point"));
        let mut s = saved();
        s.turns[0].2 = Some(12);
        assert!(decode_state(&enc(&s), 10, &reg).is_err());
        let mut s = saved();
        s.open_calls[0].1 = 10;
        assert!(decode_state(&enc(&s), 10, &reg).is_err());
        let mut s = saved();
        s.answered[0].1 = 10;
        assert!(decode_state(&enc(&s), 10, &reg).is_err());
        // Kinds this process would refuse.
        let mut s = saved();
        s.plugin_kinds = vec!["x/y".into()];
        assert!(decode_state(&enc(&s), 10, &reg)
            .err()
            .unwrap()
            .contains("x/y"));
        let mut s = saved();
        s.core_kinds |= 1 << 63;
        assert!(decode_state(&enc(&s), 10, &reg)
            .err()
            .unwrap()
            .contains("63"));
        // An undefined turn end reason; trailing bytes.
        let mut s = saved();
        s.turns[0].3 = 9;
        assert!(decode_state(&enc(&s), 10, &reg).is_err());
        let mut b = enc(&saved());
        b.push(0);
        assert!(decode_state(&b, 10, &reg).is_err());
    }
}
