//! Listing sessions through the [`Catalog`]: filters (tag, field, updated
//! since, open turn, parent), stable pagination while sessions are added,
//! deletes seen at once, and an incremental refresh.

use std::collections::BTreeSet;
use std::sync::Arc;

use turnstone::session::*;
use turnstone::Store;

fn reg() -> Arc<Registry> {
    Arc::new(Registry::new())
}

fn user(t: &str) -> UserMessage {
    UserMessage {
        content: vec![ContentBlock::text(t)],
    }
}

fn ids(p: &ListPage) -> Vec<String> {
    p.sessions.iter().map(|s| s.id.clone()).collect()
}

fn all_pages(c: &Catalog, mut q: ListQuery) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let p = c.list(&q);
        out.extend(ids(&p));
        match p.next {
            Some(n) => q.after = Some(n),
            None => return out,
        }
    }
}

#[test]
fn filters_by_tag_field_time_open_turn_and_parent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    for i in 0..10 {
        let mut s = Session::create(store.clone(), &format!("s{i}"), reg()).unwrap();
        s.set_title(&format!("session {i}")).unwrap();
        if i % 2 == 0 {
            s.add_tag("even").unwrap();
        }
        s.set_meta("user", if i < 5 { "alice" } else { "bob" })
            .unwrap();
        s.append(
            TurnStart {
                turn_id: "t".into(),
            },
            (),
        )
        .unwrap();
        s.append(user("hi"), SurfaceOp::Append).unwrap();
        if i % 3 != 0 {
            s.append(
                TurnEnd {
                    turn_id: "t".into(),
                    reason: TurnEndReason::Completed,
                },
                (),
            )
            .unwrap();
        }
        s.flush().unwrap();
    }
    fork(&store, "s1", None, Some("child-of-1")).unwrap();
    store.sync().unwrap();
    let c = Catalog::build(&store).unwrap();
    assert_eq!(c.len(), 11);
    let q = |f: fn(&mut ListQuery)| {
        let mut q = ListQuery {
            limit: 100,
            ..Default::default()
        };
        f(&mut q);
        ids(&c.list(&q))
    };
    assert_eq!(
        q(|q| q.tags = vec!["even".into()]),
        ["s0", "s2", "s4", "s6", "s8"]
    );
    assert_eq!(
        q(|q| q.fields = vec![("user".into(), "bob".into())]),
        ["s5", "s6", "s7", "s8", "s9"]
    );
    assert_eq!(
        q(|q| {
            q.tags = vec!["even".into()];
            q.fields = vec![("user".into(), "bob".into())];
        }),
        ["s6", "s8"]
    );
    assert_eq!(q(|q| q.open_turn = Some(true)), ["s0", "s3", "s6", "s9"]);
    assert_eq!(q(|q| q.parent = Some("s1".into())), ["child-of-1"]);
    assert!(q(|q| q.tags = vec!["nope".into()]).is_empty());
    // The fork child inherits the parent's metadata as of the fork point.
    let child = c.get(&store, "child-of-1").unwrap();
    assert_eq!(child.metadata.title.as_deref(), Some("session 1"));
    // s1: title, field, turn/start, user/message, turn/end.
    assert_eq!(child.parent, Some(("s1".to_string(), 5)));
    assert_eq!(child.events, 5);
    // Updated since: everything was written just now; nothing in the future.
    let now = turnstone::session::now_ms();
    assert_eq!(q(|q| q.updated_since_ms = Some(0)).len(), 11);
    let later = move |q: &mut ListQuery| q.updated_since_ms = Some(now + 60_000);
    let mut lq = ListQuery::default();
    later(&mut lq);
    assert!(c.list(&lq).sessions.is_empty());
    // Newest first, paged.
    let newest = all_pages(
        &c,
        ListQuery {
            newest_first: true,
            limit: 3,
            ..Default::default()
        },
    );
    assert_eq!(newest.first().map(String::as_str), Some("child-of-1"));
    assert_eq!(newest.len(), 11);
    let entry = c.get(&store, "s4").unwrap();
    assert_eq!(entry.metadata.fields["user"], "alice");
    assert!(entry.created_ms.is_some() && entry.updated_ms >= entry.created_ms);
}

