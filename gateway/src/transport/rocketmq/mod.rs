//! RocketMQ 5.x through the broker's pop consumption (cargo feature `rocketmq`).
//!
//! The client is `rocketmq-client-rust`, speaking the remoting protocol to the broker: no proxy.
//! Pop is RocketMQ's simple consumption: a popped message stays invisible for a lease, and comes
//! back if it is not acknowledged, from the group's pop retry topic, with the broker's
//! `reconsume_times` grown by one. That counter is the broker's own (measured, AC-23: it survives
//! a consumer recreated in the same group), so a delivery's attempt is `reconsume_times + 1`
//! and ADR 0077's AC-24 branch applies: the reader resolves the handled count with it.
//! Requeue and nack change the invisible time (to the delay, or to 0); reject produces a stamped
//! copy to the dead-letter or invalid-message topic, then acknowledges. The header travels as
//! user properties in the layout `transport::attributes` shares with SQS and Pub/Sub: header
//! fields own their property names and the bag is one JSON property, so a bag entry can never
//! stand in for a header field on a forwarded message.

mod channel;
mod connection;
mod producer;
mod subscription;

pub use channel::{read_popped_message, RocketMqChannel};
pub use connection::RocketMqConnection;
pub use producer::{to_rocketmq_message, RocketMqProducer};
pub use subscription::RocketMqSubscription;

/// The client's message builder, for messages the gateway did not write (`send_native`).
pub use rocketmq_model::common::message::message_builder::MessageBuilder as NativeMessageBuilder;
/// The client's received message type (the reader takes it).
pub use rocketmq_model::common::message::message_ext::MessageExt as PoppedMessage;

use crate::error::{BoxError, ChannelError, ErrorKind};
use crate::transport::kit;

/// A boxed client call. Each call into the client is made into one of these in a function with
/// no generic or lifetime parameter in scope, where the compiler proves the client's future
/// `Send` once and keeps the proof for the whole crate. Proved inside an `async_trait` method
/// instead (whose lifetimes are in scope), the same proof was made again for every shape of
/// method and in every compiler phase that asks: 50 of the 60 s this feature took to compile
/// (`-Z self-profile`, BENCHMARKS.md). For the same reason no channel or connection holds a
/// client type, only trait objects whose methods return these.
type BoxedFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The broker's longest invisible time: the longest a requeue can hold a message back.
pub const MAX_INVISIBLE: std::time::Duration = std::time::Duration::from_secs(12 * 60 * 60);

/// A failed RocketMQ call. The client's errors reach here as its own types or, where their
/// futures must cross to the gateway's runtime, as text (`describe`); both carry the client's
/// remoting codes (`transport.response.timeout`, `transport.connection.failed`), which give the kind.
fn broker_error(channel: &str, operation: &'static str, error: impl Into<BoxError>) -> ChannelError {
    let error = error.into();
    let text = error.to_string();
    let kind = if text.contains("timeout") {
        ErrorKind::Timeout
    } else if text.contains("connection") {
        ErrorKind::Refused
    } else {
        kit::io_kind(&*error).unwrap_or(ErrorKind::Other)
    };
    kit::broker_error(channel, operation, kind, error)
}

/// The client's error with its causes: its own display is a category ("Argument is invalid"),
/// the detail is in the source chain.
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}
