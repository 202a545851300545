//! Rejection vocabulary shared by every transport: the reserved metadata keys, the reasons, the
//! stamping helper and the routing decision. Transports use these, never literals.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::ChannelError;
use crate::message::{BagValue, Message};
use crate::subscription::Subscription;

/// The five reserved rejection-metadata keys. `rejectionReason` is the discriminator of ADR 0077
/// a message whose bag holds it is a routed rejection copy.
pub mod keys {
    pub const REJECTION_REASON: &str = "rejectionReason";
    pub const REJECTION_MESSAGE: &str = "rejectionMessage";
    pub const REJECTION_TIMESTAMP: &str = "rejectionTimestamp";
    pub const ORIGINAL_TOPIC: &str = "originalTopic";
    pub const ORIGINAL_MESSAGE_TYPE: &str = "originalMessageType";

    /// All five, the discriminator first.
    pub const ALL: [&str; 5] =
        [REJECTION_REASON, REJECTION_MESSAGE, REJECTION_TIMESTAMP, ORIGINAL_TOPIC, ORIGINAL_MESSAGE_TYPE];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionReason {
    None,
    DeliveryError,
    Unacceptable,
}

impl RejectionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectionReason::None => "None",
            RejectionReason::DeliveryError => "DeliveryError",
            RejectionReason::Unacceptable => "Unacceptable",
        }
    }
}

impl fmt::Display for RejectionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a message was rejected, with an optional human description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: RejectionReason,
    pub description: Option<String>,
}

impl Rejection {
    pub fn new(reason: RejectionReason, description: impl Into<String>) -> Rejection {
        Rejection { reason, description: Some(description.into()) }
    }

    pub fn delivery_error(description: impl Into<String>) -> Rejection {
        Rejection::new(RejectionReason::DeliveryError, description)
    }

    pub fn unacceptable(description: impl Into<String>) -> Rejection {
        Rejection::new(RejectionReason::Unacceptable, description)
    }
}

/// The copy a transport routes on rejection: the message with its handled count as stamped and
/// the rejection metadata in the bag. A rejection without a reason stamps `"None"` so that the
/// copy always carries the discriminator; `rejectionMessage` is written only when there is one.
pub fn stamp(message: &Message, rejection: Option<&Rejection>) -> Message {
    let mut copy = message.without_receipt();
    let reason = rejection.map_or(RejectionReason::None, |r| r.reason);
    let bag = &mut copy.header.bag;
    bag.insert(keys::REJECTION_REASON.to_owned(), reason.as_str().into());
    if let Some(description) = rejection.and_then(|r| r.description.as_deref()) {
        bag.insert(keys::REJECTION_MESSAGE.to_owned(), description.into());
    }
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    bag.insert(keys::REJECTION_TIMESTAMP.to_owned(), BagValue::Int(millis));
    bag.insert(keys::ORIGINAL_TOPIC.to_owned(), message.header.topic.as_str().into());
    bag.insert(keys::ORIGINAL_MESSAGE_TYPE.to_owned(), message.header.message_type.as_str().into());
    copy
}

/// Where a rejected message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RejectionRoute<'a> {
    DeadLetter(&'a str),
    Invalid(&'a str),
    /// No destination configured: the transport acknowledges and logs.
    Nowhere,
}

/// Unacceptable goes to the invalid-message channel, falling back to the dead-letter channel;
/// every other reason (and no reason) goes to the dead-letter channel.
pub fn route<'a>(rejection: Option<&Rejection>, subscription: &'a Subscription) -> RejectionRoute<'a> {
    let dead_letter = subscription.dead_letter_routing_key.as_deref();
    let invalid = subscription.invalid_message_routing_key.as_deref();
    let unacceptable = rejection.is_some_and(|r| r.reason == RejectionReason::Unacceptable);
    match (unacceptable, invalid, dead_letter) {
        (true, Some(key), _) => RejectionRoute::Invalid(key),
        (_, _, Some(key)) => RejectionRoute::DeadLetter(key),
        _ => RejectionRoute::Nowhere,
    }
}

