//! NATS JetStream (cargo feature `nats`): a stream per subject, a durable pull consumer per
//! subscription, through `async-nats` (the NATS maintainers' client).
//!
//! A message is one stream message: the header as NATS headers in the layout
//! `transport::attributes` shares with SQS, Pub/Sub and RocketMQ, the body as the payload. One
//! that cannot be read as a message is routed as Unacceptable.
//!
//! Counting: the server counts deliveries. Each message a consumer hands out carries, in its ack
//! subject, the consumer's `num_delivered` for it (1 on a first delivery), and every redelivery
//! adds one: a nak, a nak with a delay, a lapsed `ack_wait` (the lease), a consumer recreated
//! under the same durable name (measured in `providers/tests/nats.rs`). The reader resolves the
//! handled count with it through `delivery_count::resolve`.
//!
//! Settling goes through the consumer, never by republishing: acknowledge is `+ACK`; nack is
//! `-NAK` and a requeue `-NAK {"delay": ns}` (the server redelivers no sooner); reject publishes
//! the stamped copy to the dead-letter or invalid-message subject, then acknowledges. Each
//! settlement is a request the server answers, so a lost one is an error, never a silent
//! success; one the server has not answered within the subscription's `call_deadline` (10 s)
//! fails as a `Timeout`, or as `Refused` where the client lost its connection meanwhile (the
//! request may have gone down with it: see `disconnects`). A stream keeps messages by its
//! limits (shared by every consumer on its subject): trimming is the operator's.

mod channel;
mod connection;
mod disconnects;
mod message;
mod producer;
mod subscription;

pub use channel::NatsChannel;
pub use connection::NatsConnection;
pub use message::{read_stream_message, to_headers};
pub use producer::NatsProducer;
pub use subscription::NatsSubscription;

/// The client crate, for callers that need a raw call (the bespoke broker tests).
pub use ::async_nats as native;

use crate::error::{BoxError, ChannelError, ErrorKind};
use crate::transport::kit;

/// A failed NATS call on `channel`. async-nats gives each call its own error type, whose kind
/// reads as text ("timed out", "broken pipe", "no responders"): the kind is taken from it.
fn broker_error(channel: &str, operation: &'static str, error: impl Into<BoxError>) -> ChannelError {
    let error = error.into();
    let text = error.to_string().to_lowercase();
    let kind = if text.contains("timed out") || text.contains("timeout") {
        ErrorKind::Timeout
    } else if text.contains("broken pipe") || text.contains("disconnect") || text.contains("connection") {
        ErrorKind::Refused
    } else if text.contains("not found") || text.contains("no responders") {
        ErrorKind::NotFound
    } else {
        kit::io_kind(&*error).unwrap_or(ErrorKind::Other)
    };
    kit::broker_error(channel, operation, kind, error)
}

/// A stream's or a durable consumer's name for `subject`: NATS names may not hold `.`, `*`, `>`,
/// whitespace or path separators, which subjects may.
fn name_for(subject: &str) -> String {
    subject.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}
