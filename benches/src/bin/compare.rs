//! `compare`: the fleet workload against turnstone, its peers and the disk's
//! own limits, in one run.
//!
//! ```text
//! cargo run --release -p turnstone-benches --bin compare -- [--quick] [--runs N]
//!     [--duration SECS] [--stores a,b,..] [--configs 256x8,4096x64,..]
//!     [--dir BASE] [--out FILE.json] [--skip limits,fleet,read,reopen,rss,gc,cold,session,lazy]
//! ```
//!
//! Prints a table per configuration with each store's ratio to turnstone, the
//! read side, the reopen of a large store and peak RSS with 10k open
//! sessions, storage lifecycle (the `gc_fleet` binary: a fleet with
//! deletions, collected in the background vs never, issue 17) and cold
//! reads (the `cold_reads` binary with a background regroup, issue 21),
//! `Session::open` of a 100k-event session from its state snapshot and a
//! writable reopen of a large fleet store by `turnstone fleet` (issue 21),
//! then the targets of issues 2, 8, 16, 17 and 21 with met/missed (issue 16's
//! session-layer rows need `turnstone-session` among the stores: the same
//! workload through `Session::append`). Writes the
//! JSON results (every run and the median/min/max summary) and a Markdown
//! rendering of the tables under `target/turnstone-bench/`. Exits non-zero if
//! any store failed its read-back check.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use turnstone::session::{ContentBlock, Registry, Session, SurfaceOp, UserMessage};
use turnstone::{Options, Store};
use turnstone_benches::fleet::{self, FleetConfig};
use turnstone_benches::stores::{self, PreallocFile, StoreKind};
use turnstone_benches::sys::{self, Device};
use turnstone_benches::typed::{self, typed_event};
use turnstone_benches::workload::Workload;

type Result<T> = stores::Result<T>;
/// One run's numbers, by key (`fleet/256x8/turnstone/events_per_s`, …).
type Metrics = BTreeMap<String, f64>;

#[derive(Debug, Clone)]
struct Args {
    quick: bool,
    runs: usize,
    duration: Duration,
    stores: Vec<StoreKind>,
    configs: Vec<(usize, usize)>,
    base: PathBuf,
    out: Option<PathBuf>,
    skip: HashSet<String>,
    seed: u64,
    prealloc_mb: u64,
    seqbw_mb: u64,
    probe_n: usize,
    read_events: u64,
    reopen_mb: u64,
    rss_sessions: usize,
}

fn usage() -> ! {
    eprintln!(
        "usage: compare [--quick] [--runs N] [--duration SECS] [--stores a,b] \
         [--configs 256x8,4096x64] [--dir BASE] [--out FILE] \
         [--skip limits,fleet,read,reopen,rss,gc,cold,session,lazy] [--seed S]\n\
         stores: {} (and, when named: turnstone-session, turnstone-leader, turnstone-recycled, turnstone-recycled-cold, turnstone-direct, postgres, pg-naive)\n\
         env: TURNSTONE_BENCH_REOPEN_MB (size of the reopen store)",
        StoreKind::ALL.map(|k| k.name()).join(", ")
    );
    std::process::exit(2)
}