#[test]
fn deletes_and_metadata_updates_show_after_a_refresh_and_refresh_is_incremental() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    for i in 0..20 {
        let mut s = Session::create(store.clone(), &format!("s{i}"), reg()).unwrap();
        for j in 0..10 {
            s.append(user(&format!("m{j}")), SurfaceOp::Append).unwrap();
        }
        s.add_tag("t").unwrap();
        s.flush().unwrap();
    }
    let mut c = Catalog::build(&store).unwrap();
    assert_eq!(c.len(), 20);
    assert_eq!(c.refresh(&store).unwrap(), 0, "nothing new, nothing read");
    delete(&store, "s3").unwrap();
    let mut s = Session::open(store.clone(), "s4", reg()).unwrap();
    s.remove_tag("t").unwrap();
    s.add_tag("u").unwrap();
    s.flush().unwrap();
    // Only the two new events of s4 and the tombstone of s3 are read.
    assert_eq!(c.refresh(&store).unwrap(), 3);
    assert!(c.get(&store, "s3").is_none());
    let tagged = |c: &Catalog, t: &str| {
        ids(&c.list(&ListQuery {
            tags: vec![t.into()],
            limit: 100,
            ..Default::default()
        }))
    };
    assert_eq!(tagged(&c, "t").len(), 18);
    assert_eq!(tagged(&c, "u"), ["s4"]);
    // Not yet durable: not listed (views read durable events only).
    let _ = s.set_meta("k", "v");
    let before = c.list(&ListQuery {
        fields: vec![("k".into(), "v".into())],
        ..Default::default()
    });
    c.refresh(&store).unwrap();
    s.flush().unwrap();
    c.refresh(&store).unwrap();
    let after = c.list(&ListQuery {
        fields: vec![("k".into(), "v".into())],
        ..Default::default()
    });
    assert!(before.sessions.is_empty());
    assert_eq!(ids(&after), ["s4"]);
    // A catalog rebuilt after a reopen equals the live one.
    drop(s);
    let everything = ListQuery {
        limit: 1000,
        ..Default::default()
    };
    let live = c.list(&everything);
    drop(store);
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let rebuilt = Catalog::build(&store).unwrap().list(&everything);
    assert_eq!(rebuilt, live);
}

#[test]
fn pagination_is_stable_while_sessions_are_added() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut before = Vec::new();
    for i in 0..200 {
        let id = format!("old{i:03}");
        let mut s = Session::create(store.clone(), &id, reg()).unwrap();
        if i % 2 == 0 {
            s.add_tag("pick").unwrap();
        }
        s.flush().unwrap();
        before.push((id, i % 2 == 0));
    }
    // The guarantee is for sessions durable when the listing starts (a
    // listing shows durable sessions only).
    store.sync().unwrap();
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..300 {
                let mut s = Session::create(store.clone(), &format!("new{i:03}"), reg()).unwrap();
                s.add_tag("pick").unwrap();
                s.flush().unwrap();
            }
        })
    };
    let mut c = Catalog::build(&store).unwrap();
    for (tags, newest_first) in [
        (vec![], false),
        (vec!["pick".to_string()], false),
        (vec![], true),
        (vec!["pick".to_string()], true),
    ] {
        let mut q = ListQuery {
            tags: tags.clone(),
            newest_first,
            limit: 7,
            ..Default::default()
        };
        let mut seen = Vec::new();
        loop {
            // New sessions arrive between pages.
            c.refresh(&store).unwrap();
            let p = c.list(&q);
            seen.extend(ids(&p));
            match p.next {
                Some(n) => q.after = Some(n),
                None => break,
            }
        }
        let unique: BTreeSet<&String> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len(), "no session listed twice");
        let old: Vec<&String> = seen.iter().filter(|s| s.starts_with("old")).collect();
        let mut expected: Vec<&String> = before
            .iter()
            .filter(|(_, pick)| tags.is_empty() || *pick)
            .map(|(id, _)| id)
            .collect();
        if newest_first {
            expected.reverse();
        }
        assert_eq!(old, expected, "every old session once, in order");
        // Creation order: listed sessions are in rank order.
        let ranks: Vec<u32> = seen
            .iter()
            .map(|id| store.session_meta(id).unwrap().id.0)
            .collect();
        let mut sorted = ranks.clone();
        sorted.sort_unstable();
        if newest_first {
            sorted.reverse();
        }
        assert_eq!(ranks, sorted);
    }
    writer.join().unwrap();
    assert!("c12".parse::<Cursor>().is_ok());
    assert!("12".parse::<Cursor>().is_err());
}

