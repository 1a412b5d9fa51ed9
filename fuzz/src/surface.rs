//! Target `surface`: surface op sequences against a `Vec` model.
//!
//! Properties: `Surface::apply` does what `Vec::splice` does to a plain list
//! (append pushes, `replace { start, end }` puts the new node in place of
//! `start..end` and bumps `replace_generation`); `check` accepts exactly the
//! ranges `start <= end <= len` and `apply` agrees with it; an invalid range
//! is rejected with the right error and changes nothing. The incremental
//! message cache (`derive_messages`) gives the same list as a cache built
//! from scratch over the same surface, and does only the new nodes' work
//! after plain appends.

use std::collections::HashMap;

use arbitrary::{Arbitrary, Unstructured};
use turnstone::session::{internals::MessageCache, Message, Role};
use turnstone::session::{ContentBlock, Surface, SurfaceOp};

#[derive(Arbitrary, Debug)]
enum Op {
    Append {
        /// The node's message is skipped (an empty assistant message).
        skipped: bool,
    },
    Replace {
        start: u16,
        end: u16,
        skipped: bool,
    },
    /// Any range, mostly invalid.
    Wild {
        start: u64,
        end: u64,
    },
    Derive,
}

fn message(seq: u64) -> Message {
    Message {
        role: if seq.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        },
        source_seq: seq,
        kind: "user/message".into(),
        content: vec![ContentBlock::text(format!("m{seq}"))],
    }
}

/// The structured input `data` decodes to (for failure reports).
pub fn describe(data: &[u8]) -> String {
    format!(
        "{:#?}",
        Vec::<Op>::arbitrary_take_rest(Unstructured::new(data))
    )
}

pub fn run(data: &[u8]) {
    let u = Unstructured::new(data);
    let Ok(ops) = Vec::<Op>::arbitrary_take_rest(u) else {
        return;
    };
    let mut surface = Surface::default();
    let mut model: Vec<u64> = Vec::new();
    let mut generation = 0u64;
    let mut cache = MessageCache::default();
    let mut msgs: HashMap<u64, Option<Message>> = HashMap::new();
    let mut seq = 0u64;
    let mut appends_since_derive = 0usize;
    let mut replaced_since_derive = false;
    for op in ops.iter().take(256) {
        let (op, skipped) = match *op {
            Op::Derive => {
                let got: Vec<Message> = cache
                    .derive(&surface)
                    .iter()
                    .map(|m| (**m).clone())
                    .collect();
                let mut fresh = MessageCache::default();
                for n in &surface.nodes {
                    fresh.insert(*n, msgs[n].clone());
                }
                let want: Vec<Message> = fresh
                    .derive(&surface)
                    .iter()
                    .map(|m| (**m).clone())
                    .collect();
                assert_eq!(got, want, "incremental messages differ from a rebuild");
                let expected: Vec<u64> = model
                    .iter()
                    .filter(|n| msgs[n].is_some())
                    .copied()
                    .collect();
                let sources: Vec<u64> = got.iter().map(|m| m.source_seq).collect();
                assert_eq!(
                    sources, expected,
                    "one message per non-skipped node, in order"
                );
                if !replaced_since_derive {
                    assert_eq!(
                        cache.last_work, appends_since_derive,
                        "after plain appends only the new nodes are visited"
                    );
                }
                appends_since_derive = 0;
                replaced_since_derive = false;
                continue;
            }
            Op::Append { skipped } => (SurfaceOp::Append, skipped),
            Op::Replace {
                start,
                end,
                skipped,
            } => (
                SurfaceOp::Replace {
                    start: start as u64 % (model.len() as u64 + 2),
                    end: end as u64 % (model.len() as u64 + 2),
                },
                skipped,
            ),
            Op::Wild { start, end } => (SurfaceOp::Replace { start, end }, false),
        };
        let valid = match op {
            SurfaceOp::Append => true,
            SurfaceOp::Replace { start, end } => start <= end && end <= model.len() as u64,
        };
        assert_eq!(
            surface.check(op).is_ok(),
            valid,
            "check({op:?}) on {} nodes",
            model.len()
        );
        let before = surface.clone();
        match surface.apply(seq, op) {
            Ok(()) => {
                assert!(valid, "apply accepted an invalid {op:?}");
                match op {
                    SurfaceOp::Append => {
                        model.push(seq);
                        appends_since_derive += 1;
                    }
                    SurfaceOp::Replace { start, end } => {
                        model.splice(start as usize..end as usize, [seq]);
                        generation += 1;
                        replaced_since_derive = true;
                    }
                }
                let msg = (!skipped).then(|| message(seq));
                cache.insert(seq, msg.clone());
                msgs.insert(seq, msg);
                seq += 1;
            }
            Err(e) => {
                assert!(!valid, "apply rejected a valid {op:?}: {e}");
                if let SurfaceOp::Replace { start, end } = op {
                    assert_eq!((e.start, e.end, e.len), (start, end, model.len() as u64));
                }
                assert_eq!(surface, before, "a rejected op changed the surface");
            }
        }
        assert_eq!(surface.nodes, model);
        assert_eq!(surface.replace_generation, generation);
        assert_eq!(surface.len(), model.len());
    }
}
