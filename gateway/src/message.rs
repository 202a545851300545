//! The message model: a header (with the handled count and the bag) and a body.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

/// Header values carried beside the well-known fields. Ordered (sorted by key) so that every
/// transport writes its attributes in the same order and a message prints the same way twice.
pub type Bag = BTreeMap<String, BagValue>;

/// A bag value: typed enough to round-trip through string-valued broker attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BagValue {
    Text(String),
    Int(i64),
    Bool(bool),
}

impl fmt::Display for BagValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BagValue::Text(text) => f.write_str(text),
            BagValue::Int(number) => write!(f, "{number}"),
            BagValue::Bool(flag) => write!(f, "{flag}"),
        }
    }
}

impl From<&str> for BagValue {
    fn from(text: &str) -> Self {
        BagValue::Text(text.to_owned())
    }
}

impl From<String> for BagValue {
    fn from(text: String) -> Self {
        BagValue::Text(text)
    }
}

impl From<i64> for BagValue {
    fn from(number: i64) -> Self {
        BagValue::Int(number)
    }
}

impl From<bool> for BagValue {
    fn from(flag: bool) -> Self {
        BagValue::Bool(flag)
    }
}

/// What a message asks of its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MessageType {
    #[default]
    Command,
    Event,
    Document,
}

impl MessageType {
    pub const ALL: [MessageType; 3] = [MessageType::Command, MessageType::Event, MessageType::Document];

    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::Command => "Command",
            MessageType::Event => "Event",
            MessageType::Document => "Document",
        }
    }

    /// Parses the wire name; `None` for anything else (the caller names the place).
    pub fn parse(text: &str) -> Option<MessageType> {
        MessageType::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageHeader {
    pub id: String,
    /// The routing key the message was published to.
    pub topic: String,
    pub message_type: MessageType,
    pub timestamp: SystemTime,
    pub correlation_id: Option<String>,
    pub content_type: String,
    pub partition_key: Option<String>,
    pub reply_to: Option<String>,
    /// How many times this message has been handled before; a first delivery presents 0.
    pub handled_count: u32,
    /// The delay the message was sent with.
    pub delay: Duration,
    pub bag: Bag,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageBody {
    pub bytes: Vec<u8>,
    pub content_type: String,
}

/// A message as the gateway sees it. `receipt` is the transport's token for settling this
/// delivery (a receipt handle, an ack id); it is not part of the message and never sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub header: MessageHeader,
    pub body: MessageBody,
    pub receipt: Option<String>,
}

pub const DEFAULT_CONTENT_TYPE: &str = "text/plain";

impl Message {
    /// A new message with a fresh id, the current time and an empty bag.
    pub fn new(topic: impl Into<String>, message_type: MessageType, body: impl Into<Vec<u8>>) -> Message {
        Message {
            header: MessageHeader {
                id: uuid::Uuid::new_v4().to_string(),
                topic: topic.into(),
                message_type,
                timestamp: SystemTime::now(),
                correlation_id: None,
                content_type: DEFAULT_CONTENT_TYPE.to_owned(),
                partition_key: None,
                reply_to: None,
                handled_count: 0,
                delay: Duration::ZERO,
                bag: Bag::new(),
            },
            body: MessageBody { bytes: body.into(), content_type: DEFAULT_CONTENT_TYPE.to_owned() },
            receipt: None,
        }
    }

    pub fn id(&self) -> &str {
        &self.header.id
    }

    /// The same message without the transport's receipt: what a producer publishes.
    pub fn without_receipt(&self) -> Message {
        Message { receipt: None, ..self.clone() }
    }
}
