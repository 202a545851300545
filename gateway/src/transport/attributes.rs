//! The message on the wire for brokers with string-valued message attributes (SQS, SNS and
//! Pub/Sub share the layout), and the reader that turns received attributes back into a
//! `Message`. Only these names are read, so a broker's own attributes never enter the bag. The reader
//! resolves the handled count after the bag is read, so the delivery-count rule sees both.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::delivery_count;
use crate::message::{Bag, BagValue, Message, MessageBody, MessageHeader, MessageType};

/// Attribute names. SQS allows ten message attributes: these are exactly ten.
pub mod names {
    pub const ID: &str = "id";
    pub const TOPIC: &str = "topic";
    pub const MESSAGE_TYPE: &str = "messageType";
    pub const TIMESTAMP: &str = "timestamp";
    pub const HANDLED_COUNT: &str = "handledCount";
    pub const CORRELATION_ID: &str = "correlationId";
    pub const CONTENT_TYPE: &str = "contentType";
    pub const PARTITION_KEY: &str = "partitionKey";
    pub const REPLY_TO: &str = "replyTo";
    /// The bag, as one JSON object (strings, integers and booleans keep their type).
    pub const BAG: &str = "bag";
}

/// A broker message that cannot be read as a `Message`: it is routed as Unacceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed message: {detail}")]
pub struct MalformedMessage {
    pub detail: String,
}

fn malformed(detail: impl Into<String>) -> MalformedMessage {
    MalformedMessage { detail: detail.into() }
}

fn bag_to_json(bag: &Bag) -> String {
    let object: serde_json::Map<String, serde_json::Value> = bag
        .iter()
        .map(|(key, value)| {
            let json = match value {
                BagValue::Text(text) => serde_json::Value::from(text.as_str()),
                BagValue::Int(number) => serde_json::Value::from(*number),
                BagValue::Bool(flag) => serde_json::Value::from(*flag),
            };
            (key.clone(), json)
        })
        .collect();
    serde_json::Value::Object(object).to_string()
}

fn bag_from_json(text: &str) -> Result<Bag, MalformedMessage> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| malformed(format!("attribute {}: {e}", names::BAG)))?;
    let object =
        value.as_object().ok_or_else(|| malformed(format!("attribute {} is not a JSON object", names::BAG)))?;
    object
        .iter()
        .map(|(key, value)| {
            let typed = match value {
                serde_json::Value::String(text) => BagValue::Text(text.clone()),
                serde_json::Value::Bool(flag) => BagValue::Bool(*flag),
                serde_json::Value::Number(number) => BagValue::Int(
                    number
                        .as_i64()
                        .ok_or_else(|| malformed(format!("bag entry {key:?}: {number} is not a 64-bit integer")))?,
                ),
                other => {
                    return Err(malformed(format!("bag entry {key:?}: {other} is not a string, integer or boolean")))
                }
            };
            Ok((key.clone(), typed))
        })
        .collect()
}

/// The header as (name, value) attributes; optional fields are left out when absent.
pub fn header_attributes(message: &Message) -> Vec<(&'static str, String)> {
    let header = &message.header;
    let millis = header.timestamp.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let mut attributes = vec![
        (names::ID, header.id.clone()),
        (names::TOPIC, header.topic.clone()),
        (names::MESSAGE_TYPE, header.message_type.as_str().to_owned()),
        (names::TIMESTAMP, millis.to_string()),
        (names::HANDLED_COUNT, header.handled_count.to_string()),
        (names::CONTENT_TYPE, header.content_type.clone()),
        (names::BAG, bag_to_json(&header.bag)),
    ];
    let optional = [
        (names::CORRELATION_ID, &header.correlation_id),
        (names::PARTITION_KEY, &header.partition_key),
        (names::REPLY_TO, &header.reply_to),
    ];
    attributes.extend(optional.into_iter().filter_map(|(name, value)| Some((name, value.clone()?))));
    attributes
}

