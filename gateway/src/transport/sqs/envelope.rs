//! The SNS to SQS envelope (raw delivery off): a JSON document whose `Message` is the body and
//! whose `MessageAttributes` carry the header. Deserialised borrowing from the SQS body.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;

use crate::message::Message;
use crate::transport::attributes::{read_message, MalformedMessage, ReaderWarnings};

#[derive(Deserialize)]
struct Notification<'a> {
    #[serde(rename = "Message", borrow)]
    message: Cow<'a, str>,
    #[serde(rename = "MessageAttributes", borrow, default)]
    attributes: HashMap<Cow<'a, str>, Attribute<'a>>,
}

#[derive(Deserialize)]
struct Attribute<'a> {
    #[serde(rename = "Value", borrow)]
    value: Cow<'a, str>,
}

/// Reads an SNS notification delivered to SQS; the handled count is resolved after the bag.
pub fn read_sns_envelope(
    body: &str,
    broker_count: Option<i64>,
    receipt: Option<String>,
    warnings: &ReaderWarnings,
) -> Result<Message, MalformedMessage> {
    let notification: Notification =
        serde_json::from_str(body).map_err(|error| MalformedMessage { detail: format!("SNS envelope: {error}") })?;
    let attributes = &notification.attributes;
    read_message(
        |name| attributes.get(name).map(|a| a.value.as_ref()),
        &notification.message,
        broker_count,
        receipt,
        warnings,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_yields_its_message_and_attributes() {
        let body = r#"{"Type":"Notification","MessageId":"m","TopicArn":"arn:t","Message":"{\"order\":1}",
            "MessageAttributes":{"id":{"Type":"String","Value":"42"},"topic":{"Type":"String","Value":"orders"},
            "messageType":{"Type":"String","Value":"Event"},"timestamp":{"Type":"String","Value":"1000"},
            "handledCount":{"Type":"String","Value":"4"}}}"#;
        let message = read_sns_envelope(body, Some(2), Some("r".into()), &ReaderWarnings::default()).unwrap();
        assert_eq!(message.header.id, "42");
        assert_eq!(message.body.bytes, br#"{"order":1}"#);
        assert_eq!(message.header.handled_count, 1, "the broker counter, normalised, not the header's 4");
    }

    #[test]
    fn a_malformed_envelope_says_why() {
        let error =
            read_sns_envelope("{\"Type\":\"Notification\"}", None, None, &ReaderWarnings::default()).unwrap_err();
        assert!(error.detail.starts_with("SNS envelope: missing field `Message`"), "{}", error.detail);
        assert!(read_sns_envelope("not json", None, None, &ReaderWarnings::default()).is_err());
    }
}
