//! One fleet run of one store, nothing else in the process: for profiling
//! (`perf record`) a store's write path without the comparison's other
//! phases. Prints the run's JSON.
//!
//! ```sh
//! cargo run --release -p turnstone-benches --example fleet_one -- turnstone-session 256 8 3
//! ```
//! (store, sessions, threads, seconds).

use std::time::Duration;

use turnstone_benches::fleet::{self, FleetConfig};
use turnstone_benches::stores::StoreKind;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let kind = StoreKind::from_name(&arg(0, "turnstone-session"))
        .ok_or("unknown store (raw-prealloc is not available here)")?;
    let cfg = FleetConfig {
        sessions: arg(1, "256").parse()?,
        threads: arg(2, "8").parse()?,
        duration: Duration::from_secs_f64(arg(3, "3").parse()?),
        seed: 1,
    };
    let base = tempfile::tempdir()?;
    let r = fleet::run(kind, &cfg, base.path(), None, None)?;
    println!("{}", serde_json::to_string_pretty(&r.to_json())?);
    if !r.readback.ok() {
        return Err(format!("read-back failed: {:?}", r.readback.problems).into());
    }
    Ok(())
}
