//! The fold: what a session's events mean. The surface, the derived
//! messages, turns and the coordinates that point into them, request
//! headers, and the state snapshot that lets an open start part-way.

pub mod coords;
pub mod header;
pub mod messages;
pub mod state;
pub mod state_snapshot;
pub mod surface;