/// A catalog made from entries folded elsewhere (how `turnstone sessions`
/// lists a PostgreSQL database) lists what the store's own catalog lists,
/// page by page and under each filter.
#[test]
fn entries_folded_from_events_list_like_the_store_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    for i in 0..6 {
        let mut s = Session::create(store.clone(), &format!("s{i}"), reg()).unwrap();
        s.set_title(&format!("session {i}")).unwrap();
        if i % 2 == 0 {
            s.add_tag("even").unwrap();
        }
        s.set_meta("user", if i < 3 { "alice" } else { "bob" })
            .unwrap();
        s.append(
            TurnStart {
                turn_id: "t".into(),
            },
            (),
        )
        .unwrap();
        s.append(user("hi"), SurfaceOp::Append).unwrap();
        if i % 3 != 0 {
            s.append(
                TurnEnd {
                    turn_id: "t".into(),
                    reason: TurnEndReason::Completed,
                },
                (),
            )
            .unwrap();
        }
        s.flush().unwrap();
    }
    fork(&store, "s1", None, Some("child-of-1")).unwrap();
    delete(&store, "s4").unwrap();
    store.sync().unwrap();
    let native = Catalog::build(&store).unwrap();
    let entries: Vec<CatalogEntry> = store
        .sessions()
        .into_iter()
        .filter_map(|s| {
            let mut f = EntryFold::new(&s.name, s.parent.clone(), s.len);
            for e in store.read_range(&s.name, 0..s.len).unwrap() {
                f.event(e.seq.0, e.kind, &e.payload);
            }
            f.finish()
        })
        .collect();
    assert_eq!(entries.len(), 6, "s4 is deleted");
    let made = Catalog::from_entries(entries);
    assert_eq!(made.len(), native.len());
    let queries: Vec<ListQuery> = vec![
        ListQuery::default(),
        ListQuery {
            limit: 2,
            ..Default::default()
        },
        ListQuery {
            tags: vec!["even".into()],
            ..Default::default()
        },
        ListQuery {
            fields: vec![("user".into(), "bob".into())],
            newest_first: true,
            ..Default::default()
        },
        ListQuery {
            open_turn: Some(true),
            ..Default::default()
        },
        ListQuery {
            parent: Some("s1".into()),
            ..Default::default()
        },
    ];
    for q in queries {
        let (a, b) = (native.list(&q), made.list(&q));
        assert_eq!(a.sessions, b.sessions, "{q:?}");
        assert_eq!(all_pages(&native, q.clone()), all_pages(&made, q.clone()));
    }
    // Something was actually folded: titles, times, the open turn.
    let all = made.list(&ListQuery::default()).sessions;
    assert_eq!(all[0].metadata.title.as_deref(), Some("session 0"));
    assert!(all[0].open_turn && !all[1].open_turn);
    // (the fork has no own event: no creation time, as in the store's catalog)
    assert!(all
        .iter()
        .filter(|e| e.parent.is_none())
        .all(|e| e.created_ms.is_some() && e.updated_ms.is_some()));
}

/// A log that is not recognised as the embedded store: the session layer
/// goes through the trait alone (as on PostgreSQL).
struct Opaque(Arc<Store>);

