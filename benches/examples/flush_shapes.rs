//! What the device gives durable writes in three shapes, without the engine:
//! how far a commit pipeline could go on this machine (issue 16).
//!
//! ```sh
//! cargo run --release -p turnstone-benches --example flush_shapes -- [DIR] [SECONDS] [BYTES]
//! ```
//!
//! In a zero-filled, synced file of 256 MiB in `DIR` (default: the system's
//! temporary directory), writes of `BYTES` (default 24576, about one batch
//! of the fleet at 256 sessions × 8 threads) at advancing offsets, each made
//! durable by `fdatasync`, for `SECONDS` (default 3) per shape:
//!
//! - `serial`: one thread writes, then syncs, then writes the next: one
//!   batch in flight, as the engine's commit path does (FORMAT.md §6.2
//!   rule 1). Reports cycles per second and the mean time of each step.
//! - `pipelined`: one thread writes while another syncs what was written
//!   before; at most two writes ahead of the last finished sync (two
//!   batches in flight).
//! - `concurrent N`: N threads each write their own offsets and sync,
//!   independently (as N lanes, or N per-session files, would).
//!
//! Each shape runs through the page cache and, where the file system takes
//! it, with direct I/O (`O_DIRECT`, 4096-aligned). Prints one line per
//! shape; medians are for the caller to take over several runs.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const FILE_BYTES: u64 = 256 << 20;
const ALIGN: usize = 4096;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let secs: f64 = args.get(1).map_or(3.0, |s| s.parse().expect("SECONDS"));
    let bytes: usize = args.get(2).map_or(24576, |s| s.parse().expect("BYTES"));
    assert!(
        bytes.is_multiple_of(ALIGN) && bytes > 0,
        "BYTES must be a multiple of {ALIGN}"
    );
    let tmp = tempfile::tempdir_in(&dir).expect("a temporary directory");
    let path = tmp.path().join("flush_shapes.dat");
    zero_fill(&path);
    let run = Duration::from_secs_f64(secs);
    println!(
        "flush_shapes: {} bytes per write, {secs} s per shape, file in {}",
        bytes,
        dir.display()
    );
    for direct in [false, true] {
        let Some(file) = open(&path, direct) else {
            println!("direct I/O: not taken by this file system");
            continue;
        };
        let file = Arc::new(file);
        let mode = if direct { "direct" } else { "buffered" };
        let (n, write, sync) = serial(&file, bytes, run);
        println!(
            "{mode:8} serial        {:8.0} durable writes/s  write {:6.1} us  fdatasync {:6.1} us",
            n as f64 / secs,
            write.as_secs_f64() * 1e6 / n as f64,
            sync.as_secs_f64() * 1e6 / n as f64
        );
        let (syncs, writes) = pipelined(&file, bytes, run);
        println!(
            "{mode:8} pipelined     {:8.0} fdatasyncs/s       ({:.0} writes/s)",
            syncs as f64 / secs,
            writes as f64 / secs
        );
        for threads in [2u64, 4, 8] {
            let (n, latency) = concurrent(&file, bytes, run, threads);
            println!(
                "{mode:8} concurrent {threads} {:8.0} durable writes/s  mean latency {:6.1} us",
                n as f64 / secs,
                latency.as_secs_f64() * 1e6 / n as f64
            );
        }
    }
}

fn zero_fill(path: &Path) {
    let f = File::create(path).expect("create the file");
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < FILE_BYTES {
        f.write_all_at(&zeros, at).expect("zero fill");
        at += zeros.len() as u64;
    }
    f.sync_all().expect("sync the zeros");
}

fn open(path: &Path, direct: bool) -> Option<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path).ok()
}

/// `len` bytes of data at a 4096-aligned address (what `O_DIRECT` needs).
fn aligned(len: usize) -> Vec<u8> {
    vec![b'x'; len + ALIGN]
}

fn slice(buf: &[u8], len: usize) -> &[u8] {
    let off = buf.as_ptr().align_offset(ALIGN);
    &buf[off..off + len]
}

