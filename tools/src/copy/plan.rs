//! The plan of a copy, made from the source's session list before anything
//! is read or written: parents before children, how much of each session is
//! copied, and which session each one is read through. Apart from the
//! copying itself because it is the part with the reasoning (deleted
//! ancestors, fork points moved down), and it is a pure function.

use std::collections::HashMap;

use super::Node;

/// Order parents before children; the extent of each session to copy
/// (live: all; deleted: the longest prefix of it that a copied child reads,
/// at least its own fork point); and the session to read each one through
/// (a deleted session through the child that reads furthest into it).
///
/// A child forked at `f` reads its parent's events `0..f` only as far as it
/// is read itself: a live child reads all of them, a deleted one only the
/// prefix `need` its own forks read. So a deleted session's need is the
/// highest `min(f, need(child))` over its children, and its events are read
/// through that child, which holds them at the same seqs up to that need (a
/// deleted child's fork point alone would reach past what its own forks
/// hold, and the events read there would be theirs).
pub(super) struct Plan {
    pub(super) order: Vec<Node>,
    pub(super) extent: HashMap<String, u64>,
    pub(super) via: HashMap<String, String>,
}

pub(super) fn plan(nodes: Vec<Node>) -> Plan {
    let by_id: HashMap<String, Node> = nodes.iter().map(|n| (n.id.clone(), n.clone())).collect();
    // Live sessions and their ancestors, ancestors first.
    let mut order: Vec<Node> = Vec::new();
    let mut placed = std::collections::HashSet::new();
    for n in nodes.iter().filter(|n| n.live_len.is_some()) {
        let mut chain = vec![n.clone()];
        let mut at = n.clone();
        while let Some((p, _)) = &at.parent {
            if placed.contains(p) {
                break;
            }
            match by_id.get(p) {
                Some(pn) => {
                    chain.push(pn.clone());
                    at = pn.clone();
                }
                None => break,
            }
        }
        for c in chain.into_iter().rev() {
            if placed.insert(c.id.clone()) {
                order.push(c);
            }
        }
    }
    let mut extent: HashMap<String, u64> = HashMap::new();
    let mut via: HashMap<String, String> = HashMap::new();
    // How much of each session its copied forks (or, live, its readers) read.
    let mut need: HashMap<String, u64> = HashMap::new();
    // Children come after their parents: walk backwards.
    for n in order.iter().rev() {
        let e = match n.live_len {
            Some(len) => {
                via.insert(n.id.clone(), n.id.clone());
                need.insert(n.id.clone(), len);
                len
            }
            None => {
                let deepest = order
                    .iter()
                    .filter(|c| c.parent.as_ref().is_some_and(|(p, _)| *p == n.id))
                    .map(|c| (c, c.own_from().min(need.get(&c.id).copied().unwrap_or(0))))
                    .max_by_key(|(_, reach)| *reach);
                let reach = deepest.map_or(0, |(_, r)| r);
                if let Some((c, _)) = deepest {
                    if let Some(v) = via.get(&c.id).cloned() {
                        via.insert(n.id.clone(), v);
                    }
                }
                need.insert(n.id.clone(), reach);
                reach.max(n.own_from())
            }
        };
        extent.insert(n.id.clone(), e);
    }
    // A deleted session read by its forks only below its own fork point is
    // forked at that point: its parent is copied only that far.
    for n in order.iter_mut().filter(|n| n.live_len.is_none()) {
        let reach = need.get(&n.id).copied().unwrap_or(0);
        if let Some((_, at)) = n.parent.as_mut() {
            if reach < *at {
                *at = reach;
                extent.insert(n.id.clone(), reach);
            }
        }
    }
    Plan { order, extent, via }
}
