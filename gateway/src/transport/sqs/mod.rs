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

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};

use crate::error::{BoxError, ChannelError, ErrorKind};
use crate::transport::kit;

pub use channel::{read_sqs_message, Envelope, SqsChannel};
pub use envelope::read_sns_envelope;
pub use factory::{SqsConnection, SqsSubscription, CALL_DEADLINE};
pub use producer::{SnsProducer, SqsProducer};

/// SQS's limits, in seconds.
pub const MAX_VISIBILITY_TIMEOUT_SECONDS: u64 = 12 * 60 * 60;
pub const MAX_DELAY_SECONDS: u64 = 15 * 60;
pub const MAX_WAIT_SECONDS: u64 = 20;

/// The bag key whose value, when present, becomes a FIFO message's deduplication id.
pub const DEDUPLICATION_ID_KEY: &str = "messageDeduplicationId";

/// A failed SQS or SNS call, its kind read off the SDK's error.
fn broker_error<E, R>(channel: &str, operation: &'static str, error: SdkError<E, R>) -> ChannelError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let kind = match &error {
        SdkError::TimeoutError(_) => ErrorKind::Timeout,
        SdkError::DispatchFailure(failure) if failure.is_timeout() => ErrorKind::Timeout,
        SdkError::DispatchFailure(_) => ErrorKind::Refused,
        SdkError::ResponseError(_) => ErrorKind::Malformed,
        SdkError::ServiceError(_) => match error.code() {
            Some(code) if code.contains("NonExistentQueue") || code.contains("NotFound") => ErrorKind::NotFound,
            _ => ErrorKind::Rejected,
        },
        _ => ErrorKind::Other,
    };
    kit::broker_error(channel, operation, kind, error)
}

/// A failed send whose error was boxed on the way (building the request, or the call itself).
fn send_error(channel: &str, operation: &'static str, error: BoxError) -> ChannelError {
    let kind = if error.downcast_ref::<aws_sdk_sqs::error::BuildError>().is_some() {
        ErrorKind::Malformed
    } else {
        kit::io_kind(&*error).unwrap_or(ErrorKind::Other)
    };
    kit::broker_error(channel, operation, kind, error)
}
