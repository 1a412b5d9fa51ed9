//! Search and the catalog on both backends: the same hits for plain words
//! and phrases, the same listings with filters and pages.

use super::*;
use turnstone::backend::Hit;

/// One turn whose user message and tool result carry the given texts.
pub(super) fn talk(s: &mut Session, t: u64, user: &str, tool: &str) {
    let tid = format!("t{t}");
    let call = format!("call-{t}");
    s.append(
        TurnStart {
            turn_id: tid.clone(),
        },
        (),
    )
    .unwrap();
    s.append(
        UserMessage {
            content: vec![ContentBlock::text(user)],
        },
        SurfaceOp::Append,
    )
    .unwrap();
    tool_round(s, &call, json!({"cmd": "ls"}), tool, false);
    s.append(
        TurnEnd {
            turn_id: tid,
            reason: TurnEndReason::Completed,
        },
        (),
    )
    .unwrap();
}

/// What the session layer's search and catalog give on one backend.
#[derive(Debug, PartialEq)]
pub struct Found {
    /// Per query: the sorted `(session, seq)` hits across sessions.
    across: Vec<(String, Vec<(String, u64)>)>,
    /// Per `(session, query)`: the sorted seqs of one session's search.
    within: Vec<(String, String, Vec<u64>)>,
    /// The catalog's listing, append times taken out (checked present).
    listed: Vec<CatalogEntry>,
}

pub(super) const QUERIES: [&str; 5] = ["zebra", "walrus", "okapi", "giraffe", "quetzalcoatlus"];

pub(super) fn found(kit: &Kit, catalog: &Catalog, within: &[&str]) -> Found {
    let reg = registry();
    let log = kit.log.as_ref();
    let hits = |h: Vec<Hit>| {
        let mut v: Vec<(String, u64)> = h.into_iter().map(|h| (h.session, h.seq)).collect();
        v.sort();
        v
    };
    let across = QUERIES
        .iter()
        .map(|q| (q.to_string(), hits(search(log, &reg, q, 100).unwrap())))
        .collect();
    let within = within
        .iter()
        .flat_map(|s| QUERIES.iter().map(move |q| (*s, *q)))
        .map(|(s, q)| {
            let h = search_session(log, &reg, s, q, 100).unwrap();
            assert!(h.iter().all(|h| h.session == s), "{}: {h:?}", kit.name);
            assert!(
                h.iter().all(|h| h.snippet.contains('[')),
                "{}: the match in brackets: {h:?}",
                kit.name
            );
            let seqs = hits(h).into_iter().map(|(_, n)| n).collect();
            (s.to_string(), q.to_string(), seqs)
        })
        .collect();
    let listed = catalog
        .list(&ListQuery {
            limit: 1000,
            ..ListQuery::default()
        })
        .sessions
        .into_iter()
        .map(|mut e| {
            assert!(e.updated_ms.is_some(), "{}: {e:?}", kit.name);
            assert_eq!(
                catalog.get(log, &e.id),
                Some(&e),
                "{}: get agrees with list",
                kit.name
            );
            e.created_ms = None;
            e.updated_ms = None;
            e
        })
        .collect();
    Found {
        across,
        within,
        listed,
    }
}

pub(super) fn hit_sessions(f: &Found, query: &str) -> Vec<String> {
    let mut s: Vec<String> = f
        .across
        .iter()
        .find(|(q, _)| q == query)
        .unwrap()
        .1
        .iter()
        .map(|(s, _)| s.clone())
        .collect();
    s.dedup();
    s
}