/// Offsets `first, first + step, …`, wrapping inside the file.
fn next_offset(at: u64, step: u64, first: u64, len: usize) -> u64 {
    let n = at + step;
    if n + len as u64 > FILE_BYTES {
        first
    } else {
        n
    }
}

/// Write, sync, repeat: (cycles, time writing, time syncing).
fn serial(f: &File, len: usize, run: Duration) -> (u64, Duration, Duration) {
    let buf = aligned(len);
    let data = slice(&buf, len);
    let (mut n, mut write, mut sync) = (0u64, Duration::ZERO, Duration::ZERO);
    let mut at = 0u64;
    let end = Instant::now() + run;
    while Instant::now() < end {
        let t0 = Instant::now();
        f.write_all_at(data, at).expect("write");
        let t1 = Instant::now();
        f.sync_data().expect("fdatasync");
        write += t1 - t0;
        sync += t1.elapsed();
        n += 1;
        at = next_offset(at, len as u64, 0, len);
    }
    (n, write, sync)
}

/// A writer and a syncer thread, the writer at most two writes ahead of
/// the last finished sync: (syncs, writes).
fn pipelined(f: &Arc<File>, len: usize, run: Duration) -> (u64, u64) {
    // (writes done, writes covered by a finished sync)
    let state = Arc::new((Mutex::new((0u64, 0u64)), Condvar::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let syncs = Arc::new(AtomicU64::new(0));
    let writer = {
        let (f, state, stop) = (f.clone(), state.clone(), stop.clone());
        std::thread::spawn(move || {
            let buf = aligned(len);
            let data = slice(&buf, len);
            let mut at = 0u64;
            while !stop.load(Ordering::Relaxed) {
                {
                    let (m, cv) = &*state;
                    let mut g = m.lock().unwrap();
                    while g.0 - g.1 >= 2 && !stop.load(Ordering::Relaxed) {
                        g = cv.wait_timeout(g, Duration::from_millis(5)).unwrap().0;
                    }
                }
                f.write_all_at(data, at).expect("write");
                at = next_offset(at, len as u64, 0, len);
                let (m, cv) = &*state;
                m.lock().unwrap().0 += 1;
                cv.notify_all();
            }
        })
    };
    let syncer = {
        let (f, state, stop, syncs) = (f.clone(), state.clone(), stop.clone(), syncs.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let written = {
                    let (m, cv) = &*state;
                    let mut g = m.lock().unwrap();
                    while g.0 == g.1 && !stop.load(Ordering::Relaxed) {
                        g = cv.wait_timeout(g, Duration::from_millis(5)).unwrap().0;
                    }
                    g.0
                };
                f.sync_data().expect("fdatasync");
                syncs.fetch_add(1, Ordering::Relaxed);
                let (m, cv) = &*state;
                m.lock().unwrap().1 = written;
                cv.notify_all();
            }
        })
    };
    std::thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    syncer.join().unwrap();
    let writes = state.0.lock().unwrap().0;
    (syncs.load(Ordering::Relaxed), writes)
}

/// `threads` independent write + sync loops: (durable writes, summed latency).
fn concurrent(f: &Arc<File>, len: usize, run: Duration, threads: u64) -> (u64, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (f, stop) = (f.clone(), stop.clone());
            std::thread::spawn(move || {
                let buf = aligned(len);
                let data = slice(&buf, len);
                let first = t * len as u64;
                let step = threads * len as u64;
                let (mut n, mut latency) = (0u64, Duration::ZERO);
                let mut at = first;
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    f.write_all_at(data, at).expect("write");
                    f.sync_data().expect("fdatasync");
                    latency += t0.elapsed();
                    n += 1;
                    at = next_offset(at, step, first, len);
                }
                (n, latency)
            })
        })
        .collect();
    std::thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, Duration::ZERO), |(n, l), (m, k)| (n + m, l + k))
}
