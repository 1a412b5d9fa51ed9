//! The store the collection tests share (tests/gc.rs, tests/gc_online.rs).

use turnstone::Store;

use super::payload_for;

/// (kind, flags, payload) of every event of a session.
pub type Events = Vec<(u16, u16, Vec<u8>)>;

/// (kind, flags, payload) of every event of `session`.
pub fn events(store: &Store, session: &str) -> Events {
    let len = store.session_len(session).expect("session exists");
    store
        .read_range(session, 0..len)
        .expect("read")
        .into_iter()
        .map(|e| (e.kind, e.flags, e.payload))
        .collect()
}

/// Append event `seq` of `session` (`len` bytes) and wait until durable.
pub fn append_synced(store: &Store, session: &str, seq: u64, len: usize) {
    let a = store
        .append(session, 5, 0, &payload_for(session, seq, len))
        .expect("append");
    store.wait_durable(a.end).expect("durable");
}

/// Live `a` (60 events), `b` (30, deleted) with fork `c` at 10 (5 own),
/// `d` (12, deleted, no fork); interleaved so every segment mixes them.
/// Every append is its own batch, so the layout is the same every run.
pub fn fleet(store: &Store) {
    for i in 0..40u64 {
        append_synced(store, "a", i, 300);
        if i < 30 {
            append_synced(store, "b", i, 900);
        }
        if i < 12 {
            append_synced(store, "d", i, 1500);
        }
        if i == 10 {
            store.fork("b", 10, "c").expect("fork");
        }
        if (10..15).contains(&i) {
            let seq = store.session_len("c").unwrap();
            append_synced(store, "c", seq, 200);
        }
    }
    turnstone::session::delete(store, "b").expect("delete b");
    turnstone::session::delete(store, "d").expect("delete d");
    // A few more so the deletes are in sealed segments too.
    for i in 40..60u64 {
        append_synced(store, "a", i, 300);
    }
}

/// Runs of consecutive frames of one session over the sealed segments, in
/// position order: 1 per session means each session's frames sit together.
/// A fork's inherited frames count for its parent; the active (last)
/// segment stays interleaved and is not counted.
pub fn runs_per_session(store: &Store) -> std::collections::BTreeMap<String, usize> {
    let mut all: Vec<(u64, String)> = Vec::new();
    for s in store.sessions() {
        let own_from = store
            .session_meta(&s.name)
            .and_then(|m| m.parent.map(|(_, n)| n))
            .unwrap_or(0);
        let len = store.session_len(&s.name).unwrap();
        for e in store.read_range(&s.name, own_from..len).unwrap() {
            all.push((e.pos.0, s.name.clone()));
        }
    }
    all.sort();
    let last_segment = all.iter().map(|(p, _)| p >> 32).max().unwrap_or(0);
    all.retain(|(p, _)| p >> 32 != last_segment);
    let mut runs = std::collections::BTreeMap::new();
    let mut prev: Option<&str> = None;
    for (_, name) in &all {
        if prev != Some(name.as_str()) {
            *runs.entry(name.clone()).or_insert(0) += 1;
        }
        prev = Some(name.as_str());
    }
    runs
}
