//! A fork chain 100,000 levels deep (issue 19, item 1): every lookup walks
//! the chain iteratively, so reading the deepest fork, its durable length,
//! and reopening the store (from the checkpoint, and by a full scan) all fit
//! a small stack and take time linear in the depth.

use std::time::Instant;

use turnstone::{Options, Store};

const LEVELS: u64 = 100_000;
/// Far below the default 2 MiB of a test thread: a walk that recursed once
/// per level would need several MiB here.
const STACK_BYTES: usize = 256 * 1024;

fn open(dir: &std::path::Path) -> Store {
    Store::open_with(dir, Options::default()).unwrap()
}

fn name(level: u64) -> String {
    format!("chain-{level}")
}

/// Read the deepest fork whole and spot-check single events; returns the
/// seconds the whole read took.
fn check_deepest(store: &Store) -> f64 {
    let deepest = name(LEVELS - 1);
    assert_eq!(store.session_len(&deepest), Some(LEVELS));
    let meta = store.session_meta(&deepest).unwrap();
    assert_eq!(meta.durable_len, LEVELS);
    let t = Instant::now();
    let all = store.read_range(&deepest, 0..LEVELS).unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(all.len() as u64, LEVELS);
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.seq.0, i as u64);
        assert_eq!(e.payload, (i as u64).to_le_bytes(), "event {i}");
    }
    for seq in [0, 1, LEVELS / 2, LEVELS - 1] {
        assert_eq!(
            store.read(&deepest, seq).unwrap().payload,
            seq.to_le_bytes()
        );
    }
    secs
}

/// Run `f` on a thread with a small stack, so that any per-level recursion
/// overflows here rather than passing on a big main-thread stack.
fn small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(STACK_BYTES)
        .spawn(f)
        .unwrap()
        .join()
        // (A stack overflow aborts the process; this re-raises any other
        // panic of the thread.)
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

#[test]
fn hundred_thousand_level_fork_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    // Level i forks level i-1 whole, then appends event i.
    let t = Instant::now();
    {
        let store = open(&path);
        store.append(&name(0), 1, 0, &0u64.to_le_bytes()).unwrap();
        for level in 1..LEVELS {
            store.fork(&name(level - 1), level, &name(level)).unwrap();
            store
                .append(&name(level), 1, 0, &level.to_le_bytes())
                .unwrap();
        }
        store.sync().unwrap();
        let secs = small_stack(move || {
            let s = check_deepest(&store);
            store.close().unwrap();
            s
        });
        eprintln!(
            "built {LEVELS} levels and read the deepest ({secs:.3} s) in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    // Reopen from the checkpoint, then by a full scan.
    for scan in [false, true] {
        if scan {
            std::fs::remove_file(path.join("index.ckpt")).unwrap();
        }
        let p = path.clone();
        let (open_secs, read_secs) = small_stack(move || {
            let t = Instant::now();
            let store = open(&p);
            let open_secs = t.elapsed().as_secs_f64();
            assert_eq!(store.recovery_report().checkpoint_used, !scan);
            let read_secs = check_deepest(&store);
            // The chain still grows.
            let next = format!("chain-next-{scan}");
            store.fork(&name(LEVELS - 1), LEVELS, &next).unwrap();
            assert_eq!(store.session_len(&next), Some(LEVELS));
            drop(store);
            (open_secs, read_secs)
        });
        eprintln!("reopen (scan: {scan}) {open_secs:.3} s, read deepest {read_secs:.3} s");
        // Linear in depth: a quadratic walk (5e9 steps at this depth) takes
        // minutes; linear work is well under a second. The bound is loose
        // so that a loaded machine cannot fail it.
        assert!(
            read_secs < 60.0,
            "reading the deepest fork took {read_secs} s"
        );
    }
}