fn parse_args(argv: &[String]) -> Args {
    let quick = argv.iter().any(|a| a == "--quick");
    let env_mb = std::env::var("TURNSTONE_BENCH_REOPEN_MB")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut a = Args {
        quick,
        runs: 1,
        duration: Duration::from_secs_f64(if quick { 2.0 } else { 5.0 }),
        stores: StoreKind::ALL.to_vec(),
        configs: if quick {
            vec![(256, 8)]
        } else {
            vec![
                (256, 1),
                (256, 8),
                (256, 64),
                (4096, 1),
                (4096, 8),
                (4096, 64),
            ]
        },
        base: std::env::temp_dir(),
        out: None,
        skip: HashSet::new(),
        seed: 1,
        prealloc_mb: if quick { 256 } else { 1536 },
        seqbw_mb: if quick { 64 } else { 512 },
        probe_n: if quick { 100 } else { 400 },
        read_events: if quick { 20_000 } else { 100_000 },
        reopen_mb: env_mb.unwrap_or(if quick { 64 } else { 1024 }),
        rss_sessions: if quick { 2_000 } else { 10_000 },
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--quick" => {}
            "--runs" => a.runs = val().parse().unwrap_or_else(|_| usage()),
            "--duration" => {
                a.duration = Duration::from_secs_f64(val().parse().unwrap_or_else(|_| usage()))
            }
            "--stores" => {
                a.stores = val()
                    .split(',')
                    .map(|n| StoreKind::from_name(n).unwrap_or_else(|| usage()))
                    .collect();
                if !a.stores.contains(&StoreKind::Turnstone) {
                    a.stores.insert(0, StoreKind::Turnstone);
                }
            }
            "--configs" => {
                a.configs = val()
                    .split(',')
                    .map(|c| {
                        let (s, t) = c.split_once('x').unwrap_or_else(|| usage());
                        (
                            s.parse().unwrap_or_else(|_| usage()),
                            t.parse().unwrap_or_else(|_| usage()),
                        )
                    })
                    .collect()
            }
            "--dir" => a.base = PathBuf::from(val()),
            "--out" => a.out = Some(PathBuf::from(val())),
            "--skip" => a.skip.extend(val().split(',').map(str::to_string)),
            "--seed" => a.seed = val().parse().unwrap_or_else(|_| usage()),
            "--rss-sessions" => a.rss_sessions = val().parse().unwrap_or_else(|_| usage()),
            "--read-events" => a.read_events = val().parse().unwrap_or_else(|_| usage()),
            "-h" | "--help" => usage(),
            _ => usage(),
        }
    }
    a
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--rss-child") {
        if let Err(e) = rss_child(&argv[1..]) {
            eprintln!("rss child: {e}");
            std::process::exit(1);
        }
        return;
    }
    if argv.first().map(String::as_str) == Some("--render") {
        // Re-render the tables of an earlier results file.
        match argv
            .get(1)
            .ok_or_else(|| "--render FILE.json".into())
            .and_then(|p| rerender(Path::new(p)))
        {
            Ok(text) => print!("{text}"),
            Err(e) => {
                eprintln!("compare: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let args = parse_args(&argv);
    match run(&args) {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("FAILED: a store lost or changed events (see read-back above)");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("compare: {e}");
            std::process::exit(1);
        }
    }
}

fn cfg_key(sessions: usize, threads: usize) -> String {
    format!("{sessions}x{threads}")
}

fn run(args: &Args) -> Result<bool> {
    sys::raise_nofile();
    std::fs::create_dir_all(&args.base)?;
    let device = Device::of(&args.base);
    let machine = machine_info(&args.base, device.as_ref());
    println!("turnstone compare — {}", machine_line(&machine));
    println!(
        "mode: {}, runs: {}, {:.1} s per fleet run, configs: {}, stores: {}",
        if args.quick { "quick" } else { "full" },
        args.runs,
        args.duration.as_secs_f64(),
        args.configs
            .iter()
            .map(|(s, t)| cfg_key(*s, *t))
            .collect::<Vec<_>>()
            .join(" "),
        args.stores
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let t_all = Instant::now();
    print!(
        "zero-filling {} MiB for the raw-prealloc log … ",
        args.prealloc_mb
    );
    std::io::stdout().flush()?;
    let prealloc = Arc::new(PreallocFile::create(
        args.base
            .join(format!("turnstone-bench-prealloc-{}", std::process::id())),
        args.prealloc_mb << 20,
    )?);
    println!("done");

    let mut runs: Vec<Metrics> = Vec::new();
    let mut all_ok = true;
    let mut failures: Vec<String> = Vec::new();
    for r in 0..args.runs {
        println!("\n=== run {} of {} ===", r + 1, args.runs);
        let mut m = Metrics::new();
        if let Some((l1, _, _)) = sys::loadavg() {
            m.insert("machine/load1_at_start".into(), l1);
        }
        if !args.skip.contains("limits") {
            limits(args, &prealloc, device.as_ref(), &mut m)?;
        }
        if !args.skip.contains("fleet") {
            for &(sessions, threads) in &args.configs {
                let cfg = FleetConfig {
                    sessions,
                    threads,
                    duration: args.duration,
                    seed: args.seed,
                };
                if let Some(d) = device.as_ref() {
                    // Writes by other processes just before this configuration.
                    if let Some(a) = d.bytes_written() {
                        std::thread::sleep(Duration::from_secs(1));
                        if let Some(b) = d.bytes_written() {
                            m.insert(
                                format!(
                                    "fleet/{}/background_device_mb_s",
                                    cfg_key(sessions, threads)
                                ),
                                (b - a) as f64 / 1e6,
                            );
                        }
                    }
                }
                // Rotate the order of stores between runs, so no store always
                // runs first (or right after another one's writeback).
                let mut order = args.stores.clone();
                let len = order.len();
                order.rotate_left(r % len);
                for kind in order {
                    print!("fleet {:>4}x{:<2} {:<18} ", sessions, threads, kind.name());
                    std::io::stdout().flush()?;
                    let res = fleet::run(
                        kind,
                        &cfg,
                        &args.base,
                        Some(prealloc.clone()),
                        device.as_ref(),
                    )?;
                    println!(
                        "{:>9.0} ev/s {:>7.1} MB/s p99 {:>6.1} ms reopen {:>8.1} ms read-back {}",
                        res.events_per_s(),
                        res.mb_per_s(),
                        res.wait_p99_us as f64 / 1e3,
                        res.readback.reopen.as_secs_f64() * 1e3,
                        if res.readback.ok() {
                            "ok".to_string()
                        } else {
                            format!("FAILED ({} problems)", res.readback.problem_count)
                        }
                    );
                    if !res.readback.ok() {
                        all_ok = false;
                        failures.push(format!(
                            "{} {}: {:?}",
                            kind.name(),
                            cfg_key(sessions, threads),
                            res.readback.problems
                        ));
                    }
                    record_fleet(&mut m, &res);
                }
            }
            derive_ratios(args, &mut m);
        }
        if !args.skip.contains("read") {
            read_side(args, &mut m)?;
        }
        if !args.skip.contains("reopen") {
            reopen_big(args, &mut m)?;
        }
        if !args.skip.contains("rss") {
            rss(args, &mut m)?;
        }
        if !args.skip.contains("gc") {
            lifecycle(args, &mut m)?;
        }
        if !args.skip.contains("cold") {
            cold(args, &mut m)?;
        }
        if !args.skip.contains("session") {
            session_open(args, &mut m)?;
        }
        if !args.skip.contains("lazy") {
            lazy_reopen(args, &mut m)?;
        }
        runs.push(m);
    }
    drop(prealloc);

    let summary = summarize(&runs);
    let report = render(args, &machine, &summary, &failures);
    println!("\n{report}");
    println!("total time {:.0} s", t_all.elapsed().as_secs_f64());

    let out_dir = target_dir().join("turnstone-bench");
    std::fs::create_dir_all(&out_dir)?;
    let json_path = args.out.clone().unwrap_or_else(|| {
        out_dir.join(if args.quick {
            "compare-quick.json"
        } else {
            "compare.json"
        })
    });
    let md_path = json_path.with_extension("md");
    let doc = json!({
        "machine": machine,
        "args": {
            "quick": args.quick, "runs": args.runs, "duration_s": args.duration.as_secs_f64(),
            "configs": args.configs.iter().map(|(s, t)| cfg_key(*s, *t)).collect::<Vec<_>>(),
            "stores": args.stores.iter().map(|k| k.name()).collect::<Vec<_>>(),
            "seed": args.seed, "reopen_mb": args.reopen_mb, "read_events": args.read_events,
            "rss_sessions": args.rss_sessions,
        },
        "runs": runs,
        "summary": summary.iter().map(|(k, v)| (k.clone(), json!({"median": v.0, "min": v.1, "max": v.2}))).collect::<serde_json::Map<_, _>>(),
        "failures": failures,
        "all_read_back_ok": all_ok,
    });
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)?;
    std::fs::write(&md_path, &report)?;
    println!("wrote {} and {}", json_path.display(), md_path.display());
    Ok(all_ok)
}

fn rerender(path: &Path) -> Result<String> {
    let doc: Value = serde_json::from_slice(&std::fs::read(path)?)?;
    let a = &doc["args"];
    let mut args = parse_args(&[]);
    args.quick = a["quick"].as_bool().unwrap_or(false);
    args.runs = a["runs"].as_u64().unwrap_or(1) as usize;
    args.duration = Duration::from_secs_f64(a["duration_s"].as_f64().unwrap_or(5.0));
    args.rss_sessions = a["rss_sessions"].as_u64().unwrap_or(10_000) as usize;
    args.configs = a["configs"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|c| {
                    let (s, t) = c.as_str()?.split_once('x')?;
                    Some((s.parse().ok()?, t.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    args.stores = a["stores"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|n| StoreKind::from_name(n.as_str()?))
                .collect()
        })
        .unwrap_or_default();
    let runs: Vec<Metrics> = serde_json::from_value(doc["runs"].clone())?;
    let failures: Vec<String> = serde_json::from_value(doc["failures"].clone()).unwrap_or_default();
    Ok(render(&args, &doc["machine"], &summarize(&runs), &failures))
}

fn target_dir() -> PathBuf {
    if let Ok(d) = std::env::var("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .join("target")
}

fn machine_info(base: &Path, device: Option<&Device>) -> Value {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map(|kib| kib / 1048576.0)
        .unwrap_or(0.0);
    let fs = fs_type(base).unwrap_or_else(|| "?".into());
    json!({
        "cpus": cpus,
        "mem_gib": (mem_gib * 10.0).round() / 10.0,
        "kernel": kernel,
        "bench_dir": base.display().to_string(),
        "filesystem": fs,
        "device": device.map(|d| d.name.clone()),
        "loadavg_at_start": sys::loadavg().map(|(a, b, c)| vec![a, b, c]),
    })
}

fn machine_line(m: &Value) -> String {
    format!(
        "{} CPUs, {} GiB, Linux {}, {} on {} ({}), load {}",
        m["cpus"],
        m["mem_gib"],
        m["kernel"].as_str().unwrap_or("?"),
        m["bench_dir"].as_str().unwrap_or("?"),
        m["filesystem"].as_str().unwrap_or("?"),
        m["device"].as_str().unwrap_or("device n/a"),
        m["loadavg_at_start"]
            .as_array()
            .map(|v| v
                .iter()
                .map(|x| format!("{:.2}", x.as_f64().unwrap_or(0.0)))
                .collect::<Vec<_>>()
                .join(" "))
            .unwrap_or_default()
    )
}

/// Filesystem type of the mount holding `dir` (longest matching mount point).
fn fs_type(dir: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, mp, ty) = (f.next()?, f.next()?, f.next()?);
            dir.starts_with(mp).then(|| (mp.len(), ty.to_string()))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, t)| t)
}

// ------------------------------------------------------------------ limits

fn limits(
    args: &Args,
    prealloc: &PreallocFile,
    device: Option<&Device>,
    m: &mut Metrics,
) -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("turnstone-limits-")
        .tempdir_in(&args.base)?;
    // Writes by everyone else on this (shared) machine, for calibration.
    if let Some(d) = device {
        let a = d.bytes_written();
        std::thread::sleep(Duration::from_secs(2));
        if let (Some(a), Some(b)) = (a, d.bytes_written()) {
            m.insert(
                "limit/background_device_mb_s".into(),
                (b - a) as f64 / 2.0 / 1e6,
            );
        }
    }
    let pf = File::options()
        .read(true)
        .write(true)
        .open(&prealloc.path)?;
    let lat = probe_4k(&pf, args.probe_n)?;
    m.insert("limit/probe4k_overwrite_p50_us".into(), lat.0);
    m.insert("limit/probe4k_overwrite_p99_us".into(), lat.1);
    // The same probe while every CPU spins: on some VMs an I/O completion
    // reaches a halted vCPU only at the next timer tick, so the latency of a
    // sync depends on whether the machine is otherwise busy.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let busy = std::thread::scope(|sc| {
        for _ in 0..cpus {
            sc.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let r = probe_4k(&pf, args.probe_n);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    })?;
    m.insert("limit/probe4k_busy_p50_us".into(), busy.0);
    m.insert("limit/probe4k_busy_p99_us".into(), busy.1);
    let af = File::create(dir.path().join("probe"))?;
    let lat = probe_4k(&af, args.probe_n)?;
    m.insert("limit/probe4k_append_p50_us".into(), lat.0);
    m.insert("limit/probe4k_append_p99_us".into(), lat.1);
    let total = (args.seqbw_mb << 20).min(prealloc.len);
    let bw = seq_bw(&pf, total)?;
    m.insert("limit/seq_bw_overwrite_mb_s".into(), bw);
    let af = File::create(dir.path().join("seq"))?;
    let bw2 = seq_bw(&af, total)?;
    m.insert("limit/seq_bw_append_mb_s".into(), bw2);
    m.insert("limit/seq_bw_mb_s".into(), bw.max(bw2));
    println!(
        "limits: 4 KiB write+fdatasync p50 {:.2} ms (overwrite) / {:.2} ms (append) / {:.2} ms (overwrite, CPUs busy); \
         sequential durable {:.0} MB/s (overwrite) / {:.0} MB/s (append); background device writes {:.1} MB/s",
        m["limit/probe4k_overwrite_p50_us"] / 1e3,
        m["limit/probe4k_append_p50_us"] / 1e3,
        m["limit/probe4k_busy_p50_us"] / 1e3,
        bw,
        bw2,
        m.get("limit/background_device_mb_s").copied().unwrap_or(f64::NAN)
    );
    Ok(())
}

