//! RabbitMQ over AMQP 0-9-1 (cargo feature `rabbitmq`, client `lapin`): two queue types.
//!
//! * A **classic** queue has no delivery counter (measured: `x-delivery-count` is absent on every
//!   delivery, only `redelivered` flips). It conforms as the in-memory transport does, by
//!   republishing: a requeue publishes a copy carrying the handled count as the pump left it and
//!   acknowledges the original; a nack is `basic.reject(requeue=true)`, which puts back the
//!   message as it was published (the count the channel presented).
//! * A **quorum** queue counts returns: `x-delivery-count` is the number of earlier deliveries
//!   (absent or 0 on a first delivery, then 1, 2, 3 whether the message came back through a nack,
//!   a reject or a lost consumer; providers/tests/rabbitmq.rs measures it). The broker's delivery
//!   number is that count + 1, and the reader resolves the handled count with it through
//!   `delivery_count::resolve`. A count the publisher set passes through on a first delivery, so
//!   the count is read only on a delivery the broker marks `redelivered`. Requeue and nack are
//!   `basic.reject(requeue=true)`, the return every version counts: RabbitMQ 4.3 stopped counting
//!   `basic.nack(requeue=true)` (a return "without failure", rabbitmq-server PR 15387) while a
//!   reject and a closed channel still count. `x-delivery-limit` is the native redrive limit M
//!   reported to the budget; without one asked for, the queue is declared with a limit no
//!   count reaches, as RabbitMQ 4.0's default (20) would drop a message before a larger budget
//!   fires.
//!
//! A delayed requeue or send goes through a delay queue: a queue with a queue-level
//! `x-message-ttl` and no consumer, dead-lettering expired messages back to the work queue. One
//! delay queue per delay value, because a message's TTL expires only at the head of its queue
//! (head-of-line blocking: a 500 ms message behind a 3 s one waits 3 s, measured); the
//! delayed-message-exchange plugin is not shipped with Debian's RabbitMQ. A message that comes back
//! from a delay queue is a new message to a quorum queue (its `x-delivery-count` starts again), so
//! the copy carries the deliveries before it in the transport's own `x-gateway-prior-deliveries`
//! header, which the reader adds to the broker's count.
//!
//! Reject publishes the stamped copy to the dead-letter or invalid-message queue
//! (`kit::reject_by_forwarding`), then acknowledges. The header travels as AMQP headers in the
//! layout `transport::attributes` shares with the other brokers (all values long strings).
//!
//! A receive's `basic.get` unanswered within the subscription's `call_deadline` (20 s) fails as a
//! `Timeout` and closes the channel: a late answer would leave its message unacknowledged with
//! the channel, received by no one; closed, the node returns it (lapin has no deadline of its own).

mod channel;
mod connection;
mod producer;
mod subscription;

pub use channel::{read_delivery, RabbitMqChannel};
pub use connection::RabbitMqConnection;
pub use producer::{to_headers, RabbitMqProducer};
pub use subscription::{QueueType, RabbitMqSubscription};

/// The client, for bespoke tests that speak AMQP themselves (the counter measurement).
pub use lapin;
/// The client's received message type (the reader takes it).
pub use lapin::message::Delivery;
/// The client's message properties and header types, for messages the gateway did not write.
pub use lapin::types::{AMQPValue, FieldTable};
pub use lapin::BasicProperties;

use crate::error::{ChannelError, ErrorKind};
use crate::transport::kit;

/// The broker's count of earlier deliveries, on quorum queues.
pub const DELIVERY_COUNT_HEADER: &str = "x-delivery-count";
/// Deliveries a copy had before it went through a delay queue (the transport's own header).
pub const PRIOR_DELIVERIES_HEADER: &str = "x-gateway-prior-deliveries";

/// A failed RabbitMQ call: I/O errors give their kind, the broker's 404 is NotFound.
fn broker_error(channel: &str, operation: &'static str, error: lapin::Error) -> ChannelError {
    let kind = match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) if amqp.get_id() == 404 => ErrorKind::NotFound,
        lapin::ErrorKind::InvalidConnectionState(_) | lapin::ErrorKind::InvalidChannelState(..) => ErrorKind::Refused,
        _ => kit::io_kind(&error).unwrap_or(ErrorKind::Other),
    };
    kit::broker_error(channel, operation, kind, error)
}
