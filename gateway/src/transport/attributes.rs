//! The message on the wire for brokers with string-valued message attributes (SQS, SNS and
//! Pub/Sub share the layout), and the reader that turns received attributes back into a
//! `Message`. Only these names are read, so a broker's own attributes never enter the bag. The reader
//! resolves the handled count after the bag is read, so the delivery-count rule sees both.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// A channel's record of the odd values its reader has already warned about, so each kind is
/// logged once per channel with the value seen, never once per message.
#[derive(Debug, Default)]
pub struct ReaderWarnings {
    channel: String,
    header_count: AtomicBool,
    broker_count: AtomicBool,
}

impl ReaderWarnings {
    pub fn new(channel: &str) -> ReaderWarnings {
        ReaderWarnings { channel: channel.to_owned(), ..ReaderWarnings::default() }
    }

    /// A header count that is not a number, on a message whose count the broker decides.
    pub fn unreadable_header_count(&self, value: &str) {
        if !self.header_count.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                channel = %self.channel,
                value,
                "a received {} is not a count; the broker's counter decides, so it is ignored (logged once per channel)",
                names::HANDLED_COUNT
            );
        }
    }

    /// A broker delivery counter that is not a number: read as no counter.
    pub fn unreadable_broker_count(&self, value: &str) {
        if !self.broker_count.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                channel = %self.channel,
                value,
                "the broker's delivery counter is not a number; the header count stands (logged once per channel)"
            );
        }
    }

    /// Whether anything was warned about (for tests).
    pub fn warned(&self) -> bool {
        self.header_count.load(Ordering::Relaxed) || self.broker_count.load(Ordering::Relaxed)
    }
}

/// A broker counter carried as text: `None` when absent, and when unreadable (warned once).
pub fn broker_count_from_text(text: Option<&str>, warnings: &ReaderWarnings) -> Option<i64> {
    let text = text?;
    let count = text.parse().ok();
    if count.is_none() {
        warnings.unreadable_broker_count(text);
    }
    count
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
///
/// An unreadable header count makes the message malformed when that count is what the consumer
/// would be shown (a routed rejection copy keeps its stamped count; without a broker counter the
/// header count stands): presenting 0 instead would silently reset the delivery budget. Where the
/// broker's counter decides, the bad value is only warned about, once per channel.
pub fn read_message<'a>(
    attribute: impl Fn(&str) -> Option<&'a str>,
    body: &str,
    broker_count: Option<i64>,
    receipt: Option<String>,
    warnings: &ReaderWarnings,
) -> Result<Message, MalformedMessage> {
    let required = |name: &str| attribute(name).ok_or_else(|| malformed(format!("attribute {name} is missing")));
    let message_type = required(names::MESSAGE_TYPE)?;
    let message_type = MessageType::parse(message_type).ok_or_else(|| {
        malformed(format!("attribute {}: {message_type:?} is not one of Command, Event, Document", names::MESSAGE_TYPE))
    })?;
    let millis: u64 =
        required(names::TIMESTAMP)?.parse().map_err(|e| malformed(format!("attribute {}: {e}", names::TIMESTAMP)))?;
    let bag = match attribute(names::BAG) {
        Some(json) => bag_from_json(json)?,
        None => Bag::new(),
    };
    // An absent header count is 0 (a producer that is not the gateway's).
    let header_count = match attribute(names::HANDLED_COUNT).map(|text| (text, text.parse::<u32>())) {
        None => 0,
        Some((_, Ok(count))) => count,
        Some((text, Err(_))) if delivery_count::header_decides(broker_count, &bag) => {
            return Err(malformed(format!(
                "attribute {}: {text:?} is not a count, and it is the count this message must present",
                names::HANDLED_COUNT
            )))
        }
        Some((text, Err(_))) => {
            warnings.unreadable_header_count(text);
            0
        }
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
        read_message(
            |name| attributes.get(name).map(String::as_str),
            &body,
            broker_count,
            None,
            &ReaderWarnings::default(),
        )
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
        let error =
            read_message(|n| attributes.get(n).copied(), "", None, None, &ReaderWarnings::default()).unwrap_err();
        assert_eq!(error.detail, "attribute messageType: \"Query\" is not one of Command, Event, Document");
        let attributes: HashMap<&str, &str> =
            [("id", "1"), ("topic", "t"), ("messageType", "Event"), ("timestamp", "0"), ("bag", "[1]")].into();
        let error =
            read_message(|n| attributes.get(n).copied(), "", None, None, &ReaderWarnings::default()).unwrap_err();
        assert_eq!(error.detail, "attribute bag is not a JSON object");
    }

    /// `message` on the wire with `handledCount` replaced by `count`, read with `broker_count`.
    fn read_with_count(
        message: &Message,
        count: &str,
        broker_count: Option<i64>,
        warnings: &ReaderWarnings,
    ) -> Result<Message, MalformedMessage> {
        let mut attributes: HashMap<&str, String> = header_attributes(message).into_iter().collect();
        attributes.insert(names::HANDLED_COUNT, count.to_owned());
        read_message(|name| attributes.get(name).map(String::as_str), "b", broker_count, None, warnings)
    }

    #[test]
    fn an_unreadable_count_the_message_must_present_makes_it_malformed() {
        let mut copy = sample();
        copy.header.bag.insert(keys::REJECTION_REASON.into(), "DeliveryError".into());
        let warnings = ReaderWarnings::new("orders-dlq");
        let error = read_with_count(&copy, "three", Some(1), &warnings).unwrap_err();
        assert_eq!(
            error.detail,
            "attribute handledCount: \"three\" is not a count, and it is the count this message must present"
        );
        let error = read_with_count(&sample(), "-1", None, &warnings).unwrap_err();
        assert!(error.detail.contains("\"-1\" is not a count"), "{}", error.detail);
        assert!(!warnings.warned(), "a refused message is routed, not warned about");
    }

    #[test]
    fn an_unreadable_count_the_broker_overrides_is_warned_about_and_ignored() {
        let warnings = ReaderWarnings::new("orders");
        let read = read_with_count(&sample(), "lots", Some(3), &warnings).unwrap();
        assert_eq!(read.header.handled_count, 2);
        assert!(warnings.warned());
    }

    #[test]
    fn an_unreadable_broker_counter_is_no_counter_and_warned_about() {
        let warnings = ReaderWarnings::new("orders");
        assert_eq!(broker_count_from_text(Some("2"), &warnings), Some(2));
        assert_eq!(broker_count_from_text(None, &warnings), None);
        assert!(!warnings.warned());
        assert_eq!(broker_count_from_text(Some("two"), &warnings), None);
        assert!(warnings.warned());
    }
}
