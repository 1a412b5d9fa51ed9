//! Criterion benchmark of session listing (issue 14, section 3):
//! `cargo bench -p turnstone-benches --bench catalog`.
//!
//! A store of 100,000 sessions, each written as one atomic group: a
//! `session/meta` event (title, a `user` field of 10 users, the tag `rare`
//! on 1% of sessions, `team-N` on all), `turn/start`, a user message, and
//! `turn/end` for 3 sessions in 4 (the others keep a turn open). One session
//! in 100 is forked once (a child with its parent's metadata).
//!
//! Each measured call is what a caller of a listing pays: `Catalog::refresh`
//! (nothing new: one pass over the store index to find sessions with new
//! durable frames) and `Catalog::list` of one page of 50:
//! - `tag_rare`: sessions tagged `rare` (1%);
//! - `field_and_open_turn`: `user=u4` and an open turn (5%);
//! - `open_turn_page_2`: an open turn (no index answers it), second page
//!   through the cursor, newest first;
//! - `parent`: children of one session.
//!
//! The target is 5 ms per page. The catalog build time (fold of the whole
//! store) is printed once. Every case is checked against a plain filter of
//! the ground truth before it is timed.

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use turnstone::session::{
    fork, Catalog, ContentBlock, CoreKind, ListQuery, SurfaceOp, TurnEnd, TurnEndReason, TurnStart,
    UserMessage,
};
use turnstone::session::{internals::encode_core, MetaUpdate};
use turnstone::Store;
use turnstone_benches::sys::bench_tempdir as tempdir;

const SESSIONS: usize = 100_000;
const PAGE: usize = 50;

struct Truth {
    id: String,
    rare: bool,
    user: usize,
    open: bool,
}

fn build(store: &Store) -> Vec<Truth> {
    let mut truth = Vec::with_capacity(SESSIONS);
    for i in 0..SESSIONS {
        let id = format!("sess-{i:06}");
        let rare = i % 100 == 7;
        let user = i % 10;
        let open = i % 4 == 0;
        let mut add_tags = vec![format!("team-{}", i % 50)];
        if rare {
            add_tags.push("rare".into());
        }
        let meta = MetaUpdate {
            title: Some(format!("session {i}")),
            add_tags,
            remove_tags: vec![],
            fields: [
                ("user".to_string(), Some(format!("u{user}"))),
                ("cwd".to_string(), Some(format!("/src/p{}", i % 300))),
            ]
            .into(),
        };
        let mut group = vec![
            (CoreKind::SessionMeta.code(), 1u16, encode_core(&meta, None)),
            (
                CoreKind::TurnStart.code(),
                0,
                encode_core(
                    &TurnStart {
                        turn_id: "t1".into(),
                    },
                    None,
                ),
            ),
            (
                CoreKind::UserMessage.code(),
                0,
                encode_core(
                    &UserMessage {
                        content: vec![ContentBlock::text("list my sessions")],
                    },
                    Some(SurfaceOp::Append),
                ),
            ),
        ];
        if !open {
            group.push((
                CoreKind::TurnEnd.code(),
                0,
                encode_core(
                    &TurnEnd {
                        turn_id: "t1".into(),
                        reason: TurnEndReason::Completed,
                    },
                    None,
                ),
            ));
        }
        let refs: Vec<(u16, u16, &[u8])> = group
            .iter()
            .map(|(k, f, p)| (*k, *f, p.as_slice()))
            .collect();
        store.append_group(&id, &refs, |_| {}).expect("append");
        truth.push(Truth {
            id,
            rare,
            user,
            open,
        });
    }
    store.sync().expect("sync");
    for i in (1..SESSIONS).step_by(100) {
        let parent = truth[i].id.clone();
        let child = format!("{parent}.child");
        if !truth[i].open {
            fork(store, &parent, None, Some(&child)).expect("fork");
            truth.push(Truth {
                id: child,
                rare: truth[i].rare,
                user: truth[i].user,
                open: false,
            });
        }
    }
    store.sync().expect("sync");
    truth
}

fn listing(c: &mut Criterion) {
    let dir = tempdir("catalog");
    let store = Store::open(dir.path()).expect("open store");
    let t = Instant::now();
    let truth = build(&store);
    eprintln!(
        "catalog: wrote {} sessions in {:.1} s",
        truth.len(),
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let mut catalog = Catalog::build(&store).expect("catalog");
    eprintln!(
        "catalog: built over {} sessions in {:.0} ms",
        catalog.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(catalog.len(), truth.len());

    let parent = truth[501].id.clone();
    let cases: Vec<(&str, ListQuery, Vec<String>)> = {
        let first = |pred: &dyn Fn(&Truth) -> bool, skip: usize, rev: bool| -> Vec<String> {
            // Creation order is the order of `truth` except that fork
            // children were created after every parent.
            let it: Box<dyn Iterator<Item = &Truth>> = if rev {
                Box::new(truth.iter().rev())
            } else {
                Box::new(truth.iter())
            };
            it.filter(|t| pred(t))
                .skip(skip)
                .take(PAGE)
                .map(|t| t.id.clone())
                .collect()
        };
        let rare = ListQuery {
            tags: vec!["rare".into()],
            limit: PAGE,
            ..Default::default()
        };
        let user_open = ListQuery {
            fields: vec![("user".into(), "u4".into())],
            open_turn: Some(true),
            limit: PAGE,
            ..Default::default()
        };
        let open_first = ListQuery {
            open_turn: Some(true),
            newest_first: true,
            limit: PAGE,
            ..Default::default()
        };
        let next = catalog.list(&open_first).next.expect("a second page");
        let open_page2 = ListQuery {
            after: Some(next),
            ..open_first
        };
        let children = ListQuery {
            parent: Some(parent.clone()),
            limit: PAGE,
            ..Default::default()
        };
        vec![
            ("tag_rare", rare, first(&|t| t.rare, 0, false)),
            (
                "field_and_open_turn",
                user_open,
                first(&|t| t.user == 4 && t.open, 0, false),
            ),
            (
                "open_turn_page_2",
                open_page2,
                first(&|t| t.open, PAGE, true),
            ),
            ("parent", children, vec![format!("{parent}.child")]),
        ]
    };

    let mut grp = c.benchmark_group("list_50_of_100k");
    grp.sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (name, q, expected) in &cases {
        // Check before timing.
        catalog.refresh(&store).expect("refresh");
        let page = catalog.list(q);
        let got: Vec<String> = page.sessions.iter().map(|s| s.id.clone()).collect();
        assert_eq!(&got, expected, "{name}");
        assert!(!got.is_empty(), "{name}");
        grp.bench_function(*name, |b| {
            b.iter(|| {
                catalog.refresh(&store).expect("refresh");
                black_box(catalog.list(q))
            })
        });
    }
    grp.finish();
    drop(catalog);
    drop(store);
}

criterion_group!(benches, listing);
criterion_main!(benches);
