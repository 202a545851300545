//! The message as one text, for the brokers whose messages carry no attributes (MQTT 3.1.1 has no
//! user properties; an Azure queue message is only its text): a JSON envelope,
//! `{"header": {<attribute>: <string>}, "body": <string>}`, whose header is the attribute layout
//! `transport::attributes` shares with SQS, Pub/Sub and RocketMQ (header fields own their names
//! and the bag is one JSON attribute), read back by the same reader.

use crate::error::{ChannelError, ErrorKind};
use crate::message::Message;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};

const HEADER: &str = "header";
const BODY: &str = "body";

/// The envelope of `message`. The body must be UTF-8 (it travels as a JSON string).
pub fn to_payload(topic: &str, message: &Message) -> Result<Vec<u8>, ChannelError> {
    let body = std::str::from_utf8(&message.body.bytes).map_err(|e| {
        ChannelError::broker(
            topic,
            "send",
            ErrorKind::Unsupported,
            format!("the JSON envelope carries a UTF-8 body: {e}"),
        )
    })?;
    let header: serde_json::Map<String, serde_json::Value> = attributes::header_attributes(message)
        .into_iter()
        .map(|(name, value)| (name.to_owned(), serde_json::Value::String(value)))
        .collect();
    let mut envelope = serde_json::Map::new();
    envelope.insert(HEADER.to_owned(), serde_json::Value::Object(header));
    envelope.insert(BODY.to_owned(), serde_json::Value::from(body));
    Ok(serde_json::Value::Object(envelope).to_string().into_bytes())
}

/// The reader: an envelope as a `Message`, its handled count resolved with the broker's
/// delivery count where it keeps one (`delivery_count::resolve`); without one (MQTT) the count is
/// the header's, which republishing keeps growing.
pub fn read_payload(
    payload: &[u8],
    broker_count: Option<i64>,
    receipt: Option<String>,
    warnings: &ReaderWarnings,
) -> Result<Message, MalformedMessage> {
    let malformed = |detail: String| MalformedMessage { detail };
    let envelope: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| malformed(format!("the payload is not a JSON envelope: {e}")))?;
    let header = envelope
        .get(HEADER)
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| malformed(format!("the envelope has no {HEADER} object")))?;
    let body = envelope
        .get(BODY)
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| malformed(format!("the envelope has no {BODY} string")))?;
    if let Some((name, _)) = header.iter().find(|(_, value)| !value.is_string()) {
        return Err(malformed(format!("header attribute {name} is not a string")));
    }
    let attribute = |name: &str| header.get(name).and_then(serde_json::Value::as_str);
    attributes::read_message(attribute, body, broker_count, receipt, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BagValue, MessageType};
    use crate::rejection::{self, keys, Rejection};

    #[test]
    fn the_header_and_body_round_trip_with_the_header_count() {
        let mut sent = Message::new("orders", MessageType::Event, "{\"a\":1}");
        sent.header.correlation_id = Some("c-1".into());
        sent.header.handled_count = 2;
        sent.header.bag.insert("number".into(), BagValue::Int(-7));
        let read =
            read_payload(&to_payload("orders", &sent).unwrap(), None, Some("r".into()), &ReaderWarnings::default())
                .unwrap();
        assert_eq!(read.header.id, sent.header.id);
        assert_eq!(read.header.correlation_id, sent.header.correlation_id);
        assert_eq!(read.header.bag, sent.header.bag);
        assert_eq!(read.header.handled_count, 2, "no broker counter: the republished count stands");
        assert_eq!(read.body.bytes, sent.body.bytes);
        assert_eq!(read.receipt.as_deref(), Some("r"));
    }

    #[test]
    fn a_rejection_copy_keeps_its_stamped_count() {
        let mut received = Message::new("orders", MessageType::Command, "x");
        received.header.handled_count = 3;
        let copy = rejection::stamp(&received, Some(&Rejection::delivery_error("budget spent")));
        let read = read_payload(&to_payload("dlq", &copy).unwrap(), Some(5), None, &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.handled_count, 3);
        assert!(read.header.bag.contains_key(keys::REJECTION_REASON));
    }

    #[test]
    fn a_payload_that_is_not_an_envelope_is_malformed_and_says_why() {
        let warnings = ReaderWarnings::default();
        let problem = read_payload(b"plain text", None, None, &warnings).unwrap_err();
        assert!(problem.detail.starts_with("the payload is not a JSON envelope"), "{problem}");
        let problem = read_payload(br#"{"header":{"id":"1"},"body":"b"}"#, None, None, &warnings).unwrap_err();
        assert!(problem.detail.contains("messageType"), "{problem}");
        let problem = read_payload(br#"{"header":{"id":1},"body":"b"}"#, None, None, &warnings).unwrap_err();
        assert_eq!(problem.detail, "header attribute id is not a string");
    }

    #[test]
    fn a_body_that_is_not_utf8_is_refused_on_send() {
        let message = Message::new("orders", MessageType::Event, vec![0xff, 0xfe]);
        assert_eq!(to_payload("orders", &message).unwrap_err().kind(), Some(ErrorKind::Unsupported));
    }
}