/// Sends the stamped copy of a rejected message to its destination with `publish(destination,
/// copy)`, every transport's reject. `Ok(true)`: routed. `Ok(false)`: no destination configured;
/// logged, and the caller acknowledges the original. `Err`: the publish failed; the caller
/// releases the original, never acknowledging what was not routed.
pub async fn forward<'s>(
    subscription: &'s Subscription,
    message: &Message,
    rejection: Option<&Rejection>,
    publish: impl AsyncFnOnce(&'s str, Message) -> Result<(), ChannelError>,
) -> Result<bool, ChannelError> {
    match route(rejection, subscription) {
        RejectionRoute::DeadLetter(destination) | RejectionRoute::Invalid(destination) => {
            publish(destination, stamp(message, rejection)).await?;
            Ok(true)
        }
        RejectionRoute::Nowhere => {
            tracing::warn!(
                channel = %subscription.name,
                message_id = message.id(),
                "rejected with no dead-letter or invalid-message destination; acknowledged"
            );
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageType;

    fn subscription(dead_letter: Option<&str>, invalid: Option<&str>) -> Subscription {
        let mut subscription = Subscription::new("orders", "orders");
        subscription.dead_letter_routing_key = dead_letter.map(str::to_owned);
        subscription.invalid_message_routing_key = invalid.map(str::to_owned);
        subscription
    }

    #[test]
    fn a_rejection_without_a_reason_stamps_none_and_no_message() {
        let message = Message::new("orders", MessageType::Command, "body");
        let copy = stamp(&message, None);
        assert_eq!(copy.header.bag[keys::REJECTION_REASON], BagValue::from("None"));
        assert!(!copy.header.bag.contains_key(keys::REJECTION_MESSAGE));
        assert_eq!(copy.header.bag[keys::ORIGINAL_TOPIC], BagValue::from("orders"));
        assert_eq!(copy.header.bag[keys::ORIGINAL_MESSAGE_TYPE], BagValue::from("Command"));
        assert!(copy.header.bag.contains_key(keys::REJECTION_TIMESTAMP));
    }

    #[test]
    fn a_stamped_copy_keeps_the_handled_count_and_drops_the_receipt() {
        let mut message = Message::new("orders", MessageType::Event, "body");
        message.header.handled_count = 3;
        message.receipt = Some("r-1".into());
        let copy = stamp(&message, Some(&Rejection::delivery_error("budget spent")));
        assert_eq!(copy.header.handled_count, 3);
        assert_eq!(copy.receipt, None);
        assert_eq!(copy.header.bag[keys::REJECTION_REASON], BagValue::from("DeliveryError"));
        assert_eq!(copy.header.bag[keys::REJECTION_MESSAGE], BagValue::from("budget spent"));
    }

    /// Runs `forward` and returns its result with what `publish` was given.
    fn forwarded(
        subscription: &Subscription,
        message: &Message,
        rejection: Option<&Rejection>,
        fails: bool,
    ) -> (Result<bool, ChannelError>, Vec<(String, Message)>) {
        let published = std::sync::Mutex::new(Vec::new());
        let publish = async |destination: &str, copy: Message| {
            published.lock().unwrap().push((destination.to_owned(), copy));
            if fails {
                return Err(ChannelError::Missing { channel: destination.to_owned() });
            }
            Ok(())
        };
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let result = runtime.block_on(forward(subscription, message, rejection, publish));
        (result, published.into_inner().unwrap())
    }

    #[test]
    fn forward_publishes_the_stamped_copy_to_the_route() {
        let mut message = Message::new("orders", MessageType::Command, "body");
        message.header.handled_count = 2;
        let unacceptable = Rejection::unacceptable("cannot map");
        let (result, published) =
            forwarded(&subscription(Some("dlq"), Some("invalid")), &message, Some(&unacceptable), false);
        assert!(result.unwrap());
        let [(destination, copy)] = published.as_slice() else { panic!("one publish expected: {published:?}") };
        assert_eq!(destination, "invalid");
        assert_eq!(copy.header.handled_count, 2);
        assert_eq!(copy.header.bag[keys::REJECTION_REASON], BagValue::from("Unacceptable"));
    }

    #[test]
    fn forward_without_a_destination_publishes_nothing_and_says_so() {
        let message = Message::new("orders", MessageType::Command, "body");
        let (result, published) = forwarded(&subscription(None, None), &message, None, false);
        assert!(!result.unwrap());
        assert!(published.is_empty());
    }

    #[test]
    fn forward_passes_a_failed_publish_back_to_the_caller() {
        let message = Message::new("orders", MessageType::Command, "body");
        let (result, published) = forwarded(&subscription(Some("dlq"), None), &message, None, true);
        assert!(matches!(result, Err(ChannelError::Missing { channel }) if channel == "dlq"));
        assert_eq!(published.len(), 1);
    }

    #[test]
    fn routes_follow_the_reason_with_fallbacks() {
        let both = subscription(Some("dlq"), Some("invalid"));
        let dlq_only = subscription(Some("dlq"), None);
        let none = subscription(None, None);
        let unacceptable = Rejection::unacceptable("cannot map");
        let error = Rejection::delivery_error("boom");
        assert_eq!(route(Some(&unacceptable), &both), RejectionRoute::Invalid("invalid"));
        assert_eq!(route(Some(&unacceptable), &dlq_only), RejectionRoute::DeadLetter("dlq"));
        assert_eq!(route(Some(&error), &both), RejectionRoute::DeadLetter("dlq"));
        assert_eq!(route(None, &both), RejectionRoute::DeadLetter("dlq"));
        assert_eq!(route(Some(&unacceptable), &none), RejectionRoute::Nowhere);
        assert_eq!(route(None, &none), RejectionRoute::Nowhere);
    }
}
