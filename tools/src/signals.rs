//! The two signals the CLI cares about: SIGPIPE (die quietly when the reader
//! goes away) and SIGINT (stop `dump --follow` cleanly).

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Restore the default SIGPIPE action (Rust ignores it, which turns a closed
/// pipe into write errors in every `println!`).
pub fn default_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_DFL has no preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// From now on SIGINT sets a flag instead of killing the process.
pub fn catch_sigint() {
    let handler: extern "C" fn(libc::c_int) = on_sigint;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
    }
}

/// Whether SIGINT arrived since [`catch_sigint`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