/// Search and the catalog through the session layer (`session::search`,
/// `session::search_session`, `Catalog::build` / `refresh` / `get` on any
/// log): before and after more appends and deletions.
pub fn search_and_catalog(kit: &Kit) -> (Found, Found) {
    let reg = registry();
    let mut a = Session::create(kit.log.clone(), "s-alpha", reg.clone()).unwrap();
    a.set_title("Alpha").unwrap();
    a.add_tag("red").unwrap();
    talk(&mut a, 0, "the zebra escaped", "a walrus in the output");
    a.flush().unwrap();
    let mut b = Session::create(kit.log.clone(), "s-beta", reg.clone()).unwrap();
    talk(&mut b, 1, "a zebra again", "nothing here");
    b.flush().unwrap();
    let forked = b.fork_after_turn("t1", Some("s-fork")).unwrap();
    let mut f = Session::open(kit.log.clone(), "s-fork", reg.clone()).unwrap();
    f.set_meta("cwd", "/fork").unwrap();
    talk(&mut f, 2, "a giraffe question", "zebra in a tool");
    f.flush().unwrap();
    let mut g = Session::create(kit.log.clone(), "s-gone", reg.clone()).unwrap();
    talk(&mut g, 3, "zebra doomed", "okapi result");
    g.flush().unwrap();

    let mut catalog = Catalog::build(kit.log.as_ref()).unwrap();
    let before = found(kit, &catalog, &["s-fork", "s-gone"]);
    assert_eq!(
        hit_sessions(&before, "zebra"),
        ["s-alpha", "s-beta", "s-fork", "s-gone"],
        "{}",
        kit.name
    );
    // Across sessions an inherited event is found once, under the session
    // that wrote it.
    let zebra = &before.across[0].1;
    assert!(
        zebra
            .iter()
            .all(|(s, n)| s != "s-fork" || *n >= forked.upto),
        "{}: {zebra:?}",
        kit.name
    );
    assert_eq!(hit_sessions(&before, "walrus"), ["s-alpha"], "{}", kit.name);
    assert_eq!(hit_sessions(&before, "okapi"), ["s-gone"], "{}", kit.name);
    assert!(hit_sessions(&before, "quetzalcoatlus").is_empty());
    // One session's search includes what it inherits.
    let fork_zebra = &before.within[0].2;
    assert!(
        fork_zebra.iter().any(|n| *n < forked.upto) && fork_zebra.iter().any(|n| *n >= forked.upto),
        "{}: {fork_zebra:?}",
        kit.name
    );
    assert_eq!(
        before
            .listed
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        ["s-alpha", "s-beta", "s-fork", "s-gone"],
        "{}",
        kit.name
    );
    assert_eq!(before.listed[0].metadata.title.as_deref(), Some("Alpha"));
    assert_eq!(
        before.listed[2].parent,
        Some(("s-beta".into(), forked.upto))
    );

    // More appends, and two deletions (one of them the fork's parent).
    talk(&mut a, 4, "zebra returns", "a second walrus");
    a.add_tag("blue").unwrap();
    a.flush().unwrap();
    let a_len = a.len();
    drop(a);
    g.delete().unwrap();
    b.delete().unwrap();
    let stale = catalog.list(&ListQuery::default());
    assert_eq!(
        stale.sessions.len(),
        4,
        "{}: as of the last refresh",
        kit.name
    );
    let read = catalog.refresh(kit.log.as_ref()).unwrap();
    assert!(read > 0, "{}: the refresh folds the new events", kit.name);
    let after = found(kit, &catalog, &["s-fork"]);
    assert_eq!(
        after
            .listed
            .iter()
            .map(|e| (e.id.as_str(), e.events))
            .collect::<Vec<_>>(),
        [("s-alpha", a_len), ("s-fork", f.len())],
        "{}",
        kit.name
    );
    assert!(after.listed[0].metadata.tags.contains("blue"));
    // A rebuilt catalog agrees with the refreshed one.
    let rebuilt = found(kit, &Catalog::build(kit.log.as_ref()).unwrap(), &[]);
    assert_eq!(rebuilt.listed, after.listed, "{}", kit.name);
    // Deleted sessions are not found; the fork still finds what it
    // inherits from its deleted parent in its own search.
    assert_eq!(
        hit_sessions(&after, "zebra"),
        ["s-alpha", "s-fork"],
        "{}",
        kit.name
    );
    assert!(hit_sessions(&after, "okapi").is_empty(), "{}", kit.name);
    assert_eq!(&after.within[0].2, fork_zebra, "{}", kit.name);
    for gone in ["s-gone", "s-beta"] {
        assert!(catalog.get(kit.log.as_ref(), gone).is_none());
        let err = search_session(kit.log.as_ref(), &reg, gone, "zebra", 10).unwrap_err();
        assert!(err.is_not_found(), "{}: {err}", kit.name);
    }
    (before, after)
}

/// The session layer's search and catalog give the same hits and entries
/// on both backends.
pub fn search_and_catalog_on_both_backends(cx: &Ctx) {
    let (e, p) = (Kit::embedded(), Kit::postgres(cx));
    assert_eq!(search_and_catalog(&e), search_and_catalog(&p));
}
