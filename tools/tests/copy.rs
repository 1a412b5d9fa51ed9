//! `turnstone copy` between store directories: deleted sessions that live
//! forks read through are copied as far as those forks read, and every
//! event copied is the source's event at that seq.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use turnstone::session::{ContentBlock, CoreKind, Registry, Session, SurfaceOp, UserMessage};
use turnstone::Store;

fn user(store: &Arc<Store>, id: &str, create: bool, prefix: &str, n: usize) {
    let reg = Arc::new(Registry::new());
    let mut s = if create {
        Session::create(store.clone(), id, reg).unwrap()
    } else {
        Session::open(store.clone(), id, reg).unwrap()
    };
    for i in 0..n {
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(format!("{prefix} message {i}"))],
            },
            SurfaceOp::Append,
        )
        .unwrap();
    }
}

/// Every event of `id` but its deletion tombstone: (seq, kind, payload).
fn events(dir: &Path, id: &str) -> Vec<(u64, u16, Vec<u8>)> {
    let store = Store::open(dir).unwrap();
    let n = store.session_len(id).unwrap_or(0);
    let out = store
        .read_range(id, 0..n)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind != CoreKind::SessionDelete.code())
        .map(|e| (e.seq.0, e.kind, e.payload))
        .collect();
    store.close().unwrap();
    out
}

/// A deleted fork of a deleted session, read through by a live fork that
/// forked it below the point where the deleted fork left its parent: the
/// live fork reads only the first 5 events of the root, and the copy must
/// not fill the root's seqs 5..10 with anything else (the live fork's own
/// events sit at those seqs).
///
/// With 4 events of its own the live fork is shorter than the root's 10
/// events a wrong plan reads through it (the copy used to fail); with 8 it
/// is longer (the copy used to write the fork's events as the root's).
#[test]
fn a_chain_of_deleted_ancestors_is_copied_only_with_its_own_events() {
    for own in [4, 8] {
        chain_of_deleted_ancestors(own);
    }
}

fn chain_of_deleted_ancestors(own: usize) {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    {
        let store = Arc::new(Store::open(src.path()).unwrap());
        user(&store, "root", true, "root", 12);
        turnstone::session::fork(&store, "root", Some(10), Some("mid")).unwrap();
        user(&store, "mid", false, "mid", 3);
        turnstone::session::fork(&store, "mid", Some(5), Some("leaf")).unwrap();
        user(&store, "leaf", false, "leaf", own);
        turnstone::session::delete(&store, "mid").unwrap();
        turnstone::session::delete(&store, "root").unwrap();
        Arc::try_unwrap(store).ok().unwrap().close().unwrap();
    }
    let out = turnstone(&["copy", p(src.path()), p(&dst.path().join("copy")), "--json"]);
    assert_eq!(code(&out), 0, "own {own}: {}", stderr(&out));
    let dst = dst.path().join("copy");
    // The live fork is whole and the same.
    assert_eq!(events(&dst, "leaf"), events(src.path(), "leaf"));
    assert_eq!(events(&dst, "leaf").len(), 5 + own);
    // Whatever of the deleted ones was copied is theirs, seq for seq.
    for id in ["root", "mid"] {
        let theirs = events(src.path(), id);
        for (seq, kind, payload) in events(&dst, id) {
            let want = theirs.iter().find(|e| e.0 == seq);
            assert_eq!(
                want.map(|e| (e.1, &e.2)),
                Some((kind, &payload)),
                "own {own}: {id} seq {seq}: {}",
                String::from_utf8_lossy(&payload)
            );
        }
    }
    // The live fork reads 5 events of the root: no more are needed.
    assert!(events(&dst, "root").len() >= 5);
    let msgs = messages(&dst, "leaf");
    assert_eq!(msgs.len(), 5 + own, "{msgs:?}");
}