/// `n` × (4 KiB pwrite + fdatasync) at consecutive offsets; (p50, p99) in µs.
fn probe_4k(f: &File, n: usize) -> Result<(f64, f64)> {
    let buf = vec![0xA5u8; 4096];
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let t0 = Instant::now();
        f.write_all_at(&buf, i as u64 * 4096)?;
        f.sync_data()?;
        lat.push(t0.elapsed().as_micros() as u64);
    }
    lat.sort_unstable();
    Ok((
        sys::percentile(&lat, 50.0) as f64,
        sys::percentile(&lat, 99.0) as f64,
    ))
}

/// Sequential durable bandwidth: 8 MiB pwrites, each followed by fdatasync.
fn seq_bw(f: &File, total: u64) -> Result<f64> {
    let chunk = vec![0x5Au8; 8 << 20];
    let t0 = Instant::now();
    let mut at = 0;
    while at < total {
        f.write_all_at(&chunk, at)?;
        f.sync_data()?;
        at += chunk.len() as u64;
    }
    Ok(at as f64 / 1e6 / t0.elapsed().as_secs_f64())
}

// ------------------------------------------------------------------ fleet

fn record_fleet(m: &mut Metrics, r: &fleet::FleetResult) {
    let p = format!(
        "fleet/{}/{}/",
        cfg_key(r.sessions, r.threads),
        r.store.name()
    );
    let mut put = |k: &str, v: f64| {
        m.insert(format!("{p}{k}"), v);
    };
    put("events_per_s", r.events_per_s());
    put("payload_mb_per_s", r.mb_per_s());
    put("waits_per_s", r.waits_per_s());
    put("wait_p50_us", r.wait_p50_us as f64);
    put("wait_p99_us", r.wait_p99_us as f64);
    put("wait_p999_us", r.wait_p999_us as f64);
    put("events", r.events as f64);
    put("payload_bytes", r.payload_bytes as f64);
    put("cpu_s", r.cpu.as_secs_f64());
    put(
        "cpu_us_per_event",
        r.cpu.as_secs_f64() * 1e6 / r.events.max(1) as f64,
    );
    put(
        "user_cpu_us_per_event",
        r.cpu_user.as_secs_f64() * 1e6 / r.events.max(1) as f64,
    );
    put("reopen_ms", r.readback.reopen.as_secs_f64() * 1e3);
    put("readback_ok", if r.readback.ok() { 1.0 } else { 0.0 });
    if let Some(d) = r.device_per_payload() {
        put("device_bytes_per_payload_byte", d);
    }
    if let Some(d) = r.process_per_payload() {
        put("process_write_bytes_per_payload_byte", d);
    }
    if let Some(e) = r.events_per_sync() {
        put("events_per_sync", e);
    }
    if let Some(c) = r.checkpoint_bytes {
        put(
            "checkpoint_bytes_per_payload_byte",
            c as f64 / r.payload_bytes.max(1) as f64,
        );
    }
    if r.prealloc_exceeded {
        put("prealloc_exceeded", 1.0);
    }
}

/// Per-run ratios (paired within a run, so their spread is the real noise).
fn derive_ratios(args: &Args, m: &mut Metrics) {
    let mut add = Vec::new();
    for &(s, t) in &args.configs {
        let c = cfg_key(s, t);
        let Some(ts) = m.get(&format!("fleet/{c}/turnstone/events_per_s")).copied() else {
            continue;
        };
        for k in &args.stores {
            if let Some(v) = m.get(&format!("fleet/{c}/{}/events_per_s", k.name())) {
                add.push((format!("ratio/{c}/{}", k.name()), ts / v));
            }
        }
        // Issue 16: the session layer's durable events/s as a share of the
        // raw store's, on the same workload in the same run.
        if let Some(v) = m.get(&format!("fleet/{c}/turnstone-session/events_per_s")) {
            add.push((format!("session_share/{c}"), v / ts));
        }
    }
    for s in args.configs.iter().map(|c| c.0).collect::<HashSet<_>>() {
        let one = m.get(&format!("fleet/{}/turnstone/events_per_s", cfg_key(s, 1)));
        let many = m.get(&format!("fleet/{}/turnstone/events_per_s", cfg_key(s, 64)));
        if let (Some(a), Some(b)) = (one, many) {
            add.push((format!("scale/{s}/64_over_1"), b / a));
        }
    }
    m.extend(add);
}

// ------------------------------------------------------------------ read side

