//! The `turnstone` binary: the command line of `lib.rs`.

use std::process::ExitCode;

fn main() -> ExitCode {
    turnstone_cli::main_from(std::env::args_os())
}