impl turnstone::backend::EventLog for Opaque {
    fn backend(&self) -> &'static str {
        "opaque"
    }
    fn create_session(&self, s: &str) -> turnstone::Result<()> {
        turnstone::backend::EventLog::create_session(&*self.0, s)
    }
    fn fork(&self, p: &str, upto: u64, c: &str) -> turnstone::Result<()> {
        turnstone::backend::EventLog::fork(&*self.0, p, upto, c)
    }
    fn append_group(&self, s: &str, e: &[(u16, u16, &[u8])]) -> turnstone::Result<u64> {
        turnstone::backend::EventLog::append_group(&*self.0, s, e)
    }
    fn sync_session(&self, s: &str) -> turnstone::Result<()> {
        self.0.sync_session(s)
    }
    fn durable_len(&self, s: &str) -> turnstone::Result<Option<u64>> {
        turnstone::backend::EventLog::durable_len(&*self.0, s)
    }
    fn parent(&self, s: &str) -> turnstone::Result<Option<(String, u64)>> {
        turnstone::backend::EventLog::parent(&*self.0, s)
    }
    fn sessions(&self) -> turnstone::Result<Vec<String>> {
        turnstone::backend::EventLog::sessions(&*self.0)
    }
    fn read_range(
        &self,
        s: &str,
        r: std::ops::Range<u64>,
    ) -> turnstone::Result<Vec<turnstone::backend::LogEvent>> {
        turnstone::backend::EventLog::read_range(&*self.0, s, r)
    }
    fn claim(&self, s: &str) -> turnstone::Result<turnstone::backend::Claim> {
        turnstone::backend::EventLog::claim(&*self.0, s)
    }
    fn release(&self, s: &str, c: u64) {
        turnstone::backend::EventLog::release(&*self.0, s, c)
    }
}

#[test]
fn a_catalog_on_another_log_agrees_with_the_stores() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let other: Arc<dyn turnstone::backend::EventLog> = Arc::new(Opaque(store.clone()));
    let write = |name: &str, tag: &str, close: bool| {
        let mut s = Session::create(store.clone(), name, reg()).unwrap();
        s.add_tag(tag).unwrap();
        s.append(
            TurnStart {
                turn_id: "t".into(),
            },
            (),
        )
        .unwrap();
        s.append(user("hi"), SurfaceOp::Append).unwrap();
        if close {
            s.append(
                TurnEnd {
                    turn_id: "t".into(),
                    reason: TurnEndReason::Completed,
                },
                (),
            )
            .unwrap();
        }
        s.flush().unwrap();
    };
    for i in 0..6 {
        write(
            &format!("s{i}"),
            if i % 2 == 0 { "even" } else { "odd" },
            i % 3 != 0,
        );
    }
    fork(&store, "s1", None, Some("child-of-1")).unwrap();
    store.sync().unwrap();
    let everything = ListQuery {
        limit: 1000,
        ..Default::default()
    };
    let mut native = Catalog::build(&store).unwrap();
    let mut through = Catalog::build(&other).unwrap();
    assert_eq!(through.list(&everything), native.list(&everything));
    assert_eq!(through.len(), 7);
    // A listing paged through the other log's catalog while sessions come
    // and go neither repeats nor skips one.
    let first = through.list(&ListQuery {
        limit: 3,
        ..Default::default()
    });
    assert_eq!(ids(&first), ["s0", "s1", "s2"]);
    write("s6", "even", true);
    delete(&store, "s4").unwrap();
    {
        let mut s = Session::open(store.clone(), "s0", reg()).unwrap();
        s.set_title("later").unwrap();
        s.flush().unwrap();
    }
    assert!(through.refresh(&other).unwrap() > 0);
    native.refresh(&store).unwrap();
    assert_eq!(through.list(&everything), native.list(&everything));
    let rest = all_pages(
        &through,
        ListQuery {
            after: first.next,
            limit: 2,
            ..Default::default()
        },
    );
    assert_eq!(rest, ["s3", "s5", "child-of-1", "s6"]);
    let even = ListQuery {
        tags: vec!["even".into()],
        ..everything.clone()
    };
    assert_eq!(ids(&through.list(&even)), ["s0", "s2", "s6"]);
    assert_eq!(
        through.get(&other, "s0").unwrap().metadata.title.as_deref(),
        Some("later")
    );
    assert_eq!(through.get(&other, "s0"), native.get(&store, "s0"));
    assert!(through.get(&other, "s4").is_none());
    // Nothing new: nothing read.
    assert_eq!(through.refresh(&other).unwrap(), 0);
    // Search is the log's own: this one has none, a typed refusal.
    let err = search(&other, &Registry::new(), "hi", 10).unwrap_err();
    assert!(matches!(err, turnstone::Error::Refused(_)), "{err}");
    // The store's: one hit per session that wrote "hi", s4 deleted, the
    // fork's inherited event found under s1.
    let mut found: Vec<String> = search(&store, &Registry::new(), "hi", 10)
        .unwrap()
        .into_iter()
        .map(|h| h.session)
        .collect();
    found.sort();
    assert_eq!(found, ["s0", "s1", "s2", "s3", "s5", "s6"]);
}
