//! Codec: events as bytes and back. The core kinds and their typed data,
//! provider-native content blocks and token usage, the payload envelope
//! (FORMAT.md §10), and large blocks kept out of line as blob references
//! (FORMAT.md §15).

pub mod blob_refs;
pub mod content;
pub mod envelope;
pub mod event;
pub mod schema;
pub mod usage;
