//! Issue 17 §3: a session that re-sends one large image in every request.
//! Writes `--requests` requests (user/message with a text block and the
//! same base64 image of `--mb` MiB, then a short assistant/message) through
//! the session layer, once with blobs on (the default threshold, 256 KiB)
//! and once with blobs off (`--inline`), each in a fresh store in the same
//! run, and prints one JSON line per mode: bytes on disk (file lengths,
//! segments not preallocated; and allocated blocks), blob files, wall time
//! of the appends and the final flush, and peak RSS of the process so far.
//!
//! cargo run --release -p turnstone-benches --bin blob_resend -- --mb 5 --requests 200 --inline

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use turnstone::session::{
    AssistantMessage, ContentBlock, Registry, Session, SurfaceOp, UserMessage,
};
use turnstone::{Options, Store};

fn du(p: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut len, mut blocks) = (0, 0);
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        if m.is_dir() {
            let (a, b) = du(&e.path());
            len += a;
            blocks += b;
        } else {
            len += m.len();
            blocks += m.blocks() * 512;
        }
    }
    (len, blocks)
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn run(mb: usize, requests: usize, blobs: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        preallocate: false,
        ..Default::default()
    };
    let store = Arc::new(Store::open_with(tmp.path(), opts).unwrap());
    if !blobs {
        store.blobs().set_threshold(usize::MAX);
    }
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let data: String = (0..mb << 20)
        .map(|i| A[(i * 31 + i / 4099) % 64] as char)
        .collect();
    let image = ContentBlock::image_base64("image/png", data);
    let mut s = Session::create(store.clone(), "s", Arc::new(Registry::new())).unwrap();
    let t = Instant::now();
    for i in 0..requests {
        let r = s.append(
            UserMessage {
                content: vec![ContentBlock::text(format!("step {i}")), image.clone()],
            },
            SurfaceOp::Append,
        );
        if let Err(e) = r {
            println!(
                "{}",
                serde_json::json!({"mode": if blobs { "blobs" } else { "inline" }, "refused_at_request": i, "error": e.to_string()})
            );
            return;
        }
        s.append(
            AssistantMessage {
                content: vec![ContentBlock::text(format!("ok {i}"))],
                usage: None,
                stop_reason: None,
                extra: Default::default(),
            },
            SurfaceOp::Append,
        )
        .unwrap();
    }
    s.flush().unwrap();
    let secs = t.elapsed().as_secs_f64();
    drop(s);
    let blob_files = store.blobs().list().unwrap().len();
    Arc::try_unwrap(store).unwrap().close().unwrap();
    let (len, alloc) = du(tmp.path());
    println!(
        "{}",
        serde_json::json!({
            "mode": if blobs { "blobs" } else { "inline" },
            "image_bytes": mb << 20,
            "requests": requests,
            "disk_bytes": len,
            "allocated_bytes": alloc,
            "ratio_to_image": len as f64 / (mb << 20) as f64,
            "blob_files": blob_files,
            "append_and_flush_s": secs,
            "peak_rss_kb": peak_rss_kb(),
        })
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str, d: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1)?.parse().ok())
            .unwrap_or(d)
    };
    let (mb, requests) = (get("--mb", 5), get("--requests", 200));
    run(mb, requests, true);
    if args.iter().any(|a| a == "--inline") {
        run(mb, requests, false);
    }
}
