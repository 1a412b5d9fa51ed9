//! Pacing and stopping a collection: [`Throttle`] counts the bytes a
//! collection reads and writes, sleeps to keep them under a rate, and
//! stops an online collection when its store closes.
//!
//! Invariant: a stop (`Closed`) is raised only at a check
//! ([`Throttle::stopped`], also made by every [`Throttle::consume`]), and
//! the collector checks only where stopping leaves a state FORMAT.md
//! §14.4's crash argument covers: while reading, while writing a temp file
//! (a name recovery never reads), or just before a range's rename; never
//! between a rename and the directory fsyncs and removals that follow it.

use std::time::Instant;

use crate::error::{Error, Result};

/// Sleeps so that a collection's reads and writes stay under a rate, and
/// stops an online collection when its store closes.
pub(super) struct Throttle<'a> {
    rate: Option<u64>,
    started: Instant,
    pub(super) bytes: u64,
    stop: Option<&'a std::sync::atomic::AtomicBool>,
}

impl<'a> Throttle<'a> {
    pub(super) fn new(
        rate: Option<u64>,
        stop: Option<&'a std::sync::atomic::AtomicBool>,
    ) -> Throttle<'a> {
        Throttle {
            rate,
            started: Instant::now(),
            bytes: 0,
            stop,
        }
    }
    pub(super) fn stopped(&self) -> Result<()> {
        match self.stop {
            Some(s) if s.load(std::sync::atomic::Ordering::SeqCst) => Err(Error::Closed),
            _ => Ok(()),
        }
    }
    pub(super) fn consume(&mut self, bytes: u64) -> Result<()> {
        self.stopped()?;
        self.bytes += bytes;
        let Some(rate) = self.rate.filter(|r| *r > 0) else {
            return Ok(());
        };
        let due = std::time::Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        while let Some(wait) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(wait.min(std::time::Duration::from_millis(50)));
            self.stopped()?;
        }
        Ok(())
    }
}
