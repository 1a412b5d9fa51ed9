//! The one JSON line `fleet` prints and the measures behind it: the
//! process's CPU time (`getrusage`), latency percentiles, and ratios that
//! are 0 rather than NaN or infinite on an empty run. Kept apart from the
//! driver so that what the report means reads in one place.

use std::time::Duration;

/// The one JSON line `fleet` prints (fields in this order).
#[derive(Debug, serde::Serialize)]
pub(super) struct FleetReport {
    /// Events appended by this run (repairs and the final cancellations included).
    pub(super) events: u64,
    /// Payload bytes appended by this run.
    pub(super) bytes: u64,
    /// fdatasync calls on segment files (from the store's stats).
    pub(super) syncs: u64,
    pub(super) events_per_sync: f64,
    pub(super) events_per_s: f64,
    pub(super) mb_per_s: f64,
    /// Durability-wait latency percentiles, microseconds.
    pub(super) ack_p50_us: u64,
    pub(super) ack_p99_us: u64,
    /// CPU time of the whole process (every thread: the workload generator,
    /// the session layer, the store's flusher) from the first append to the
    /// final sync, per event appended (issue 16 asks for at most 3).
    pub(super) cpu_us_per_event: f64,
    /// The user and system halves of that CPU time, seconds.
    pub(super) user_s: f64,
    pub(super) system_s: f64,
}

/// User and system CPU time of this process (all threads) so far.
pub(super) fn cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage only writes into the struct passed to it, which is
    // a plain C struct for which all-zero bytes are a valid value.
    #[allow(unsafe_code)]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

pub(super) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(super) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
