//! The contract between `cargo xtask` and the test binaries it builds and runs. xtask tells a
//! binary what to do through environment variables ([`BrokerSource::VARIABLE`], each
//! [`Implementation::variable`], [`CELL_TIMEOUT_VARIABLE`]); a binary tells xtask which broker it
//! ran against ([`BrokerLine`]) or why it stopped for its broker ([`FatalLine`]), on stderr. Both
//! sides use these types, so neither takes the other's prose apart, and a change to one side
//! that the other does not follow fails to compile or fails these types' tests. The facts about
//! each broker ([`brokers`]) are shared the same way.

pub mod brokers;
mod implementation;
mod lines;
mod source;

pub use implementation::{Implementation, UnknownImplementation};
pub use lines::{BrokerLine, FatalLine};
pub use source::{BrokerSource, UnknownSource};

/// The per-cell ceiling in whole seconds (`providers::ceiling`): a cell still running after it
/// fails, naming the harness step it was in.
pub const CELL_TIMEOUT_VARIABLE: &str = "CONFORMANCE_CELL_TIMEOUT";
