//! The transport's message assertion: what must survive a round trip through the broker.

use std::time::UNIX_EPOCH;

use gateway::Message;

pub trait MessageAssertion: Send + Sync {
    /// Panics, naming the field, when `received` is not the message that was `sent`.
    fn assert_same(&self, sent: &Message, received: &Message);
}

/// Every header field and the body, with the timestamp at millisecond precision (what broker
/// attributes carry). The send delay is a property of the send, not of the message.
#[derive(Debug, Clone, Copy, Default)]
pub struct FullHeader;

fn millis(message: &Message) -> u128 {
    message.header.timestamp.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

impl MessageAssertion for FullHeader {
    fn assert_same(&self, sent: &Message, received: &Message) {
        let (s, r) = (&sent.header, &received.header);
        assert_eq!(r.id, s.id, "id");
        assert_eq!(r.topic, s.topic, "topic of {}", s.id);
        assert_eq!(r.message_type, s.message_type, "message type of {}", s.id);
        assert_eq!(millis(received), millis(sent), "timestamp (ms) of {}", s.id);
        assert_eq!(r.correlation_id, s.correlation_id, "correlation id of {}", s.id);
        assert_eq!(r.content_type, s.content_type, "content type of {}", s.id);
        assert_eq!(r.partition_key, s.partition_key, "partition key of {}", s.id);
        assert_eq!(r.reply_to, s.reply_to, "reply-to of {}", s.id);
        assert_eq!(r.handled_count, s.handled_count, "handled count of {}", s.id);
        assert_eq!(r.bag, s.bag, "bag of {}", s.id);
        assert_eq!(received.body, sent.body, "body of {}", s.id);
    }
}
