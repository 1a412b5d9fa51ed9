//! The command line's counterparts: `cli_main` (the `turnstone` command
//! that `pip install` puts on PATH) and `schema_json` (`turnstone schema`).

use pyo3::prelude::*;
use turnstone::session as ts;

use crate::convert::usage;

/// The JSON Schema of one core kind's data (`"turn/end"`), or of every
/// core kind keyed by name: `turnstone schema`, as JSON text.
#[pyfunction]
#[pyo3(signature = (kind=None))]
pub(crate) fn schema_json(kind: Option<&str>) -> PyResult<String> {
    let v = ts::schema_named(kind).map_err(usage)?;
    Ok(v.to_string())
}

/// The `turnstone` command line on `argv` (program name first), with the
/// GIL released: what `pip install` puts on PATH as `turnstone`
/// (`turnstone._cli.main`). Returns the exit status.
#[pyfunction]
pub(crate) fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    let code = py.detach(move || turnstone_cli::main_from(argv));
    // `ExitCode` does not give its number back: compare with the statuses
    // the CLI uses (0, 1, 2).
    [0u8, 1, 2]
        .into_iter()
        .find(|c| std::process::ExitCode::from(*c) == code)
        .map_or(2, i32::from)
}
