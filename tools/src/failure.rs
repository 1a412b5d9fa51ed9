//! Command failures: one sentence for a person, and an exit status.

use std::path::Path;

use turnstone::Error;

/// A command failure: one sentence for the operator and an exit status.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub msg: String,
}

impl Failure {
    /// Bad arguments or input: exit 2.
    pub fn usage(msg: impl Into<String>) -> Self {
        Failure {
            code: 2,
            msg: msg.into(),
        }
    }
    /// I/O and other runtime errors: exit 2.
    pub fn io(msg: impl Into<String>) -> Self {
        Failure {
            code: 2,
            msg: msg.into(),
        }
    }
    pub fn context(mut self, what: String) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }
}

/// The sentence for an engine error, worded for the person at the terminal.
pub fn describe(e: &Error) -> String {
    match e {
        Error::Locked { dir, .. } => format!(
            "store {} is in use: another process holds its lock ({}); stop that process first, or use a read-only command (dump, verify, stats, messages, export)",
            dir.display(),
            dir.join(turnstone::LOCK_FILE).display()
        ),
        Error::UnsupportedVersion {
            file,
            found,
            supported,
        } => format!(
            "{} has format version {found}, but this turnstone reads version {supported}; it was written by {} turnstone",
            file.display(),
            if found > supported { "a newer" } else { "an unknown" }
        ),
        Error::Corrupt { file, offset, detail } => format!(
            "corruption in {} at offset {offset}: {detail}; run `turnstone verify` on the store for a full report",
            file.display()
        ),
        other => other.to_string(),
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match e {
            Error::Corrupt { .. } => 1,
            _ => 2,
        };
        Failure {
            code,
            msg: describe(&e),
        }
    }
}

/// A store directory to write into, created when missing (`import`,
/// `restore`, like `fleet`): refused only when the path is a file or
/// cannot be read.
pub fn dir_or_new(dir: &Path) -> Result<(), Failure> {
    match existing_dir(dir) {
        Err(_) if !dir.exists() => Ok(()),
        other => other,
    }
}

/// The directory must exist and be a directory (commands that would
/// otherwise create a store where none was meant).
pub fn existing_dir(dir: &Path) -> Result<(), Failure> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Failure::usage(format!(
            "{} is a file, not a store directory",
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Failure::usage(format!(
            "{} does not exist (expected a turnstone store directory)",
            dir.display()
        ))),
        Err(e) => Err(Failure::io(format!("cannot read {}: {e}", dir.display()))),
    }
}
