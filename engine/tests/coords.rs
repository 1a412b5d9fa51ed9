//! Coordinates: turns, conversions between message index, surface position
//! and seq, compaction and fork by message index or turn.

use std::sync::Arc;

use turnstone::session::*;
use turnstone::Store;

fn text(t: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(t)]
}

fn turn(s: &mut Session, id: &str, q: &str, a: &str, end: bool) {
    s.append(TurnStart { turn_id: id.into() }, ()).unwrap();
    s.append(UserMessage { content: text(q) }, SurfaceOp::Append)
        .unwrap();
    // An empty assistant message: a surface node without a message.
    s.append(
        AssistantMessage {
            content: vec![],
            usage: None,
            stop_reason: None,
            extra: Default::default(),
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.append(
        AssistantMessage {
            content: text(a),
            usage: None,
            stop_reason: None,
            extra: Default::default(),
        },
        SurfaceOp::Append,
    )
    .unwrap();
    if end {
        s.append(
            TurnEnd {
                turn_id: id.into(),
                reason: TurnEndReason::Completed,
            },
            (),
        )
        .unwrap();
    }
}

#[test]
fn turns_and_conversions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "s", Arc::new(Registry::new())).unwrap();
    turn(&mut s, "t1", "q1", "a1", true);
    turn(&mut s, "t2", "q2", "a2", true);
    turn(&mut s, "t3", "q3", "a3", false);
    let turns = s.turns().to_vec();
    assert_eq!(
        turns.iter().map(|t| t.turn_id.as_str()).collect::<Vec<_>>(),
        ["t1", "t2", "t3"]
    );
    assert_eq!((turns[0].start_seq, turns[0].end_seq), (0, Some(4)));
    assert_eq!(turns[1].reason, Some(TurnEndReason::Completed));
    assert_eq!(turns[2].end_seq, None);
    // Message 1 (a1) is surface position 2 (after q1 and the empty one), seq 3.
    assert_eq!(s.surface_position_of_message(1), Some(2));
    assert_eq!(s.seq_at_surface_position(2), Some(3));
    assert_eq!(s.message_index_of_seq(3), Some(1));
    assert_eq!(
        s.message_index_of_seq(2),
        None,
        "the empty message yields none"
    );
    assert_eq!(
        s.surface_position_of_seq(0),
        None,
        "turn/start is not on the surface"
    );
    // Fork by turn and by message index.
    s.flush().unwrap();
    let f = s.fork_after_turn("t1", Some("after-t1")).unwrap();
    assert_eq!(f.upto, 5);
    assert!(s.fork_after_turn("t3", None).is_err(), "turn still running");
    // Before q2 (seq 6) is before its turn t2 (seq 5).
    let g = s.fork_before_message(2, Some("before-q2")).unwrap();
    assert_eq!(g.upto, 5);
    // Before q3, in the running turn: before that turn.
    assert_eq!(s.fork_before_message(4, None).unwrap().upto, 10);
    // Compaction by turn, then by message index.
    s.compact_turn("k1", "t1", "turn one").unwrap();
    let texts = |s: &mut Session| -> Vec<String> {
        s.derive_messages()
            .iter()
            .map(|m| m.content[0].as_text().unwrap().to_string())
            .collect()
    };
    assert_eq!(texts(&mut s), ["turn one", "q2", "a2", "q3", "a3"]);
    s.compact_messages("k2", 1..3, "turn two").unwrap();
    assert_eq!(texts(&mut s), ["turn one", "turn two", "q3", "a3"]);
    // The same coordinates after reopen.
    drop(s);
    let mut r = Session::open_read_only(store, "s", Arc::new(Registry::new())).unwrap();
    assert_eq!(r.turns(), &turns[..]);
    assert_eq!(texts(&mut r), ["turn one", "turn two", "q3", "a3"]);
}
