//! Kafka through librdkafka (cargo feature `kafka`; the `rdkafka` crate, librdkafka built from
//! source with cmake).
//!
//! A subscription is a consumer group on one topic, with manual commits: acknowledge commits
//! the offset after the record. Kafka keeps no delivery counter (a record is at an offset; a
//! group only has a position), so the transport republishes, like the in-memory one: the
//! header's handled count is the count (counter kind `republished`). Requeue republishes a copy
//! as the pump left it to the same topic, then commits the original; nack seeks the group back
//! to the record, which is delivered again unchanged (its count as it was: a nack does not
//! count); reject produces the stamped copy to the dead-letter or invalid-message topic, then
//! commits. The header travels as record headers in the layout `transport::attributes` shares
//! with SQS, Pub/Sub and RocketMQ: header fields own their header names and the bag is one JSON
//! header, so a bag entry can never stand in for a header field on a forwarded message.
//! A settlement's commit the node has not answered within the subscription's `call_deadline`
//! (10 s) fails as a `Timeout`: librdkafka's synchronous commit would wait out its 60 s socket
//! timeout. Connecting (the bootstrap's metadata request) is held to `CONNECT_DEADLINE` or the
//! one `KafkaConnection::connect_within` is given, and a channel's topic creation and checks to
//! the subscription's `call_deadline`.

mod channel;
mod connection;
mod offsets;
mod producer;
mod subscription;

pub use channel::{read_record, KafkaChannel};
pub use connection::{KafkaConnection, CONNECT_DEADLINE};
pub use producer::{to_record_headers, KafkaProducer};
pub use subscription::KafkaSubscription;

/// Record headers, for records the gateway did not write (`KafkaProducer::send_native`).
pub use rdkafka::message::OwnedHeaders as RecordHeaders;
/// The client's received record, detached from its consumer (the reader takes it).
pub use rdkafka::message::OwnedMessage as Record;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::{ChannelError, ErrorKind};
use crate::transport::kit;

/// How long a broker call (commit, seek, produce, topic creation) may take.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The kind of a failed librdkafka call, from its error code.
fn error_kind(error: &KafkaError) -> ErrorKind {
    use RDKafkaErrorCode as Code;
    match error.rdkafka_error_code() {
        Some(Code::MessageTimedOut | Code::RequestTimedOut | Code::OperationTimedOut) => ErrorKind::Timeout,
        Some(
            Code::BrokerTransportFailure | Code::AllBrokersDown | Code::NetworkException | Code::BrokerNotAvailable,
        ) => ErrorKind::Refused,
        Some(Code::UnknownTopicOrPartition | Code::UnknownTopic | Code::UnknownPartition) => ErrorKind::NotFound,
        Some(Code::InvalidMessage | Code::BadMessage | Code::InvalidRecord) => ErrorKind::Malformed,
        Some(Code::TopicAuthorizationFailed | Code::GroupAuthorizationFailed | Code::InvalidConfig) => {
            ErrorKind::Rejected
        }
        _ => ErrorKind::Other,
    }
}

/// A failed Kafka call on `channel`.
fn broker_error(channel: &str, operation: &'static str, error: KafkaError) -> ChannelError {
    kit::broker_error(channel, operation, error_kind(&error), error)
}
