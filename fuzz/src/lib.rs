//! Fuzz target bodies for turnstone, as plain functions.
//!
//! Each module exposes `run(data: &[u8])`: it decodes a structured input from
//! the bytes with [`arbitrary`], drives the engine, and asserts properties
//! (a failed property panics, which libFuzzer reports as a crash). The same
//! functions are called by the cargo-fuzz binaries in `fuzz_targets/`
//! (nightly) and by `replay/tests/replay.rs` (stable, in `cargo test`).
//!
//! | target | what it feeds | what it asserts |
//! |---|---|---|
//! | [`decode`] | bytes, or encoded structures with bytes flipped, to every decoder | no panic; decode then encode gives the same bytes |
//! | [`recovery_image`] | a store image (engine-written, then damaged; junk files) | every open mode returns `Ok` or a typed error; modes agree; open, close, reopen is clean and stable; salvage invents nothing, keeps dense prefixes and at least what the other modes keep, and reports every dropped frame |
//! | [`ops`] | appends, forks, syncs, power cuts, EIO/ENOSPC, crashes, reopens | a `Vec`-per-session model: acknowledged events survive, sessions are dense prefixes, nothing invented |
//! | [`repair`] | session event sequences cut by a crash | repair leaves the session idle with a valid message history; repair is idempotent and only appends |
//! | [`surface`] | surface ops | `Surface::apply` equals a `Vec::splice` model; bad ranges change nothing; incremental messages equal a rebuild |

pub mod decode;
pub mod ops;
pub mod recovery_image;
pub mod repair;
pub mod surface;
pub mod util;
