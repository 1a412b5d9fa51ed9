//! What the operating system can tell about a run: CPU time, peak memory,
//! and the bytes the block device holding a directory wrote.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// User + system CPU time of this process (all threads) so far.
pub fn cpu_time() -> Duration {
    let (user, system) = cpu_times();
    user + system
}

/// User and system CPU time of this process (all threads) so far.
pub fn cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage writes into the struct we pass and nothing else.
    #[allow(unsafe_code)]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// A field of `/proc/self/status` in KiB (`VmHWM`, `VmRSS`).
pub fn proc_status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Bytes this process caused to be written to storage (`write_bytes` of
/// `/proc/self/io`: page-granular, counted when a page is dirtied; excludes
/// the filesystem journal, which the kernel writes on its own account).
pub fn process_write_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/io").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Bytes this process caused to be read from storage (`read_bytes` of
/// `/proc/self/io`: counted when a read bio is submitted, so it covers
/// page faults of memory maps, read-ahead and plain reads alike, and not
/// what the page cache served).
pub fn process_read_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/io").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The block device that holds `dir`, as its `/sys/dev/block/M:m/stat` file.
#[derive(Debug, Clone)]
pub struct Device {
    pub name: String,
    stat: PathBuf,
}

impl Device {
    /// The device of the filesystem holding `dir`, if sysfs shows it.
    pub fn of(dir: &Path) -> Option<Device> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(dir).ok()?.dev();
        let (maj, min) = (libc::major(dev), libc::minor(dev));
        let link = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
        let stat = link.join("stat");
        if !stat.exists() {
            return None;
        }
        let name = std::fs::read_link(&link)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| format!("{maj}:{min}"));
        Some(Device { name, stat })
    }

    /// Bytes written by the device since boot (sectors written × 512).
    pub fn bytes_written(&self) -> Option<u64> {
        let s = std::fs::read_to_string(&self.stat).ok()?;
        let sectors: u64 = s.split_whitespace().nth(6)?.parse().ok()?;
        Some(sectors * 512)
    }

    /// Bytes read by the device since boot (sectors read × 512; every
    /// process's reads, so only a cross-check on a quiet machine).
    pub fn bytes_read(&self) -> Option<u64> {
        let s = std::fs::read_to_string(&self.stat).ok()?;
        let sectors: u64 = s.split_whitespace().nth(2)?.parse().ok()?;
        Some(sectors * 512)
    }

    /// `read_ahead_kb` of the device's queue, if sysfs shows it.
    pub fn read_ahead_kb(&self) -> Option<u64> {
        let q = self.stat.parent()?.join("queue/read_ahead_kb");
        std::fs::read_to_string(q).ok()?.trim().parse().ok()
    }

    /// Flush requests completed (field 15, kernels >= 5.5), if present.
    pub fn flushes(&self) -> Option<u64> {
        let s = std::fs::read_to_string(&self.stat).ok()?;
        s.split_whitespace().nth(14)?.parse().ok()
    }
}

/// Percentile of sorted values (nearest rank).
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64 - 1e-9).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> Option<(f64, f64, f64)> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = s.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// Raise the soft open-file limit to the hard limit (4096 sessions of JSONL
/// files, 10k in the RSS probe).
pub fn raise_nofile() {
    // SAFETY: plain get/set of a resource limit struct.
    #[allow(unsafe_code)]
    unsafe {
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

/// A temporary directory for a criterion bench store, in
/// `TURNSTONE_BENCH_DIR` if set, else the system temp dir; removed when
/// dropped.
pub fn bench_tempdir(prefix: &str) -> tempfile::TempDir {
    let dir = std::env::var_os("TURNSTONE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(dir)
        .expect("temp dir for the bench store")
}

/// Drop the page cache before a cold measurement: all of it when allowed
/// (`sync; echo 3 > /proc/sys/vm/drop_caches`, root), else the cached
/// pages of every file under `dir` (`posix_fadvise(POSIX_FADV_DONTNEED)`).
/// Returns the method used, for the report.
pub fn drop_page_cache(dir: &std::path::Path) -> std::io::Result<&'static str> {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    if std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok() {
        return Ok("sync; echo 3 > /proc/sys/vm/drop_caches");
    }
    evict_files(dir, "")?;
    Ok("posix_fadvise(POSIX_FADV_DONTNEED) on every file of the store")
}

/// Drop the cached pages of every file under `dir` whose name ends with
/// `suffix` (`posix_fadvise(POSIX_FADV_DONTNEED)`; written pages must be
/// durable already, as fadvise only drops clean ones).
pub fn evict_files(dir: &std::path::Path, suffix: &str) -> std::io::Result<()> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if !p.to_string_lossy().ends_with(suffix) {
                continue;
            }
            let Ok(f) = std::fs::File::open(&p) else {
                continue;
            };
            use std::os::fd::AsRawFd;
            // SAFETY: the descriptor is open for the whole call; fadvise
            // only drops clean cached pages of the file.
            let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&v, 50.0), 500);
        assert_eq!(percentile(&v, 99.0), 990);
        assert_eq!(percentile(&v, 99.9), 999);
        assert_eq!(percentile(&[], 50.0), 0);
        assert!(cpu_time() > Duration::ZERO || cpu_time() == Duration::ZERO);
        assert!(proc_status_kib("VmHWM").is_some());
    }
}
