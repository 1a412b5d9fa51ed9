//! Tools: a tool body runs only once its `tool/call` is durable
//! (invariant 7), alone or beside its siblings, and its result is recorded.

pub mod durability;
pub mod parallel;
