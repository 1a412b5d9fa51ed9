//! The native side of the `turnstone` Node.js package (napi-rs).
//!
//! The boundary carries JSON text (the JavaScript wrapper, `turnstone.js`,
//! turns objects into it and back), so provider content crosses it exactly
//! as the engine stores it. Everything that waits for durability or reads a
//! session runs on libuv's thread pool and returns a Promise: the event
//! loop never blocks. Errors are thrown with a JSON message
//! `{"kind","message","path","offset"}` that the wrapper turns into a
//! `TurnstoneError`; a Rust panic becomes a thrown error, never an abort.

mod cli;
mod convert;
mod job;
mod session;
mod store;
mod subscribe;

pub use cli::{cli_main, schema_json};
pub use job::Job;
pub use session::NativeSession;
pub use store::NativeStore;
pub use subscribe::NativeSubscription;

// Rust's allocations in this addon (event data, the session's message cache)
// use mimalloc: glibc's malloc spent a fifth of an append in free-list work.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