/// Builds a `Message` from received attributes. `attribute` looks one up by name; `broker_count`
/// is the broker's delivery counter (first delivery = 1), when it supplied one.
pub fn read_message<'a>(
    attribute: impl Fn(&str) -> Option<&'a str>,
    body: &str,
    broker_count: Option<i64>,
    receipt: Option<String>,
) -> Result<Message, MalformedMessage> {
    let required = |name: &str| attribute(name).ok_or_else(|| malformed(format!("attribute {name} is missing")));
    let message_type = required(names::MESSAGE_TYPE)?;
    let message_type = MessageType::parse(message_type).ok_or_else(|| {
        malformed(format!("attribute {}: {message_type:?} is not one of Command, Event, Document", names::MESSAGE_TYPE))
    })?;
    let millis: u64 =
        required(names::TIMESTAMP)?.parse().map_err(|e| malformed(format!("attribute {}: {e}", names::TIMESTAMP)))?;
    // An absent or unparseable header count is 0: the broker counter, when present, decides.
    let header_count = attribute(names::HANDLED_COUNT).and_then(|count| count.parse().ok()).unwrap_or(0);
    let bag = match attribute(names::BAG) {
        Some(json) => bag_from_json(json)?,
        None => Bag::new(),
    };
    let handled_count = delivery_count::resolve(header_count, broker_count, &bag);
    let content_type = attribute(names::CONTENT_TYPE).unwrap_or(crate::message::DEFAULT_CONTENT_TYPE).to_owned();
    Ok(Message {
        header: MessageHeader {
            id: required(names::ID)?.to_owned(),
            topic: required(names::TOPIC)?.to_owned(),
            message_type,
            timestamp: UNIX_EPOCH + Duration::from_millis(millis),
            correlation_id: attribute(names::CORRELATION_ID).map(str::to_owned),
            content_type: content_type.clone(),
            partition_key: attribute(names::PARTITION_KEY).map(str::to_owned),
            reply_to: attribute(names::REPLY_TO).map(str::to_owned),
            handled_count,
            delay: Duration::ZERO,
            bag,
        },
        body: MessageBody { bytes: body.as_bytes().to_vec(), content_type },
        receipt,
    })
}

/// A stand-in for a message that could not be read, so it can still be routed as Unacceptable
/// with its raw body: the broker's id, the source as topic, the reason in the rejection.
pub fn unreadable(broker_id: &str, source: &str, body: &str, receipt: Option<String>) -> Message {
    let mut message = Message::new(source, MessageType::Document, body.as_bytes().to_vec());
    message.header.id = broker_id.to_owned();
    message.header.timestamp = SystemTime::now();
    message.receipt = receipt;
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejection::keys;
    use std::collections::HashMap;

    fn round_trip(message: &Message, broker_count: Option<i64>) -> Result<Message, MalformedMessage> {
        let attributes: HashMap<&str, String> = header_attributes(message).into_iter().collect();
        let body = String::from_utf8(message.body.bytes.clone()).unwrap();
        read_message(|name| attributes.get(name).map(String::as_str), &body, broker_count, None)
    }

    fn sample() -> Message {
        let mut message = Message::new("orders", MessageType::Event, "{\"a\":1}");
        message.header.correlation_id = Some("c-1".into());
        message.header.reply_to = Some("replies".into());
        message.header.bag.insert("text".into(), "x".into());
        message.header.bag.insert("number".into(), BagValue::Int(-7));
        message.header.bag.insert("flag".into(), BagValue::Bool(true));
        message
    }

    #[test]
    fn at_most_ten_attributes_and_the_header_round_trips() {
        let message = sample();
        assert!(header_attributes(&message).len() <= 10);
        let read = round_trip(&message, None).unwrap();
        let millis = |m: &Message| m.header.timestamp.duration_since(UNIX_EPOCH).unwrap().as_millis();
        assert_eq!(millis(&read), millis(&message));
        let mut expected = message.clone();
        expected.header.timestamp = read.header.timestamp;
        expected.body.content_type = read.body.content_type.clone();
        assert_eq!(read, expected);
    }

    #[test]
    fn the_broker_counter_decides_unless_the_message_is_a_routed_copy() {
        let mut message = sample();
        message.header.handled_count = 5;
        assert_eq!(round_trip(&message, Some(1)).unwrap().header.handled_count, 0);
        assert_eq!(round_trip(&message, Some(4)).unwrap().header.handled_count, 3);
        assert_eq!(round_trip(&message, None).unwrap().header.handled_count, 5);
        message.header.bag.insert(keys::REJECTION_REASON.into(), "DeliveryError".into());
        assert_eq!(round_trip(&message, Some(9)).unwrap().header.handled_count, 5);
    }

    #[test]
    fn malformed_attributes_say_what_is_wrong() {
        let attributes: HashMap<&str, &str> =
            [("id", "1"), ("topic", "t"), ("messageType", "Query"), ("timestamp", "0")].into();
        let error = read_message(|n| attributes.get(n).copied(), "", None, None).unwrap_err();
        assert_eq!(error.detail, "attribute messageType: \"Query\" is not one of Command, Event, Document");
        let attributes: HashMap<&str, &str> =
            [("id", "1"), ("topic", "t"), ("messageType", "Event"), ("timestamp", "0"), ("bag", "[1]")].into();
        let error = read_message(|n| attributes.get(n).copied(), "", None, None).unwrap_err();
        assert_eq!(error.detail, "attribute bag is not a JSON object");
    }
}
