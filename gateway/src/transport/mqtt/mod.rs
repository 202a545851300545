//! MQTT 3.1.1 through `rumqttc` (cargo feature `mqtt`), plain TCP.
//!
//! A subscription is a persistent MQTT session (clean session off, the subscription's name as
//! client id) subscribed at QoS 1 to its topic and to its own requeue topic, so nothing
//! published while a channel is between receives is lost. Acks are manual: acknowledging is the
//! PUBACK for that packet. MQTT has no delivery counter and no per-message delay, so the
//! transport conforms by republishing, as the in-memory one does: requeue and nack publish a copy
//! with the handled count as the pump left it to the subscription's requeue topic, then
//! acknowledge the original (counter kind `republished`); a delayed requeue or send is refused
//! (`ErrorKind::Unsupported`) rather than delivered early. Reject routes the stamped copy to the
//! dead-letter or invalid-message topic, then acknowledges. MQTT 3.1.1 has no user properties,
//! so the message travels as a JSON envelope (`transport::envelope`): the header in the attribute layout
//! `transport::attributes` shares, and the UTF-8 body; a payload that is not one is routed as
//! Unacceptable.
//!
//! No lease: the broker redelivers an unacknowledged message only when its session reconnects,
//! so a message received and never settled stays in flight while the channel lives.
//!
//! One channel per subscription at a time: MQTT allows one connection per client id, so a channel
//! claims its subscription and a second channel of it is refused with `ErrorKind::Unsupported`
//! (`claim`: why not shared subscriptions). Requeued copies go to the subscription's requeue
//! topic and claims to `gateway/claim/<subscription>`, so a subscription name must be a valid
//! topic level (no `+` or `#`).

mod channel;
mod claim;
mod connection;
mod options;
mod producer;
mod session;

pub use crate::transport::envelope::{read_payload, to_payload};
pub use channel::MqttChannel;
pub use connection::MqttConnection;
pub use producer::MqttProducer;

use crate::error::{BoxError, ChannelError, ErrorKind};
use crate::transport::kit;

/// Where a subscription's requeued and nacked copies go: a topic only its session reads, so a
/// requeue never reaches another subscription of the same topic.
pub fn requeue_topic(subscription_name: &str) -> String {
    format!("gateway/requeue/{subscription_name}")
}

/// Why a delay cannot be honoured.
const NO_DELAY: &str = "MQTT 3.1.1 and 5 have no per-message delay; the message would be delivered early";

/// A failed MQTT call: the kind from the client's error (refused, timed out, an I/O error).
fn broker_error(channel: &str, operation: &'static str, error: impl Into<BoxError>) -> ChannelError {
    let error = error.into();
    let kind = kind_of(&*error);
    kit::broker_error(channel, operation, kind, error)
}

fn kind_of(error: &(dyn std::error::Error + 'static)) -> ErrorKind {
    use rumqttc::ConnectionError;
    match error.downcast_ref::<ConnectionError>() {
        Some(ConnectionError::ConnectionRefused(_)) => ErrorKind::Refused,
        Some(ConnectionError::NetworkTimeout | ConnectionError::FlushTimeout) => ErrorKind::Timeout,
        _ => kit::io_kind(error).unwrap_or(ErrorKind::Other),
    }
}
