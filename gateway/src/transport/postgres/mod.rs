//! PostgreSQL as a queue (cargo feature `postgres`), through `tokio-postgres`.
//!
//! One table, `gateway_queue`, keyed by queue name, holds every queue's messages: a queue is a
//! name, not a table, so creating one is free, a queue name is a bound parameter and never an SQL
//! identifier, and a rejection copy goes to its destination by an insert into the same table in
//! the transaction that deletes the original. A row is visible when its `visible_at` has passed.
//! Receive takes the oldest visible row of the queue with `FOR UPDATE SKIP LOCKED` (concurrent
//! receivers never take the same row), adds one to the row's own `deliveries` counter and leases
//! it: `visible_at` becomes now + the lease, so an unsettled row is received again when the lease
//! lapses, counted again. That counter is the broker's (measured 1, 2, 3 over nacks, requeues and
//! lapses, `providers/tests/postgres.rs`), so the reader resolves the handled count with it.
//! Acknowledge deletes the row; requeue moves `visible_at` to now + the delay; nack to now;
//! reject inserts the stamped copy and deletes the original in one transaction, so a failure
//! between the two leaves neither the copy nor a lost original. A delayed send inserts the row
//! with `visible_at` in the future. Every time is the server's clock (`now()`).
//!
//! A receipt is `<row id>:<deliveries>`: it settles the row only while this delivery's lease
//! holds (the row was not released, received again or its lease lapsed).
//! A channel's call that the server has not answered within the subscription's `call_deadline`
//! (30 s) fails as a `Timeout`: tokio-postgres has no deadline of its own, and a server that
//! stops answering must not hold a pump for ever. A producer's send has the same deadline
//! (`PostgresProducer::with_call_deadline`).
//! The header travels as the string attributes `transport::attributes` shares with the other
//! transports, in two parallel `text[]` columns; the body is `bytea`.

mod channel;
mod connection;
mod producer;
mod subscription;

pub use channel::{read_row, PostgresChannel, ReceivedRow};
pub use connection::PostgresConnection;
pub use producer::PostgresProducer;
pub use subscription::PostgresSubscription;

use crate::error::{ChannelError, ErrorKind};
use crate::transport::kit;

/// The table every queue shares.
pub const TABLE: &str = "gateway_queue";

/// The schema, created when missing (`MakeChannels::Create`), under an advisory lock so that
/// concurrent creators do not race on the catalogue.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS gateway_queue (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    visible_at timestamptz NOT NULL DEFAULT now(),
    deliveries integer NOT NULL DEFAULT 0,
    leased boolean NOT NULL DEFAULT false,
    attribute_names text[] NOT NULL,
    attribute_values text[] NOT NULL,
    body bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_queue_visible ON gateway_queue (queue, visible_at, id);
";

/// The advisory lock key taken while creating the schema.
const SCHEMA_LOCK: i64 = 0x0077_6761_7465;

/// A failed PostgreSQL call: an error the server answered with is `Rejected` (`NotFound` for a
/// missing table), a connection that is closed or cannot be made is `Refused`.
fn broker_error(channel: &str, operation: &'static str, error: tokio_postgres::Error) -> ChannelError {
    use tokio_postgres::error::SqlState;
    let kind = match error.code() {
        Some(code) if *code == SqlState::UNDEFINED_TABLE => ErrorKind::NotFound,
        Some(code) if *code == SqlState::QUERY_CANCELED => ErrorKind::Timeout,
        Some(code) if code.code().starts_with("08") || code.code().starts_with("57P") => ErrorKind::Refused,
        Some(_) => ErrorKind::Rejected,
        None if error.is_closed() => ErrorKind::Refused,
        None => kit::io_kind(&error).unwrap_or(ErrorKind::Other),
    };
    kit::broker_error(channel, operation, kind, error)
}
