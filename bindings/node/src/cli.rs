//! The command line's counterparts: `cliMain` (the `turnstone` bin that
//! `npm install` links) and `schemaJson` (`turnstone schema`).

use napi_derive::napi;
use turnstone::session as ts;

use crate::convert::usage;

/// The JSON Schema of one core kind's data (`"turn/end"`), or of every
/// core kind keyed by name: `turnstone schema`, as JSON text.
#[napi(catch_unwind)]
pub fn schema_json(kind: Option<String>) -> napi::Result<String> {
    let v = ts::schema_named(kind.as_deref()).map_err(usage)?;
    Ok(v.to_string())
}

/// The `turnstone` command line on `argv` (program name first): what
/// `npm install` links as the `turnstone` bin (`cli.js`). Every subcommand
/// of the Rust binary but `serve`. Runs on the calling thread (the bin does
/// nothing else) and returns the exit status.
#[napi]
pub fn cli_main(argv: Vec<String>) -> i32 {
    let code = turnstone_cli::main_from(argv);
    // `ExitCode` does not give its number back: compare with the statuses
    // the CLI uses (0, 1, 2).
    [0u8, 1, 2]
        .into_iter()
        .find(|c| std::process::ExitCode::from(*c) == code)
        .map_or(2, i32::from)
}
