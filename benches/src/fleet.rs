//! The fleet run: T writer threads drive N sessions against one store for a
//! fixed time, then the store is closed, reopened and read back.
//!
//! Thread `t` owns the sessions `s` with `s % T == t` and visits them
//! round-robin, one event per visit; after the `tool/call` and after the
//! `tool/result` of a turn the agent waits for durability before the thread
//! moves on (an agent loop that blocks). So at most T waits are in flight at
//! any time, and a store can only go faster by serving many waits with one
//! sync.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::stores::{self, Ctx, PreallocFile, ReadBack, Result, StoreKind};
use crate::sys::{self, Device};
use crate::workload::Workload;

#[derive(Debug, Clone)]
pub struct FleetConfig {
    pub sessions: usize,
    pub threads: usize,
    pub duration: Duration,
    pub seed: u64,
}

/// What one store did on one configuration.
#[derive(Debug, Clone)]
pub struct FleetResult {
    pub store: StoreKind,
    pub sessions: usize,
    pub threads: usize,
    pub events: u64,
    pub payload_bytes: u64,
    pub waits: u64,
    pub elapsed: Duration,
    pub wait_p50_us: u64,
    pub wait_p99_us: u64,
    pub wait_p999_us: u64,
    pub device_bytes: Option<u64>,
    /// Bytes this process dirtied for storage during the run.
    pub process_bytes: Option<u64>,
    pub cpu: Duration,
    /// The user-mode part of `cpu`.
    pub cpu_user: Duration,
    pub syncs: Option<u64>,
    /// Index checkpoint bytes written during the run (not the one at
    /// close), where the store writes them; they are in `device_bytes`.
    pub checkpoint_bytes: Option<u64>,
    pub readback: ReadBack,
    /// The raw-prealloc log ran past its zero-filled file.
    pub prealloc_exceeded: bool,
}

impl FleetResult {
    pub fn events_per_s(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }
    pub fn mb_per_s(&self) -> f64 {
        self.payload_bytes as f64 / 1e6 / self.elapsed.as_secs_f64()
    }
    pub fn waits_per_s(&self) -> f64 {
        self.waits as f64 / self.elapsed.as_secs_f64()
    }
    pub fn device_per_payload(&self) -> Option<f64> {
        self.device_bytes
            .map(|d| d as f64 / self.payload_bytes.max(1) as f64)
    }
    pub fn process_per_payload(&self) -> Option<f64> {
        self.process_bytes
            .map(|d| d as f64 / self.payload_bytes.max(1) as f64)
    }
    pub fn events_per_sync(&self) -> Option<f64> {
        self.syncs.map(|s| self.events as f64 / s.max(1) as f64)
    }
    pub fn to_json(&self) -> Value {
        json!({
            "store": self.store.name(),
            "sessions": self.sessions,
            "threads": self.threads,
            "events": self.events,
            "payload_bytes": self.payload_bytes,
            "waits": self.waits,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "events_per_s": self.events_per_s(),
            "payload_mb_per_s": self.mb_per_s(),
            "waits_per_s": self.waits_per_s(),
            "wait_p50_us": self.wait_p50_us,
            "wait_p99_us": self.wait_p99_us,
            "wait_p999_us": self.wait_p999_us,
            "device_bytes": self.device_bytes,
            "device_bytes_per_payload_byte": self.device_per_payload(),
            "process_write_bytes": self.process_bytes,
            "process_write_bytes_per_payload_byte": self.process_per_payload(),
            "cpu_s": self.cpu.as_secs_f64(),
            "cpu_user_s": self.cpu_user.as_secs_f64(),
            "syncs": self.syncs,
            "events_per_sync": self.events_per_sync(),
            "checkpoint_bytes": self.checkpoint_bytes,
            "checkpoint_bytes_per_payload_byte": self
                .checkpoint_bytes
                .map(|c| c as f64 / self.payload_bytes.max(1) as f64),
            "reopen_ms": self.readback.reopen.as_secs_f64() * 1e3,
            "readback_ms": self.readback.read.as_secs_f64() * 1e3,
            "readback_events": self.readback.events,
            "readback_ok": self.readback.ok(),
            "readback_problems": self.readback.problems,
            "prealloc_exceeded": self.prealloc_exceeded,
        })
    }
}

struct ThreadOut {
    counts: Vec<(u32, u64)>,
    events: u64,
    bytes: u64,
    lat_us: Vec<u64>,
    done: Instant,
}

static NONCE: AtomicU64 = AtomicU64::new(1);

