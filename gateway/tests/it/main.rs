//! Integration tests of the gateway, one binary (see CONVENTIONS: one link per crate).

mod allocation;
mod diagnostics;
mod memory_transport;
mod pumps;
mod support;
