//! GCP Pub/Sub, pull and stream (cargo feature `gcp`).
//!
//! The broker counter is the received message's `delivery_attempt` (1 on a first delivery),
//! which Pub/Sub reports only on a subscription with a DeadLetterPolicy; without one it is 0, the
//! header count stands, and the subscription reports its budget unenforceable. Pull uses
//! the generated tonic client (Pull, ModifyAckDeadline and Acknowledge are not public in the
//! official crate); stream and publishing use the official `google-cloud-pubsub`. Topic and
//! subscription admin goes through the tonic client too: the official admin clients speak
//! REST/JSON only, and Google's Go fake (pstest) serves gRPC only. Reject publishes a stamped
//! copy to the dead-letter or invalid-message topic, then acks; if that publish fails the
//! original is released instead (ADR 0078's constraint). A pull channel's settlement that the
//! server has not answered within the subscription's `call_deadline` (60 s) fails as a
//! `Timeout`: the generated client has no deadline of its own.

mod connection;
mod producer;
mod pull;
mod stream;
mod subscription;

pub use connection::GcpConnection;
pub use producer::GcpProducer;
pub use pull::{read_received_message, PullChannel};
pub use stream::{read_streamed_message, StreamChannel};
pub use subscription::{Consumption, GcpSubscription};

/// The official crate's streamed message (the stream reader takes it).
pub use google_cloud_pubsub::model::Message as StreamedMessage;
/// The generated protobuf types of `google.pubsub.v1` (the pull reader takes them).
pub use googleapis_tonic_google_pubsub_v1::google::pubsub::v1 as proto;

use googleapis_tonic_google_pubsub_v1::google::pubsub::v1 as pb;

use crate::error::{BoxError, ChannelError, ErrorKind};
use crate::transport::kit;

/// Pub/Sub's longest ack deadline: the longest a requeue can hold a pulled message back.
pub const MAX_ACK_DEADLINE_SECONDS: u64 = 600;

/// A failed Pub/Sub call, its kind read off the gRPC status where the error is one. A call whose
/// connection broke under it is `Refused` whatever code the client gave it (tonic reports a
/// reset connection as `Cancelled`, which is not the broker's answer).
fn broker_error(channel: &str, operation: &'static str, error: impl Into<BoxError>) -> ChannelError {
    let error = error.into();
    let status = error.downcast_ref::<tonic::Status>();
    let kind = match status.map(|status| (status.code(), connection_broke(status))) {
        Some((_, true)) => ErrorKind::Refused,
        Some((tonic::Code::DeadlineExceeded, _)) => ErrorKind::Timeout,
        Some((tonic::Code::Unavailable, _)) => ErrorKind::Refused,
        Some((tonic::Code::NotFound, _)) => ErrorKind::NotFound,
        Some((tonic::Code::Unimplemented, _)) => ErrorKind::Unsupported,
        Some(_) => ErrorKind::Rejected,
        None => kit::io_kind(&*error).unwrap_or(ErrorKind::Other),
    };
    kit::broker_error(channel, operation, kind, error)
}

/// The status came from the client's transport (the connection), not from the server.
fn connection_broke(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_some_and(|source| source.is::<tonic::transport::Error>())
}

use kit::whole_seconds;
