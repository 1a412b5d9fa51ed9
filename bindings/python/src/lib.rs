//! `turnstone._native`: the session layer for Python.
//!
//! The boundary carries JSON text (the Python package turns it into dicts
//! and back with the standard `json` module), so provider content — thinking
//! blocks with signatures, images, block types that do not exist yet —
//! crosses it exactly as the engine stores it. Every call that waits for
//! durability or reads the log releases the GIL. Errors become
//! `TurnstoneError(kind, message, path, offset)`; a Rust panic becomes a
//! Python exception (PyO3 catches it), never an abort.

mod aio;
mod cli;
mod convert;
mod session;
mod store;
mod subscribe;

use pyo3::prelude::*;

use crate::cli::{cli_main, schema_json};
use crate::convert::TurnstoneError;
pub(crate) use crate::convert::{err, usage};
use crate::session::{flush_all, NativeSession};
use crate::store::NativeStore;
use crate::subscribe::NativeSubscription;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeStore>()?;
    m.add_class::<NativeSession>()?;
    m.add_class::<NativeSubscription>()?;
    m.add_class::<aio::NativeWait>()?;
    m.add_class::<aio::NativeWaker>()?;
    m.add_function(wrap_pyfunction!(flush_all, m)?)?;
    m.add_function(wrap_pyfunction!(schema_json, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add("TurnstoneError", m.py().get_type::<TurnstoneError>())?;
    Ok(())
}
