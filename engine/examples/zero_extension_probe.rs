//! Paired runs of one store with an option of the commit path on and off:
//! zero extension (`zero`, the default: `Options::zero_ahead_bytes` 1 MiB
//! against 0) or waiters leading their writes (`leader`:
//! `Options::flush_in_caller`), alternating which goes first, each on a fresh store in the system temp dir: T writer threads
//! over 256 sessions append 12 events (11 x 300 B, 1 x 4 KB) and wait for
//! the last one to be durable, for SECS seconds. Prints on/off of durable
//! events/s per pair and the median. Pairs on one machine, back to back,
//! cancel much of the noise that separate benchmark runs suffer on a shared
//! machine (docs/DESIGN.md).
//!
//! ```sh
//! cargo run --release -p turnstone --example zero_extension_probe -- THREADS PAIRS SECS [zero|leader]
//! ```
use std::sync::Arc;
use std::time::{Duration, Instant};
use turnstone::{Options, Store};

/// Which option a pair switches: `zero` (zero extension) or `leader`
/// (`Options::flush_in_caller`).
fn run(dir: &std::path::Path, knob: &str, on: bool, threads: usize, secs: f64) -> f64 {
    let zero = if knob == "zero" && !on { 0 } else { 1 << 20 };
    let leader = knob != "leader" || on;
    let _ = std::fs::remove_dir_all(dir);

    let store = Arc::new(
        Store::open_with(
            dir,
            Options {
                zero_ahead_bytes: zero,
                flush_in_caller: leader,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let t0 = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                let names: Vec<String> = (0..256 / threads.min(256))
                    .map(|i| format!("s{t}-{i}"))
                    .collect();
                let mut i = 0;
                while Instant::now() < deadline {
                    let name = &names[i % names.len()];
                    i += 1;
                    let mut end = None;
                    for k in 0..12 {
                        let len = if k == 11 { 4000 } else { 300 };
                        end = Some(store.append(name, 1, 0, &vec![k as u8; len]).unwrap().end);
                        n += 1;
                    }
                    store.wait_durable(end.unwrap()).unwrap();
                }
                n
            })
        })
        .collect();
    let n: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    let el = t0.elapsed().as_secs_f64();
    let st = store.stats();
    Arc::try_unwrap(store).unwrap().close().unwrap();
    let _ = std::fs::remove_dir_all(dir);
    eprintln!(
        "  zero={zero} leader={leader} threads={threads} ev/s={:.0} syncs={} zero_bytes={}",
        n as f64 / el,
        st.syncs,
        st.zero_fill_bytes
    );
    n as f64 / el
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| a.get(i).map_or(d, |s| s.as_str()).to_string();
    let threads: usize = arg(1, "8").parse().expect("THREADS");
    let pairs: usize = arg(2, "6").parse().expect("PAIRS");
    let secs: f64 = arg(3, "1.5").parse().expect("SECS");
    let knob = arg(4, "zero");
    assert!(knob == "zero" || knob == "leader", "KNOB is zero or leader");
    let dir = std::env::temp_dir().join(format!("turnstone-zero-probe-{}", std::process::id()));
    let mut ratios = vec![];
    for p in 0..pairs {
        let (on, off) = if p % 2 == 0 {
            let on = run(&dir, &knob, true, threads, secs);
            (on, run(&dir, &knob, false, threads, secs))
        } else {
            let off = run(&dir, &knob, false, threads, secs);
            (run(&dir, &knob, true, threads, secs), off)
        };
        ratios.push(on / off);
        println!("pair {p}: on/off = {:.2}", on / off);
    }
    ratios.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{knob}, threads {threads}: median on/off {:.2} over {pairs} pairs {:?}",
        ratios[pairs / 2],
        ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>()
    );
}