fn median_of(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn read_side(args: &Args, m: &mut Metrics) -> Result<()> {
    let n = args.read_events;
    let wl = Workload::new(args.seed, 1);
    let name = wl.name(0).to_string();
    let events: Vec<(u16, Vec<u8>)> = (0..n).map(|q| typed_event(&wl, 0, q).encode()).collect();
    let payload: u64 = events.iter().map(|e| e.1.len() as u64).sum();
    let base = tempfile::Builder::new()
        .prefix("turnstone-read-")
        .tempdir_in(&args.base)?;
    // turnstone, default segments (the session sits in the active segment)
    // and 8 MiB segments (mostly sealed, read through the map).
    let mut ts = Vec::new();
    for (label, seg) in [("active", 64u32 << 20), ("sealed", 8 << 20)] {
        let dir = base.path().join(label);
        let opts = || Options {
            segment_bytes: seg,
            ..Options::default()
        };
        let store = Store::open_with(&dir, opts())?;
        for (k, p) in &events {
            store.append(&name, *k, 0, p)?;
        }
        store.close()?;
        let store = Store::open_with(&dir, opts())?;
        let got = store.read_range(&name, 0..n)?;
        if got.len() as u64 != n
            || got
                .iter()
                .zip(&events)
                .any(|(g, e)| g.kind != e.0 || g.payload != e.1)
        {
            return Err(format!("turnstone ({label}) read back different events").into());
        }
        drop(got);
        let mut t = Vec::new();
        for _ in 0..5 {
            let t0 = Instant::now();
            let got = store.read_range(&name, 0..n)?;
            t.push(t0.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(got);
        }
        // The same walk lending each payload (no copy per event).
        let mut tv = Vec::new();
        for _ in 0..5 {
            let t0 = Instant::now();
            let mut bytes = 0u64;
            let visited = store.visit_range(&name, 0..n, |e| {
                bytes +=
                    e.payload.len() as u64 + u64::from(e.payload.first().copied().unwrap_or(0));
                std::ops::ControlFlow::Continue(())
            })?;
            tv.push(t0.elapsed().as_secs_f64() * 1e3);
            if visited != n {
                return Err(format!("turnstone ({label}) visited {visited} of {n} events").into());
            }
            std::hint::black_box(bytes);
        }
        ts.push((label, median_of(t), median_of(tv)));
        store.close()?;
    }
    // Load + derive through the session layer, and derive after one append.
    let store = Arc::new(Store::open(base.path().join("active"))?);
    let reg = Arc::new(Registry::new());
    let mut t = Vec::new();
    let mut msgs = 0;
    for _ in 0..3 {
        let t0 = Instant::now();
        let mut s = Session::open_read_only(store.clone(), &name, reg.clone())?;
        msgs = s.derive_messages().len();
        t.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let open_derive_ms = median_of(t);
    let mut s = Session::open(store.clone(), &name, reg.clone())?;
    s.derive_messages();
    let mut inc = Vec::new();
    for i in 0..200u64 {
        let text = wl.text(i, 300).to_string();
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(text)],
            },
            SurfaceOp::Append,
        )?;
        let t0 = Instant::now();
        std::hint::black_box(s.derive_messages().len());
        inc.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let inc_us = median_of(inc);
    let mut rebuild = Vec::new();
    for i in 0..20 {
        let end = typed::compactable_prefix(&s, &wl, 0, n);
        s.compact(&format!("c{i}"), 0, end, "summary of the first turn")?;
        let t0 = Instant::now();
        std::hint::black_box(s.derive_messages().len());
        rebuild.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let replace_us = median_of(rebuild);
    drop(s);
    drop(store);

    // SQLite: the same events, one ordered select by (session, seq).
    let db = base.path().join("events.sqlite");
    {
        let mut conn = stores::sqlite_connect(&db)?;
        conn.execute_batch(stores::SQLITE_SCHEMA)?;
        let tx = conn.transaction()?;
        {
            let mut st =
                tx.prepare("INSERT INTO events(session, seq, kind, payload) VALUES (?1,?2,?3,?4)")?;
            for (q, (k, p)) in events.iter().enumerate() {
                st.execute(rusqlite::params![name, q as i64, *k as i64, p])?;
            }
        }
        tx.commit()?;
    }
    let conn = stores::sqlite_connect(&db)?;
    let mut t = Vec::new();
    for i in 0..6 {
        let t0 = Instant::now();
        let mut st = conn.prepare_cached(
            "SELECT seq, kind, payload FROM events WHERE session = ?1 ORDER BY seq",
        )?;
        let rows: Vec<(i64, i64, Vec<u8>)> = st
            .query_map([&name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<std::result::Result<_, _>>()?;
        let dt = t0.elapsed().as_secs_f64() * 1e3;
        if i == 0 {
            if rows.len() as u64 != n || rows.iter().zip(&events).any(|(r, e)| r.2 != e.1) {
                return Err("sqlite read back different events".into());
            }
        } else {
            t.push(dt);
        }
    }
    let sqlite_ms = median_of(t);
    let (active, visit_active) = (ts[0].1, ts[0].2);
    let (sealed, visit_sealed) = (ts[1].1, ts[1].2);
    m.insert("read/events".into(), n as f64);
    m.insert("read/payload_mb".into(), payload as f64 / 1e6);
    m.insert("read/turnstone_load_active_ms".into(), active);
    m.insert("read/turnstone_load_sealed_ms".into(), sealed);
    m.insert("read/turnstone_visit_active_ms".into(), visit_active);
    m.insert("read/turnstone_visit_sealed_ms".into(), visit_sealed);
    m.insert("read/turnstone_open_derive_ms".into(), open_derive_ms);
    m.insert("read/sqlite_select_ms".into(), sqlite_ms);
    m.insert("read/ratio_sqlite_over_active".into(), sqlite_ms / active);
    m.insert("read/ratio_sqlite_over_sealed".into(), sqlite_ms / sealed);
    m.insert(
        "read/ratio_sqlite_over_visit_active".into(),
        sqlite_ms / visit_active,
    );
    m.insert(
        "read/ratio_sqlite_over_visit_sealed".into(),
        sqlite_ms / visit_sealed,
    );
    m.insert("read/messages".into(), msgs as f64);
    m.insert("read/derive_after_append_us".into(), inc_us);
    m.insert("read/derive_after_replace_us".into(), replace_us);
    m.insert(
        "read/ratio_full_rebuild_over_incremental".into(),
        open_derive_ms * 1e3 / inc_us.max(1e-3),
    );
    println!(
        "read side ({n} events, {:.0} MB): turnstone load {active:.1} ms (active segment) / \
         {sealed:.1} ms (sealed), visit {visit_active:.1} / {visit_sealed:.1} ms; sqlite select {sqlite_ms:.1} ms; \
         Session::open+derive {open_derive_ms:.0} ms ({msgs} messages); derive after one append {inc_us:.2} µs, \
         after a replace {replace_us:.0} µs",
        payload as f64 / 1e6
    );
    Ok(())
}

// ------------------------------------------------------------------ reopen

fn reopen_big(args: &Args, m: &mut Metrics) -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("turnstone-reopen-")
        .tempdir_in(&args.base)?;
    let target = args.reopen_mb << 20;
    let wl = Workload::new(args.seed, 256);
    let store = Store::open(dir.path())?;
    let mut next = vec![0u64; 256];
    let mut buf = Vec::new();
    let mut log_bytes = 0u64;
    let mut events = 0u64;
    let t_build = Instant::now();
    'fill: loop {
        for s in 0..256u32 {
            let seq = next[s as usize];
            wl.payload_into(s, seq, &mut buf);
            store.append(wl.name(s), wl.kind(s, seq).code(), 0, &buf)?;
            next[s as usize] += 1;
            events += 1;
            log_bytes += turnstone::frame::frame_padded_len(buf.len()) as u64;
            if log_bytes >= target {
                break 'fill;
            }
        }
    }
    store.close()?;
    let build_s = t_build.elapsed().as_secs_f64();
    let mut with = Vec::new();
    for i in 0..5 {
        let t0 = Instant::now();
        let st = Store::open(dir.path())?;
        with.push(t0.elapsed().as_secs_f64() * 1e3);
        if i == 0 && !st.recovery_report().checkpoint_used {
            return Err("reopen did not use the index checkpoint".into());
        }
        st.close()?;
    }
    let mut without = Vec::new();
    let mut scanned = 0;
    for _ in 0..3 {
        let opts = Options {
            checkpoints: false,
            ..Options::default()
        };
        let t0 = Instant::now();
        let st = Store::open_with(dir.path(), opts)?;
        without.push(t0.elapsed().as_secs_f64() * 1e3);
        scanned = st.recovery_report().bytes_scanned;
        st.close()?;
    }
    let with = median_of(with);
    let without = median_of(without);
    let scan_bytes = scanned.max(log_bytes);
    m.insert("reopen/log_mb".into(), log_bytes as f64 / 1e6);
    m.insert("reopen/events".into(), events as f64);
    m.insert("reopen/with_checkpoint_ms".into(), with);
    m.insert("reopen/without_checkpoint_ms".into(), without);
    m.insert(
        "reopen/scan_gb_s".into(),
        scan_bytes as f64 / 1e9 / (without / 1e3),
    );
    m.insert("reopen/build_mb_s".into(), log_bytes as f64 / 1e6 / build_s);
    println!(
        "reopen of a {:.0} MB store ({events} events): {with:.1} ms with the index checkpoint, \
         {without:.0} ms without (full scan {:.2} GB/s)",
        log_bytes as f64 / 1e6,
        scan_bytes as f64 / 1e9 / (without / 1e3),
    );
    Ok(())
}

// ------------------------------------------------------------------ RSS

const RSS_STORES: [&str; 6] = [
    "baseline",
    "turnstone",
    "turnstone-sessions",
    "sqlite-wal",
    "jsonl-per-session",
    "okaywal",
];

fn rss(args: &Args, m: &mut Metrics) -> Result<()> {
    let exe = std::env::current_exe()?;
    let mut line = Vec::new();
    for store in RSS_STORES {
        let dir = tempfile::Builder::new()
            .prefix("turnstone-rss-")
            .tempdir_in(&args.base)?;
        let out = Command::new(&exe)
            .args(["--rss-child", store, "--dir"])
            .arg(dir.path())
            .args([
                "--sessions",
                &args.rss_sessions.to_string(),
                "--seed",
                &args.seed.to_string(),
            ])
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "rss child {store}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        let v: Value = serde_json::from_slice(&out.stdout)?;
        let hwm = v["hwm_kib"].as_f64().unwrap_or(0.0) / 1024.0;
        let end = v["rss_kib"].as_f64().unwrap_or(0.0) / 1024.0;
        m.insert(format!("rss/{store}/peak_mib"), hwm);
        m.insert(format!("rss/{store}/end_mib"), end);
        line.push(format!("{store} {hwm:.1}"));
    }
    println!(
        "peak RSS (MiB) with {} open sessions: {}",
        args.rss_sessions,
        line.join(", ")
    );
    Ok(())
}

/// Child process: open `--sessions` sessions (one turn each) in one store and
/// keep them open; print the peak RSS.
fn rss_child(argv: &[String]) -> Result<()> {
    sys::raise_nofile();
    let store = argv.first().ok_or("store")?.clone();
    let mut dir = None;
    let mut sessions = 10_000usize;
    let mut seed = 1;
    let mut it = argv[1..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dir" => dir = it.next().map(PathBuf::from),
            "--sessions" => sessions = it.next().ok_or("n")?.parse()?,
            "--seed" => seed = it.next().ok_or("n")?.parse()?,
            _ => return Err(format!("unknown argument {a}").into()),
        }
    }
    let dir = dir.ok_or("--dir")?;
    let wl = Workload::new(seed, sessions);
    let turn = turnstone_benches::workload::TURN_LEN;
    let mut buf = Vec::new();
    // Whatever holds the sessions open stays alive until the RSS is read.
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    match store.as_str() {
        "baseline" => {}
        "turnstone" => {
            let st = Store::open(&dir)?;
            for s in 0..sessions as u32 {
                for q in 0..turn {
                    wl.payload_into(s, q, &mut buf);
                    st.append(wl.name(s), wl.kind(s, q).code(), 0, &buf)?;
                }
                if s % 64 == 63 {
                    st.sync()?;
                }
            }
            st.sync()?;
            keep.push(Box::new(st));
        }
        "turnstone-sessions" => {
            let st = Arc::new(Store::open(&dir)?);
            let reg = Arc::new(Registry::new());
            let mut live = Vec::with_capacity(sessions);
            for s in 0..sessions as u32 {
                let mut sess = Session::create(st.clone(), wl.name(s), reg.clone())?;
                for q in 0..turn {
                    typed_event(&wl, s, q).append_to(&mut sess)?;
                }
                sess.derive_messages();
                live.push(sess);
                if s % 64 == 63 {
                    st.sync()?;
                }
            }
            st.sync()?;
            keep.push(Box::new(live));
            keep.push(Box::new(st));
        }
        "sqlite-wal" => {
            let mut conn = stores::sqlite_connect(&dir.join("events.sqlite"))?;
            conn.execute_batch(stores::SQLITE_SCHEMA)?;
            for chunk in (0..sessions as u32).collect::<Vec<_>>().chunks(64) {
                let tx = conn.transaction()?;
                {
                    let mut stmt = tx.prepare_cached(
                        "INSERT INTO events(session, seq, kind, payload) VALUES (?1,?2,?3,?4)",
                    )?;
                    for &s in chunk {
                        for q in 0..turn {
                            wl.payload_into(s, q, &mut buf);
                            stmt.execute(rusqlite::params![
                                wl.name(s),
                                q as i64,
                                wl.kind(s, q).code() as i64,
                                &buf
                            ])?;
                        }
                    }
                }
                tx.commit()?;
            }
            keep.push(Box::new(conn));
        }
        "jsonl-per-session" => {
            let mut files = Vec::with_capacity(sessions);
            for s in 0..sessions as u32 {
                let f = File::create(dir.join(format!("{}.jsonl", wl.name(s))))?;
                let mut w = std::io::BufWriter::new(f);
                for q in 0..turn {
                    wl.payload_into(s, q, &mut buf);
                    write!(
                        w,
                        "{{\"seq\":{q},\"kind\":\"{}\",\"payload\":",
                        wl.kind(s, q).name()
                    )?;
                    serde_json::to_writer(&mut w, std::str::from_utf8(&buf)?)?;
                    w.write_all(b"}\n")?;
                }
                w.flush()?;
                if s % 64 == 63 {
                    w.get_ref().sync_all()?;
                }
                files.push(w);
            }
            keep.push(Box::new(files));
        }
        "okaywal" => {
            let wal = okaywal::Configuration::default_for(&dir)
                .preallocate_bytes(64 << 20)
                .checkpoint_after_bytes(u64::MAX)
                .open(okaywal::LogVoid)?;
            for chunk in (0..sessions as u32).collect::<Vec<_>>().chunks(64) {
                let mut e = wal.begin_entry()?;
                for &s in chunk {
                    for q in 0..turn {
                        wl.payload_into(s, q, &mut buf);
                        let mut frame = Vec::new();
                        stores::encode_raw(&mut frame, 1, s, q, wl.kind(s, q).code(), &buf, false);
                        e.write_chunk(&frame)?;
                    }
                }
                e.commit()?;
            }
            keep.push(Box::new(wal));
        }
        other => return Err(format!("unknown store {other}").into()),
    }
    let out = json!({
        "store": store,
        "sessions": sessions,
        "hwm_kib": sys::proc_status_kib("VmHWM"),
        "rss_kib": sys::proc_status_kib("VmRSS"),
    });
    println!("{out}");
    drop(keep);
    Ok(())
}

// ------------------------------------------------------------------ summary

/// key → (median, min, max) over runs.
type Summary = BTreeMap<String, (f64, f64, f64)>;

fn summarize(runs: &[Metrics]) -> Summary {
    let mut all: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in runs {
        for (k, v) in r {
            all.entry(k.clone()).or_default().push(*v);
        }
    }
    all.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.total_cmp(b));
            let med = v[v.len() / 2];
            (k, (med, v[0], v[v.len() - 1]))
        })
        .collect()
}