/// Run `cfg` against one store in a fresh directory under `base`.
pub fn run(
    kind: StoreKind,
    cfg: &FleetConfig,
    base: &Path,
    prealloc: Option<Arc<PreallocFile>>,
    device: Option<&Device>,
) -> Result<FleetResult> {
    let dir = tempfile::Builder::new()
        .prefix("turnstone-fleet-")
        .tempdir_in(base)?;
    let wl = Arc::new(Workload::new(cfg.seed, cfg.sessions));
    let nonce = sys::cpu_time().as_nanos() as u64 ^ NONCE.fetch_add(1, Ordering::SeqCst) << 48;
    let ctx = Ctx {
        wl: wl.clone(),
        dir: dir.path().to_path_buf(),
        prealloc: prealloc.clone(),
        nonce,
    };
    let store = stores::create(kind, &ctx)?;
    let threads = cfg.threads.max(1);
    let barrier = Barrier::new(threads + 1);
    let dev0 = device.and_then(Device::bytes_written);
    let io0 = sys::process_write_bytes();
    let (user0, system0) = sys::cpu_times();
    let (start, outs) = std::thread::scope(|scope| -> Result<(Instant, Vec<ThreadOut>)> {
        let mut handles = Vec::new();
        for t in 0..threads {
            let store = &*store;
            let wl = &*wl;
            let barrier = &barrier;
            let mine: Vec<u32> = (0..cfg.sessions as u32)
                .filter(|s| *s as usize % threads == t)
                .collect();
            let duration = cfg.duration;
            handles.push(scope.spawn(move || -> Result<ThreadOut> {
                let w = store.writer();
                barrier.wait();
                let mut w = w?;
                let deadline = Instant::now() + duration;
                let mut next = vec![0u64; mine.len()];
                let mut out = ThreadOut {
                    counts: Vec::new(),
                    events: 0,
                    bytes: 0,
                    lat_us: Vec::with_capacity(1 << 16),
                    done: Instant::now(),
                };
                let mut buf = Vec::with_capacity(70_000);
                let takes_payload = w.takes_payload();
                'run: loop {
                    if mine.is_empty() {
                        break;
                    }
                    for (i, &s) in mine.iter().enumerate() {
                        if Instant::now() >= deadline {
                            break 'run;
                        }
                        let seq = next[i];
                        let len = if takes_payload {
                            wl.payload_into(s, seq, &mut buf);
                            buf.len()
                        } else {
                            wl.payload_len(s, seq)
                        };
                        w.append(s, seq, wl.kind(s, seq), &buf)?;
                        next[i] += 1;
                        out.events += 1;
                        out.bytes += len as u64;
                        if wl.waits_after(s, seq) {
                            let t0 = Instant::now();
                            w.wait(s)?;
                            out.lat_us.push(t0.elapsed().as_micros() as u64);
                        }
                    }
                }
                w.finish()?;
                out.done = Instant::now();
                out.counts = mine.iter().copied().zip(next).collect();
                Ok(out)
            }));
        }
        barrier.wait();
        let start = Instant::now();
        let mut outs = Vec::new();
        for h in handles {
            outs.push(h.join().map_err(|_| "writer thread panicked")??);
        }
        Ok((start, outs))
    })?;
    let end = outs.iter().map(|o| o.done).max().unwrap_or(start);
    let syncs = store.syncs();
    let checkpoint_bytes = store.checkpoint_bytes();
    store.close()?;
    let (user1, system1) = sys::cpu_times();
    let cpu_user = user1.saturating_sub(user0);
    let cpu = cpu_user + system1.saturating_sub(system0);
    let dev1 = device.and_then(Device::bytes_written);
    let io1 = sys::process_write_bytes();
    let mut expected = vec![0u64; cfg.sessions];
    let mut lat = Vec::new();
    let (mut events, mut bytes) = (0, 0);
    for o in outs {
        for (s, n) in o.counts {
            expected[s as usize] = n;
        }
        events += o.events;
        bytes += o.bytes;
        lat.extend(o.lat_us);
    }
    lat.sort_unstable();
    let prealloc_exceeded = match (&prealloc, kind) {
        (Some(p), StoreKind::RawPrealloc) => {
            std::fs::metadata(&p.path).map(|m| m.len()).unwrap_or(0) > p.len
        }
        _ => false,
    };
    let readback = stores::reopen_and_check(kind, &ctx, &expected)?;
    Ok(FleetResult {
        store: kind,
        sessions: cfg.sessions,
        threads,
        events,
        payload_bytes: bytes,
        waits: lat.len() as u64,
        elapsed: end.duration_since(start),
        wait_p50_us: sys::percentile(&lat, 50.0),
        wait_p99_us: sys::percentile(&lat, 99.0),
        wait_p999_us: sys::percentile(&lat, 99.9),
        device_bytes: match (dev0, dev1) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        },
        process_bytes: match (io0, io1) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        },
        cpu,
        cpu_user,
        syncs,
        checkpoint_bytes,
        readback,
        prealloc_exceeded,
    })
}
