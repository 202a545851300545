//! A message as NATS headers and payload, and the reader that turns a stream message back into
//! a `Message`.

use async_nats::HeaderMap;

use crate::message::Message;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};

/// The NATS headers of `message`: the header's attributes.
pub fn to_headers(message: &Message) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in attributes::header_attributes(message) {
        headers.insert(name, value.as_str());
    }
    headers
}

/// The reader: a stream message as a `Message`, its handled count resolved with the consumer's
/// `num_delivered` (`delivered`, first delivery = 1, read from its ack subject). The receipt is
/// the ack subject, where the settlements go.
pub fn read_stream_message(
    message: &async_nats::Message,
    delivered: Option<i64>,
    warnings: &ReaderWarnings,
) -> Result<Message, MalformedMessage> {
    let body = std::str::from_utf8(&message.payload)
        .map_err(|e| MalformedMessage { detail: format!("the payload is not UTF-8: {e}") })?;
    let headers = message.headers.as_ref();
    let attribute = |name: &str| headers.and_then(|headers| headers.get(name)).map(|value| value.as_str());
    let receipt = message.reply.as_ref().map(|reply| reply.to_string());
    attributes::read_message(attribute, body, delivered, receipt, warnings)
}

/// A stand-in for a message that cannot be read, so it is routed as Unacceptable with its body.
pub(super) fn unreadable(message: &async_nats::Message, subject: &str) -> Message {
    let receipt = message.reply.as_ref().map(|reply| reply.to_string());
    let id = receipt.clone().unwrap_or_else(|| subject.to_owned());
    attributes::unreadable(&id, subject, &String::from_utf8_lossy(&message.payload), receipt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BagValue, MessageType};
    use crate::rejection::{keys, Rejection};

    const ACK: &str = "$JS.ACK.orders.orders-group.1.7.7.1700000000000000000.0";

    fn delivered(message: &Message) -> async_nats::Message {
        async_nats::Message {
            subject: "orders".into(),
            reply: Some(ACK.into()),
            payload: message.body.bytes.clone().into(),
            headers: Some(to_headers(message)),
            status: None,
            description: None,
            length: 0,
        }
    }

    #[test]
    fn the_message_round_trips_and_the_receipt_is_the_ack_subject() {
        let mut sent = Message::new("orders", MessageType::Event, "{\"a\":1}");
        sent.header.correlation_id = Some("c-1".into());
        sent.header.bag.insert("number".into(), BagValue::Int(-7));
        let read = read_stream_message(&delivered(&sent), Some(1), &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.id, sent.header.id);
        assert_eq!(read.header.bag, sent.header.bag);
        assert_eq!(read.header.correlation_id, sent.header.correlation_id);
        assert_eq!(read.body.bytes, sent.body.bytes);
        assert_eq!(read.receipt.as_deref(), Some(ACK));
    }

    #[test]
    fn num_delivered_1_2_3_present_0_1_2_whatever_the_header_count() {
        let mut sent = Message::new("orders", MessageType::Command, "x");
        sent.header.handled_count = 5;
        let counts: Vec<u32> = (1..=3)
            .map(|n| {
                let read = read_stream_message(&delivered(&sent), Some(n), &ReaderWarnings::default()).unwrap();
                read.header.handled_count
            })
            .collect();
        assert_eq!(counts, [0, 1, 2]);
    }

    /// a routed rejection copy keeps its stamped count, not the dead-letter consumer's counter.
    #[test]
    fn a_rejection_copy_keeps_its_stamped_count() {
        let mut received = Message::new("orders", MessageType::Command, "x");
        received.header.handled_count = 3;
        let copy = crate::rejection::stamp(&received, Some(&Rejection::delivery_error("budget spent")));
        for num_delivered in [1, 4] {
            let read = read_stream_message(&delivered(&copy), Some(num_delivered), &ReaderWarnings::default()).unwrap();
            assert_eq!(read.header.handled_count, 3);
            assert!(read.header.bag.contains_key(keys::REJECTION_REASON));
        }
    }

    #[test]
    fn a_message_without_the_header_is_malformed_and_routed_with_its_body() {
        let mut raw = delivered(&Message::new("orders", MessageType::Command, "x"));
        raw.headers = None;
        let error = read_stream_message(&raw, Some(1), &ReaderWarnings::default()).unwrap_err();
        assert_eq!(error.detail, "attribute messageType is missing");
        let stand_in = unreadable(&raw, "orders");
        assert_eq!(stand_in.body.bytes.as_slice(), b"x".as_slice());
        assert_eq!(stand_in.receipt.as_deref(), Some(ACK));
    }
}
