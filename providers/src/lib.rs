//! Per configuration: how to get a broker, how to build the subscription, channels and producer
//! of one conformance cell, how to read its rejection destinations, and the transport's message
//! assertion. Generated tests talk only to `Cell` / `BlockingCell`, so no template names a
//! transport mechanism.

pub mod assertion;
#[cfg(feature = "azure")]
pub mod azure;
pub mod broker;
pub mod builder;
pub mod ceiling;
pub mod cell;
#[cfg(feature = "containers")]
pub mod containers;
pub mod fault;
#[cfg(feature = "gcp")]
pub mod gcp;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod lease;
pub mod local;
#[cfg(feature = "memory")]
pub mod memory;
#[cfg(feature = "mqtt")]
pub mod mqtt;
#[cfg(feature = "nats")]
pub mod nats;
pub mod peer;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
pub mod recording;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "rocketmq")]
pub mod rocketmq;
pub mod source;
#[cfg(feature = "sqs")]
pub mod sqs;

use async_trait::async_trait;

pub use assertion::MessageAssertion;
#[cfg(feature = "azure")]
pub use azure::azure_queue;
pub use ceiling::{within_ceiling, within_ceiling_async};
pub use cell::{BlockingCell, Ceilings, Cell, CellParts, CellSpec, Teardown, Variant, POLL_INTERVAL};
#[cfg(feature = "gcp")]
pub use gcp::{gcp_pull, gcp_pull_ordering, gcp_stream, gcp_stream_ordering};
#[cfg(feature = "kafka")]
pub use kafka::kafka;
#[cfg(feature = "memory")]
pub use memory::memory;
#[cfg(feature = "mqtt")]
pub use mqtt::mqtt;
#[cfg(feature = "nats")]
pub use nats::nats_jetstream;
#[cfg(feature = "postgres")]
pub use postgres::postgres;
#[cfg(feature = "rabbitmq")]
pub use rabbitmq::{rabbitmq, rabbitmq_quorum};
pub use recording::{AlwaysDefers, HoldsThenDefers};
#[cfg(feature = "redis")]
pub use redis::redis_streams;
#[cfg(feature = "rocketmq")]
pub use rocketmq::rocketmq;
#[cfg(feature = "sqs")]
pub use sqs::{sns, sns_fifo, sqs, sqs_fifo};

/// One configuration's provider. A provider starts (or finds) its broker once per test binary.
/// Every configuration's is a [`builder::CellBroker`], whose cells [`builder::build`] makes.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The configuration name in the manifest and the ledger.
    fn configuration(&self) -> &'static str;

    /// The subscription, channels and producer of one cell, under names no other cell uses.
    /// `'static`: the cell keeps its provider, to make a successor channel (see `Cell::assert_source_settled`).
    async fn cell(&'static self, spec: CellSpec) -> Cell;

    /// The same cell for a Reactor test, which must not itself run on a runtime.
    fn blocking_cell(&'static self, spec: CellSpec) -> BlockingCell {
        BlockingCell::new(gateway::blocking::runtime().block_on(self.cell(spec)))
    }
}