/// Compact number: 3 significant digits, k/M suffixes.
fn num(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn with_range(s: &Summary, k: &str, runs: usize) -> String {
    match s.get(k) {
        None => "n/a".into(),
        Some((med, lo, hi)) if runs > 1 => format!("{} ({}–{})", num(*med), num(*lo), num(*hi)),
        Some((med, _, _)) => num(*med),
    }
}

fn med(s: &Summary, k: &str) -> Option<f64> {
    s.get(k).map(|v| v.0)
}

fn cell(s: &Summary, k: &str, scale: f64) -> String {
    med(s, k)
        .map(|v| num(v * scale))
        .unwrap_or_else(|| "n/a".into())
}

fn render(args: &Args, machine: &Value, s: &Summary, failures: &[String]) -> String {
    let mut o = String::new();
    let runs = args.runs;
    let w = |o: &mut String, line: String| {
        o.push_str(&line);
        o.push('\n');
    };
    w(&mut o, format!("Machine: {}", machine_line(machine)));
    w(
        &mut o,
        format!(
            "Numbers are medians of {runs} run(s){}; fleet runs last {:.1} s each.",
            if runs > 1 {
                ", (min–max) in brackets"
            } else {
                ""
            },
            args.duration.as_secs_f64()
        ),
    );
    if s.contains_key("limit/seq_bw_mb_s") {
        w(&mut o, String::new());
        w(&mut o, "### Disk limits".into());
        w(&mut o, String::new());
        w(&mut o, "| probe | value |".into());
        w(&mut o, "|---|---|".into());
        for (label, k, scale, unit) in [
            (
                "4 KiB write + fdatasync, p50 (overwrite / append)",
                "limit/probe4k_overwrite_p50_us",
                1e-3,
                "ms",
            ),
            (
                "4 KiB write + fdatasync, p99 (overwrite)",
                "limit/probe4k_overwrite_p99_us",
                1e-3,
                "ms",
            ),
            (
                "4 KiB write + fdatasync while every CPU spins, p50 / p99 (overwrite)",
                "limit/probe4k_busy_p50_us",
                1e-3,
                "ms",
            ),
            (
                "sequential durable write, 8 MiB + fdatasync (overwrite)",
                "limit/seq_bw_overwrite_mb_s",
                1.0,
                "MB/s",
            ),
            (
                "sequential durable write, 8 MiB + fdatasync (append)",
                "limit/seq_bw_append_mb_s",
                1.0,
                "MB/s",
            ),
            (
                "background device writes by other processes",
                "limit/background_device_mb_s",
                1.0,
                "MB/s",
            ),
        ] {
            let mut v = format!("{} {unit}", cell(s, k, scale));
            if k == "limit/probe4k_busy_p50_us" {
                v = format!(
                    "{} / {} {unit}",
                    cell(s, k, scale),
                    cell(s, "limit/probe4k_busy_p99_us", scale)
                );
            }
            if k == "limit/probe4k_overwrite_p50_us" {
                v = format!(
                    "{} / {} {unit}",
                    cell(s, k, scale),
                    cell(s, "limit/probe4k_append_p50_us", scale)
                );
            }
            w(&mut o, format!("| {label} | {v} |"));
        }
    }
    for &(sessions, threads) in &args.configs {
        let c = cfg_key(sessions, threads);
        if !s.contains_key(&format!("fleet/{c}/turnstone/events_per_s")) {
            continue;
        }
        w(&mut o, String::new());
        w(
            &mut o,
            format!("### Fleet: {sessions} sessions × {threads} writer threads"),
        );
        if let Some(bg) = med(s, &format!("fleet/{c}/background_device_mb_s")) {
            w(
                &mut o,
                format!("Other processes wrote {} MB/s to the device just before this configuration (it counts in \"device B\").", num(bg)),
            );
        }
        w(&mut o, String::new());
        w(&mut o, "| store | durable events/s | turnstone ÷ store | payload MB/s | waits/s | wait p50 / p99 / p999 ms | device B / payload B | CPU µs/event | events/sync | reopen ms | read-back |".into());
        w(
            &mut o,
            "|---|---|---|---|---|---|---|---|---|---|---|".into(),
        );
        for k in &args.stores {
            let p = format!("fleet/{c}/{}/", k.name());
            if !s.contains_key(&format!("{p}events_per_s")) {
                continue;
            }
            let ok = s
                .get(&format!("{p}readback_ok"))
                .map(|v| v.1 >= 1.0)
                .unwrap_or(false);
            let exceeded = s.contains_key(&format!("{p}prealloc_exceeded"));
            w(
                &mut o,
                format!(
                    "| {}{} | {} | {} | {} | {} | {} / {} / {} | {} | {} | {} | {} | {} |",
                    k.name(),
                    if exceeded { " (ran past prealloc)" } else { "" },
                    with_range(s, &format!("{p}events_per_s"), runs),
                    with_range(s, &format!("ratio/{c}/{}", k.name()), runs),
                    cell(s, &format!("{p}payload_mb_per_s"), 1.0),
                    cell(s, &format!("{p}waits_per_s"), 1.0),
                    cell(s, &format!("{p}wait_p50_us"), 1e-3),
                    cell(s, &format!("{p}wait_p99_us"), 1e-3),
                    cell(s, &format!("{p}wait_p999_us"), 1e-3),
                    cell(s, &format!("{p}device_bytes_per_payload_byte"), 1.0),
                    cell(s, &format!("{p}cpu_us_per_event"), 1.0),
                    cell(s, &format!("{p}events_per_sync"), 1.0),
                    cell(s, &format!("{p}reopen_ms"), 1.0),
                    if ok { "ok" } else { "FAILED" }
                ),
            );
        }
    }
    if s.contains_key("read/sqlite_select_ms") {
        w(&mut o, String::new());
        w(
            &mut o,
            format!(
                "### Read side: one session of {} events ({} MB payload), warm page cache",
                num(med(s, "read/events").unwrap_or(0.0)),
                num(med(s, "read/payload_mb").unwrap_or(0.0))
            ),
        );
        w(&mut o, String::new());
        w(
            &mut o,
            "| operation | time | sqlite select time ÷ this |".into(),
        );
        w(&mut o, "|---|---|---|".into());
        let sq = med(s, "read/sqlite_select_ms").unwrap_or(f64::NAN);
        for (label, k) in [
            (
                "turnstone `read_range(0..n)`, session in the active segment",
                "read/turnstone_load_active_ms",
            ),
            (
                "turnstone `read_range(0..n)`, session in sealed segments (mmap)",
                "read/turnstone_load_sealed_ms",
            ),
            (
                "turnstone `visit_range(0..n)` (payloads lent, not copied), active segment",
                "read/turnstone_visit_active_ms",
            ),
            (
                "turnstone `visit_range(0..n)`, sealed segments",
                "read/turnstone_visit_sealed_ms",
            ),
            (
                "turnstone `Session::open` + `derive_messages` (full rebuild)",
                "read/turnstone_open_derive_ms",
            ),
            (
                "sqlite-wal `SELECT … WHERE session=? ORDER BY seq`",
                "read/sqlite_select_ms",
            ),
        ] {
            let v = med(s, k).unwrap_or(f64::NAN);
            w(
                &mut o,
                format!(
                    "| {label} | {} ms | {} |",
                    with_range(s, k, runs),
                    if k == "read/sqlite_select_ms" {
                        "1.00".into()
                    } else {
                        format!("{}×", num(sq / v))
                    }
                ),
            );
        }
        w(
            &mut o,
            format!(
                "| `derive_messages` after one append (incremental) | {} µs | |",
                with_range(s, "read/derive_after_append_us", runs)
            ),
        );
        w(
            &mut o,
            format!(
                "| `derive_messages` after a replace (list rebuilt from the cache) | {} µs | |",
                with_range(s, "read/derive_after_replace_us", runs)
            ),
        );
        w(
            &mut o,
            format!(
                "Full rebuild (open + derive) ÷ incremental derive: {}×.",
                with_range(s, "read/ratio_full_rebuild_over_incremental", runs)
            ),
        );
    }
    if s.contains_key("reopen/with_checkpoint_ms") {
        w(&mut o, String::new());
        w(
            &mut o,
            format!(
                "### Reopen of a {} MB store ({} events, 256 sessions), warm page cache",
                num(med(s, "reopen/log_mb").unwrap_or(0.0)),
                num(med(s, "reopen/events").unwrap_or(0.0))
            ),
        );
        w(&mut o, String::new());
        w(&mut o, "| reopen | time |".into());
        w(&mut o, "|---|---|".into());
        w(
            &mut o,
            format!(
                "| with a fresh index checkpoint | {} ms |",
                with_range(s, "reopen/with_checkpoint_ms", runs)
            ),
        );
        w(
            &mut o,
            format!(
                "| without (full recovery scan) | {} ms ({} GB/s) |",
                with_range(s, "reopen/without_checkpoint_ms", runs),
                cell(s, "reopen/scan_gb_s", 1.0)
            ),
        );
    }
    if s.contains_key("rss/baseline/peak_mib") {
        w(&mut o, String::new());
        w(
            &mut o,
            format!(
                "### Peak RSS with {} open sessions (one turn, 24 events, each; a durability wait every 64 sessions)",
                args.rss_sessions
            ),
        );
        w(&mut o, String::new());
        w(
            &mut o,
            "| store | peak RSS MiB | above an idle process | RSS at the end MiB |".into(),
        );
        w(&mut o, "|---|---|---|---|".into());
        let base = med(s, "rss/baseline/peak_mib").unwrap_or(0.0);
        for st in RSS_STORES {
            if let Some(v) = med(s, &format!("rss/{st}/peak_mib")) {
                w(
                    &mut o,
                    format!(
                        "| {st} | {} | {} | {} |",
                        num(v),
                        num(v - base),
                        cell(s, &format!("rss/{st}/end_mib"), 1.0)
                    ),
                );
            }
        }
    }
    let targets = targets(s, runs);
    if !targets.is_empty() {
        w(&mut o, String::new());
        w(&mut o, "### Targets (issues 2, 8, 16, 17 and 21)".into());
        w(&mut o, String::new());
        w(&mut o, "| target | measured | verdict |".into());
        w(&mut o, "|---|---|---|".into());
        for t in targets {
            w(&mut o, t);
        }
    }
    if !failures.is_empty() {
        w(&mut o, String::new());
        w(&mut o, "READ-BACK FAILURES:".into());
        for f in failures {
            w(&mut o, format!("- {f}"));
        }
    }
    o
}

/// Run a sibling benchmark binary (built first if this build lacks it)
/// and return its last stdout line parsed as JSON.
fn sibling_json(name: &str, args: &[String]) -> Result<Value> {
    let exe = std::env::current_exe()?.with_file_name(name);
    if !exe.exists() {
        let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "build",
                "--release",
                "-p",
                "turnstone-benches",
                "--bin",
                name,
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()?;
        if !st.success() {
            return Err(format!("building {name} failed").into());
        }
    }
    let out = Command::new(&exe).args(args).output()?;
    if !out.status.success() {
        return Err(format!("{name} failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    Ok(serde_json::from_str(last)?)
}

/// Storage lifecycle (issue 17 §1): `gc_fleet`, a fleet with deletions
/// writing 12x its live data, one store collected in the background while
/// it is written and one never collected, in the same run.
fn lifecycle(args: &Args, m: &mut Metrics) -> Result<()> {
    // 32 MiB live (4 rounds kept), 12x that written: the active segment
    // (8 MiB, preallocated, never collected) is a fixed cost, a quarter of
    // the live bytes here (with 2 rounds kept it is half of them, and the
    // ratio 1.503x; docs/STORAGE-LIFECYCLE.md).
    let mut a: Vec<String> = [
        "--gc-rate-mib",
        "256",
        "--rounds",
        "48",
        "--keep-rounds",
        "4",
    ]
    .map(String::from)
    .to_vec();
    if args.quick {
        a.extend(["--sessions", "16", "--events", "32"].map(String::from));
    }
    print!("lifecycle (gc_fleet {}) … ", a.join(" "));
    std::io::stdout().flush()?;
    let v = sibling_json("gc_fleet", &a)?;
    let f = |path: &[&str]| -> Option<f64> {
        let mut x = &v;
        for p in path {
            x = x.get(p)?;
        }
        x.as_f64()
    };
    let mut put = |k: &str, x: Option<f64>| {
        if let Some(x) = x {
            m.insert(format!("gc/{k}"), x);
        }
    };
    put("online/disk_over_live", f(&["online", "disk_over_live"]));
    put(
        "online/settled_disk_over_live",
        f(&["online", "settled_disk_over_live"]),
    );
    put(
        "online/peak_disk_over_live",
        f(&["online", "peak_disk_over_live"]),
    );
    put("never/disk_over_live", f(&["never", "disk_over_live"]));
    put("online/events_per_s", f(&["online", "events_per_s_median"]));
    put("never/events_per_s", f(&["never", "events_per_s_median"]));
    put("online/wait_p99_us", f(&["online", "wait_p99_us"]));
    put("never/wait_p99_us", f(&["never", "wait_p99_us"]));
    put("online/io_mib_s", f(&["online", "gc_io_mib_per_s_median"]));
    put(
        "online/freed_mib_s",
        f(&["online", "gc_freed_mib_per_s_median"]),
    );
    put("written_over_live", f(&["written_over_live"]));
    if let (Some(a), Some(b)) = (
        f(&["online", "events_per_s_median"]),
        f(&["never", "events_per_s_median"]),
    ) {
        put("online_over_never_events", Some(a / b));
    }
    println!(
        "disk/live {:.3} settled, {:.3} right after the last round (never {:.2}), events/s online/never {:.2}, p99 {:.1} / {:.1} ms",
        f(&["online", "settled_disk_over_live"]).unwrap_or(f64::NAN),
        f(&["online", "disk_over_live"]).unwrap_or(f64::NAN),
        f(&["never", "disk_over_live"]).unwrap_or(f64::NAN),
        m.get("gc/online_over_never_events")
            .copied()
            .unwrap_or(f64::NAN),
        f(&["online", "wait_p99_us"]).unwrap_or(f64::NAN) / 1e3,
        f(&["never", "wait_p99_us"]).unwrap_or(f64::NAN) / 1e3,
    );
    Ok(())
}

/// Cold reads (issue 21): `cold_reads`, one session of a fleet store
/// regrouped in the background while written, loaded with the page cache
/// dropped, against SQLite holding the same events.
fn cold(args: &Args, m: &mut Metrics) -> Result<()> {
    let mb = if args.quick { 64 } else { 300 };
    let a: Vec<String> = [
        "--mb",
        &mb.to_string(),
        "--runs",
        "3",
        "--background-regroup",
        "--json",
        "--dir",
        &args.base.to_string_lossy(),
    ]
    .map(String::from)
    .to_vec();
    print!("cold reads (cold_reads {}) … ", a.join(" "));
    std::io::stdout().flush()?;
    let v = sibling_json("cold_reads", &a)?;
    for k in [
        "turnstone_cold_ms",
        "sqlite_cold_ms",
        "turnstone_over_sqlite_ms",
        "read_over_session_bytes",
        "mb",
    ] {
        if let Some(x) = v.get(k).and_then(Value::as_f64) {
            m.insert(format!("cold/{k}"), x);
        }
    }
    println!(
        "turnstone {:.1} ms, sqlite {:.1} ms, read {:.2}x the session's bytes",
        m.get("cold/turnstone_cold_ms").copied().unwrap_or(f64::NAN),
        m.get("cold/sqlite_cold_ms").copied().unwrap_or(f64::NAN),
        m.get("cold/read_over_session_bytes")
            .copied()
            .unwrap_or(f64::NAN),
    );
    Ok(())
}

/// `Session::open` of a long session from its state snapshot (FORMAT.md
/// §17), and the fold from seq 0 it replaces (issue 21).
fn session_open(args: &Args, m: &mut Metrics) -> Result<()> {
    let n: u64 = if args.quick { 20_000 } else { 100_000 };
    let dir = tempfile::Builder::new()
        .prefix("turnstone-open-")
        .tempdir_in(&args.base)?;
    let store = Arc::new(Store::open(dir.path())?);
    let wl = Workload::new(args.seed, 1);
    turnstone_benches::typed::fill_session(&store, "s", &wl, 0, n)?;
    let reg = || Arc::new(Registry::new());
    // A writable open folds from seq 0; its close writes the snapshot.
    Session::open(store.clone(), "s", reg())?.close()?;
    // Each open cold: the page cache dropped first (and the store's
    // cached segment maps: a fresh handle per open).
    drop(store);
    let mut from_snapshot = Vec::new();
    let mut method = "";
    for _ in 0..9 {
        method = sys::drop_page_cache(dir.path())?;
        let t = Instant::now();
        let store = Arc::new(Store::open(dir.path())?);
        let opened = t.elapsed();
        let t = Instant::now();
        let s = Session::open(store.clone(), "s", reg())?;
        from_snapshot.push(t.elapsed().as_secs_f64() * 1e3);
        m.insert("session/store_open_ms".into(), opened.as_secs_f64() * 1e3);
        drop(s);
    }
    let store = Arc::new(Store::open(dir.path())?);
    // The fold from seq 0 (read-only: it writes no snapshot).
    let snap = turnstone::session::internals::state_snapshot_path(dir.path(), "s");
    std::fs::remove_file(&snap)?;
    let mut fold = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let s = Session::open_read_only(store.clone(), "s", reg())?;
        fold.push(t.elapsed().as_secs_f64() * 1e3);
        drop(s);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (median(&mut from_snapshot), median(&mut fold));
    m.insert("session/events".into(), n as f64);
    m.insert("session/open_from_snapshot_ms".into(), a);
    m.insert("session/open_fold_ms".into(), b);
    println!(
        "Session::open of {n} events, page cache dropped ({method}): {a:.3} ms from its snapshot, {b:.1} ms folded from seq 0 (warm)"
    );
    Ok(())
}

/// A writable reopen of a fleet store by `turnstone fleet --events 100`
/// (issue 21): wall time and the process's peak RSS (`wait4`'s
/// `ru_maxrss`). The store is built by `turnstone fleet` first (1 GiB of
/// payload, 256 sessions; 90 MB in `--quick`).
fn lazy_reopen(args: &Args, m: &mut Metrics) -> Result<()> {
    let exe = std::env::current_exe()?.with_file_name("turnstone");
    if !exe.exists() {
        let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "-p", "turnstone-cli"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()?;
        if !st.success() {
            return Err("building the turnstone CLI failed".into());
        }
    }
    let dir = tempfile::Builder::new()
        .prefix("turnstone-lazy-")
        .tempdir_in(&args.base)?;
    let store = dir.path().join("fleet");
    let events: u64 = if args.quick { 200_000 } else { 2_400_000 };
    let fleet = |events: u64| -> Result<(f64, f64)> {
        let child = Command::new(&exe)
            .arg("fleet")
            .arg(&store)
            .args(["--sessions", "256", "--threads", "8", "--events"])
            .arg(events.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let t = Instant::now();
        let mut status = 0;
        // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child by pid, writing into our locals;
        // `Child` is not waited on afterwards.
        let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
        let wall = t.elapsed().as_secs_f64();
        if r < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            return Err(
                format!("turnstone fleet --events {events} failed (status {status})").into(),
            );
        }
        Ok((wall, ru.ru_maxrss as f64 / 1024.0))
    };
    print!("lazy reopen: building a {events}-event fleet store … ");
    std::io::stdout().flush()?;
    let (build_s, _) = fleet(events)?;
    let bytes: u64 = std::fs::read_dir(&store)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tseg"))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    let mut walls = Vec::new();
    let mut rss = Vec::new();
    let mut method = "";
    for _ in 0..3 {
        method = sys::drop_page_cache(&store)?;
        let (w, r) = fleet(100)?;
        walls.push(w);
        rss.push(r);
    }
    walls.sort_by(f64::total_cmp);
    rss.sort_by(f64::total_cmp);
    m.insert("lazy/store_mb".into(), bytes as f64 / 1e6);
    m.insert("lazy/reopen_wall_s".into(), walls[1]);
    m.insert("lazy/reopen_peak_rss_mb".into(), rss[1]);
    println!(
        "{:.0} MB in {build_s:.0} s; fleet --events 100 on it, page cache dropped ({method}): {:.2} s, peak RSS {:.0} MB (medians of 3)",
        bytes as f64 / 1e6,
        walls[1],
        rss[1]
    );
    Ok(())
}

/// The targets, as table rows: `| target | measured | verdict |`.
fn targets(s: &Summary, runs: usize) -> Vec<String> {
    let mut out = Vec::new();
    // (label, measured, goal, higher_is_better, measured text)
    let mut check = |label: &str, v: Option<f64>, goal: f64, higher: bool, text: String| {
        let Some(v) = v else { return };
        let met = if higher { v >= goal } else { v <= goal };
        let verdict = if met {
            "met".to_string()
        } else if higher {
            format!("missed: {:.0}% of the goal", v / goal * 100.0)
        } else {
            format!("missed: {:.3}× the limit", v / goal)
        };
        out.push(format!("| {label} | {text} | {verdict} |"));
    };
    let c = "256x8";
    for (peer, goal) in [
        ("sqlite-wal", 8.0),
        ("jsonl-per-session", 3.0),
        ("okaywal", 2.0),
        ("raw-prealloc", 1.2),
    ] {
        let k = format!("ratio/{c}/{peer}");
        check(
            &format!("durable events/s ≥ {goal}× {peer} (256 sessions × 8 threads)"),
            med(s, &k),
            goal,
            true,
            format!("{}×", with_range(s, &k, runs)),
        );
    }
    for sessions in [256, 4096] {
        let k = format!("scale/{sessions}/64_over_1");
        check(
            &format!("64 threads ≥ 10× the throughput of 1 thread ({sessions} sessions)"),
            med(s, &k),
            10.0,
            true,
            format!("{}×", with_range(s, &k, runs)),
        );
    }
    if let (Some(mb), Some(bw)) = (
        med(s, "fleet/256x64/turnstone/payload_mb_per_s"),
        med(s, "limit/seq_bw_mb_s"),
    ) {
        check(
            "64 threads: payload MB/s ≥ 60% of sequential durable bandwidth (256 sessions)",
            Some(mb / bw),
            0.6,
            true,
            format!("{} of {} MB/s = {:.0}%", num(mb), num(bw), mb / bw * 100.0),
        );
    }
    for c in ["256x8", "256x64"] {
        let k = format!("session_share/{c}");
        check(
            &format!(
                "session layer (turnstone-session) ≥ 80% of the raw store's durable events/s ({c})"
            ),
            med(s, &k),
            0.8,
            true,
            format!("{}×", with_range(s, &k, runs)),
        );
        let k = format!("fleet/{c}/turnstone-session/cpu_us_per_event");
        check(
            &format!("session layer: ≤ 3 µs of CPU per event, whole process ({c})"),
            med(s, &k),
            3.0,
            false,
            format!("{} µs", with_range(s, &k, runs)),
        );
    }
    let k = format!("fleet/{c}/turnstone/device_bytes_per_payload_byte");
    check(
        "device bytes written ≤ 1.3× payload bytes (256 × 8)",
        med(s, &k),
        1.3,
        false,
        format!("{}×", with_range(s, &k, runs)),
    );
    let k = format!("fleet/{c}/turnstone-recycled/device_bytes_per_payload_byte");
    check(
        "device bytes written ≤ 1.3× payload bytes, steady state with recycled segments (turnstone-recycled, 256 × 8)",
        med(s, &k),
        1.3,
        false,
        format!("{}×", with_range(s, &k, runs)),
    );
    let k = format!("fleet/{c}/turnstone-direct/device_bytes_per_payload_byte");
    check(
        "device bytes written ≤ 1.3× payload bytes, recycled segments written around the page cache (turnstone-direct, Options::direct_writes, 256 × 8)",
        med(s, &k),
        1.3,
        false,
        format!("{}×", with_range(s, &k, runs)),
    );
    if let Some(mb) = med(s, "reopen/log_mb") {
        let k = "reopen/with_checkpoint_ms";
        check(
            &format!(
                "reopen ≤ 100 ms with a fresh index checkpoint ({} MB store)",
                num(mb)
            ),
            med(s, k),
            100.0,
            false,
            format!("{} ms", with_range(s, k, runs)),
        );
    }
    let k = "reopen/scan_gb_s";
    check(
        "full scan ≥ 1 GB/s from page cache",
        med(s, k),
        1.0,
        true,
        format!("{} GB/s", with_range(s, k, runs)),
    );
    for (label, k) in [
        ("active segment", "read/ratio_sqlite_over_active"),
        ("sealed segments", "read/ratio_sqlite_over_sealed"),
        (
            "visit_range, active segment",
            "read/ratio_sqlite_over_visit_active",
        ),
        (
            "visit_range, sealed segments",
            "read/ratio_sqlite_over_visit_sealed",
        ),
    ] {
        check(
            &format!(
                "load a 100k-event session ≥ 5× faster than sqlite's ordered select ({label})"
            ),
            med(s, k),
            5.0,
            true,
            format!("{}×", with_range(s, k, runs)),
        );
    }
    let k = "gc/online/settled_disk_over_live";
    check(
        "disk ≤ 1.5× live bytes, collected in the background while written (issue 17)",
        med(s, k),
        1.5,
        false,
        format!(
            "{}× once the collector has run, {}× right after the last deletions (never collected: {}×; foreground events/s {}× of never's)",
            with_range(s, k, runs),
            with_range(s, "gc/online/disk_over_live", runs),
            with_range(s, "gc/never/disk_over_live", runs),
            with_range(s, "gc/online_over_never_events", runs)
        ),
    );
    let k = "cold/read_over_session_bytes";
    check(
        "bytes read to load one session cold ≤ 4× its frame bytes (issue 21)",
        med(s, k),
        4.0,
        false,
        format!("{}×", with_range(s, k, runs)),
    );
    let k = "cold/turnstone_over_sqlite_ms";
    check(
        "cold load time ≤ 5× SQLite's for the same session (issue 21)",
        med(s, k),
        5.0,
        false,
        format!("{}×", with_range(s, k, runs)),
    );
    if let Some(n) = med(s, "session/events") {
        let k = "session/open_from_snapshot_ms";
        check(
            &format!(
                "Session::open of a {}-event session from its snapshot ≤ 5 ms (issue 21)",
                num(n)
            ),
            med(s, k),
            5.0,
            false,
            format!(
                "{} ms (fold from seq 0: {} ms)",
                with_range(s, k, runs),
                with_range(s, "session/open_fold_ms", runs)
            ),
        );
    }
    if let Some(mb) = med(s, "lazy/store_mb") {
        let k = "lazy/reopen_wall_s";
        check(
            &format!(
                "writable reopen of a {} MB fleet store by `fleet --events 100` ≤ 0.5 s (issue 21)",
                num(mb)
            ),
            med(s, k),
            0.5,
            false,
            format!("{} s", with_range(s, k, runs)),
        );
        let k = "lazy/reopen_peak_rss_mb";
        check(
            &format!("… and ≤ 300 MB peak RSS ({} MB store)", num(mb)),
            med(s, k),
            300.0,
            false,
            format!("{} MB", with_range(s, k, runs)),
        );
    }
    out
}
