//! A message as a stream entry, and the reader that turns an entry back into a `Message`.

use ::redis::Value;

use crate::message::Message;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};

/// The field holding the body; the header's fields are `attributes::names`.
pub const BODY_FIELD: &str = "body";

/// A stream entry as the broker returned it: its id and its fields, raw, so an entry the reader
/// cannot read is still routed with what it held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamEntry {
    pub id: String,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl StreamEntry {
    fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields.iter().find(|(field, _)| field == name.as_bytes()).map(|(_, value)| value.as_slice())
    }

    /// An entry from the reply element `[id, [field, value, …]]`; `None` for anything else
    /// (a pending entry deleted from the stream reads `[id, nil]`).
    pub(super) fn from_value(value: Value) -> Option<StreamEntry> {
        let Value::Array(mut parts) = value else { return None };
        if parts.len() != 2 {
            return None;
        }
        let fields = parts.pop()?;
        let id = text(parts.pop()?)?;
        let Value::Array(fields) = fields else { return None };
        let mut pairs = Vec::with_capacity(fields.len() / 2);
        let mut fields = fields.into_iter();
        while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
            pairs.push((bytes(name)?, bytes(value)?));
        }
        Some(StreamEntry { id, fields: pairs })
    }
}

fn bytes(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.into_bytes()),
        Value::Int(number) => Some(number.to_string().into_bytes()),
        _ => None,
    }
}

pub(super) fn text(value: Value) -> Option<String> {
    String::from_utf8(bytes(value)?).ok()
}

/// The entry's fields for `message`: the header's attributes, then the body.
pub fn to_fields(message: &Message) -> Vec<(&'static str, Vec<u8>)> {
    let mut fields: Vec<(&'static str, Vec<u8>)> =
        attributes::header_attributes(message).into_iter().map(|(name, value)| (name, value.into_bytes())).collect();
    fields.push((BODY_FIELD, message.body.bytes.clone()));
    fields
}

/// The reader: an entry as a `Message`, its handled count resolved with the group's
/// times-delivered counter (`broker_count`, first delivery = 1). The receipt is the entry id.
pub fn read_entry(
    entry: &StreamEntry,
    broker_count: Option<i64>,
    warnings: &ReaderWarnings,
) -> Result<Message, MalformedMessage> {
    let body =
        entry.field(BODY_FIELD).ok_or_else(|| MalformedMessage { detail: format!("field {BODY_FIELD} is missing") })?;
    let body = std::str::from_utf8(body)
        .map_err(|e| MalformedMessage { detail: format!("field {BODY_FIELD} is not UTF-8: {e}") })?;
    // A header field that is not UTF-8 is as malformed as a missing one: say which.
    let not_text =
        entry.fields.iter().find(|(name, value)| name != BODY_FIELD.as_bytes() && std::str::from_utf8(value).is_err());
    if let Some((name, _)) = not_text {
        return Err(MalformedMessage { detail: format!("field {} is not UTF-8", String::from_utf8_lossy(name)) });
    }
    let attribute = |name: &str| std::str::from_utf8(entry.field(name)?).ok();
    attributes::read_message(attribute, body, broker_count, Some(entry.id.clone()), warnings)
}

/// A stand-in for an entry that cannot be read, so it is routed as Unacceptable with its body.
pub(super) fn unreadable(entry: &StreamEntry, stream: &str) -> Message {
    let body = entry.field(BODY_FIELD).map(String::from_utf8_lossy).unwrap_or_default();
    attributes::unreadable(&entry.id, stream, &body, Some(entry.id.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BagValue, MessageType};
    use crate::rejection::{keys, Rejection};

    fn entry_of(message: &Message) -> StreamEntry {
        let fields = to_fields(message).into_iter().map(|(name, value)| (name.as_bytes().to_vec(), value)).collect();
        StreamEntry { id: "1-0".into(), fields }
    }

    #[test]
    fn the_message_round_trips_and_the_receipt_is_the_entry_id() {
        let mut sent = Message::new("orders", MessageType::Event, "{\"a\":1}");
        sent.header.correlation_id = Some("c-1".into());
        sent.header.bag.insert("number".into(), BagValue::Int(-7));
        let read = read_entry(&entry_of(&sent), Some(1), &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.id, sent.header.id);
        assert_eq!(read.header.bag, sent.header.bag);
        assert_eq!(read.header.correlation_id, sent.header.correlation_id);
        assert_eq!(read.body.bytes, sent.body.bytes);
        assert_eq!(read.receipt.as_deref(), Some("1-0"));
    }

    #[test]
    fn times_delivered_1_2_3_present_0_1_2_whatever_the_header_count() {
        let mut sent = Message::new("orders", MessageType::Command, "x");
        sent.header.handled_count = 5;
        let counts: Vec<u32> = (1..=3)
            .map(|n| read_entry(&entry_of(&sent), Some(n), &ReaderWarnings::default()).unwrap().header.handled_count)
            .collect();
        assert_eq!(counts, [0, 1, 2]);
    }

    /// a routed rejection copy keeps its stamped count, not the dead-letter group's counter.
    #[test]
    fn a_rejection_copy_keeps_its_stamped_count() {
        let mut received = Message::new("orders", MessageType::Command, "x");
        received.header.handled_count = 3;
        let copy = crate::rejection::stamp(&received, Some(&Rejection::delivery_error("budget spent")));
        for times_delivered in [1, 4] {
            let read = read_entry(&entry_of(&copy), Some(times_delivered), &ReaderWarnings::default()).unwrap();
            assert_eq!(read.header.handled_count, 3);
            assert!(read.header.bag.contains_key(keys::REJECTION_REASON));
        }
    }

    #[test]
    fn an_entry_without_the_header_or_body_is_malformed_and_says_what_is_missing() {
        let entry = StreamEntry { id: "1-0".into(), fields: vec![(b"payload".to_vec(), b"x".to_vec())] };
        let error = read_entry(&entry, Some(1), &ReaderWarnings::default()).unwrap_err();
        assert_eq!(error.detail, "field body is missing");
        let entry = StreamEntry { id: "1-0".into(), fields: vec![(b"body".to_vec(), b"x".to_vec())] };
        let error = read_entry(&entry, Some(1), &ReaderWarnings::default()).unwrap_err();
        assert_eq!(error.detail, "attribute messageType is missing");
        let stand_in = unreadable(&entry, "orders");
        assert_eq!((stand_in.id(), stand_in.body.bytes.as_slice()), ("1-0", b"x".as_slice()));
        assert_eq!(stand_in.receipt.as_deref(), Some("1-0"));
    }

    #[test]
    fn reply_elements_parse_and_a_deleted_entry_is_none() {
        let element = Value::Array(vec![
            Value::BulkString(b"5-1".to_vec()),
            Value::Array(vec![Value::BulkString(b"body".to_vec()), Value::BulkString(vec![0xff])]),
        ]);
        let entry = StreamEntry::from_value(element).unwrap();
        assert_eq!(entry, StreamEntry { id: "5-1".into(), fields: vec![(b"body".to_vec(), vec![0xff])] });
        assert_eq!(StreamEntry::from_value(Value::Array(vec![Value::BulkString(b"5-1".to_vec()), Value::Nil])), None);
    }
}
