//! AWS SQS, and SNS to SQS with the non-raw envelope (cargo feature `sqs`).
//!
//! The broker counter is `ApproximateReceiveCount`, requested on every receive with the other
//! system attributes (no extra call). Requeue is ChangeMessageVisibility(delay), nack is
//! visibility 0, reject sends a stamped copy straight to the dead-letter or invalid-message
//! queue and then deletes the source (ADR 0038's direct send).

mod channel;
mod envelope;
mod factory;
mod producer;

use crate::blocking::on_gateway_runtime;
use crate::channel::ChannelError;

pub use channel::{read_sqs_message, Envelope, SqsChannel};
pub use envelope::read_sns_envelope;
pub use factory::{SqsConnection, SqsSubscription};
pub use producer::{SnsProducer, SqsProducer};

/// SQS's limits, in seconds.
pub const MAX_VISIBILITY_TIMEOUT_SECONDS: u64 = 12 * 60 * 60;
pub const MAX_DELAY_SECONDS: u64 = 15 * 60;
pub const MAX_WAIT_SECONDS: u64 = 20;

/// The bag key whose value, when present, becomes a FIFO message's deduplication id.
pub const DEDUPLICATION_ID_KEY: &str = "messageDeduplicationId";

fn broker_error(channel: &str, operation: &'static str, error: &(dyn std::error::Error + 'static)) -> ChannelError {
    let detail = aws_sdk_sqs::error::DisplayErrorContext(error).to_string();
    ChannelError::Broker { channel: channel.to_owned(), operation, detail }
}
