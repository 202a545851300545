//! A message as an Azure queue message's text, the receipt its settlements need, and the reader
//! that turns a received message back into a `Message`.

use azure_storage_queue::models::ReceivedMessage;

use crate::message::Message;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};
use crate::transport::envelope;

/// What settling a received message needs: its id and the pop receipt of the receive that handed
/// it out (a later receive or update makes a new one, and the old one stops working). Kept in
/// `Message::receipt` as `<id> <pop receipt>`: neither holds a space (a GUID, base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub message_id: String,
    pub pop_receipt: String,
}

impl Receipt {
    fn text(&self) -> String {
        format!("{} {}", self.message_id, self.pop_receipt)
    }

    /// The receipt of `message`, as the reader left it.
    pub fn of(message: &Message) -> Option<Receipt> {
        let (message_id, pop_receipt) = message.receipt.as_deref()?.split_once(' ')?;
        Some(Receipt { message_id: message_id.to_owned(), pop_receipt: pop_receipt.to_owned() })
    }

    fn of_received(received: &ReceivedMessage) -> Option<Receipt> {
        Some(Receipt { message_id: received.message_id.clone()?, pop_receipt: received.pop_receipt.clone()? })
    }
}

/// The reader: a received queue message as a `Message`, its handled count resolved with the
/// service's `DequeueCount` (first delivery = 1). The receipt is its id and pop receipt.
pub fn read_queue_message(received: &ReceivedMessage, warnings: &ReaderWarnings) -> Result<Message, MalformedMessage> {
    let receipt = Receipt::of_received(received)
        .ok_or_else(|| MalformedMessage { detail: "the service gave no message id or pop receipt".to_owned() })?;
    let text = received.message_text.as_deref().unwrap_or_default();
    envelope::read_payload(text.as_bytes(), received.dequeue_count, Some(receipt.text()), warnings)
}

/// A stand-in for a message that cannot be read, so it is routed as Unacceptable with its text.
pub(super) fn unreadable(received: &ReceivedMessage, queue: &str) -> Message {
    let receipt = Receipt::of_received(received);
    let id = received.message_id.clone().unwrap_or_else(|| queue.to_owned());
    let text = received.message_text.as_deref().unwrap_or_default();
    attributes::unreadable(&id, queue, text, receipt.map(|r| r.text()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BagValue, MessageType};
    use crate::rejection::{keys, Rejection};

    fn received(message: &Message, dequeue_count: i64) -> ReceivedMessage {
        let text = String::from_utf8(envelope::to_payload("orders", message).unwrap()).unwrap();
        // The model is non-exhaustive: made as the client makes it, field by field.
        let mut received = ReceivedMessage::default();
        received.dequeue_count = Some(dequeue_count);
        received.message_id = Some("2eda9978-57d0-4566-842e-7c52b83512c5".into());
        received.message_text = Some(text);
        received.pop_receipt = Some("MDREZWMyMDI2MjE6MDA6MzFiOGU5".into());
        received
    }

    #[test]
    fn the_message_round_trips_and_the_receipt_is_its_id_and_pop_receipt() {
        let mut sent = Message::new("orders", MessageType::Event, "{\"a\":1}");
        sent.header.correlation_id = Some("c-1".into());
        sent.header.bag.insert("number".into(), BagValue::Int(-7));
        let read = read_queue_message(&received(&sent, 1), &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.id, sent.header.id);
        assert_eq!(read.header.bag, sent.header.bag);
        assert_eq!(read.header.correlation_id, sent.header.correlation_id);
        assert_eq!(read.body.bytes, sent.body.bytes);
        let receipt = Receipt::of(&read).unwrap();
        assert_eq!(receipt.message_id, "2eda9978-57d0-4566-842e-7c52b83512c5");
        assert_eq!(receipt.pop_receipt, "MDREZWMyMDI2MjE6MDA6MzFiOGU5");
    }

    #[test]
    fn dequeue_counts_1_2_3_present_0_1_2_whatever_the_header_count() {
        let mut sent = Message::new("orders", MessageType::Command, "x");
        sent.header.handled_count = 5;
        let counts: Vec<u32> = (1..=3)
            .map(|n| read_queue_message(&received(&sent, n), &ReaderWarnings::default()).unwrap().header.handled_count)
            .collect();
        assert_eq!(counts, [0, 1, 2]);
    }

    /// a routed rejection copy keeps its stamped count, not the dead-letter queue's count.
    #[test]
    fn a_rejection_copy_keeps_its_stamped_count() {
        let mut message = Message::new("orders", MessageType::Command, "x");
        message.header.handled_count = 3;
        let copy = crate::rejection::stamp(&message, Some(&Rejection::delivery_error("budget spent")));
        for dequeue_count in [1, 4] {
            let read = read_queue_message(&received(&copy, dequeue_count), &ReaderWarnings::default()).unwrap();
            assert_eq!(read.header.handled_count, 3);
            assert!(read.header.bag.contains_key(keys::REJECTION_REASON));
        }
    }

    #[test]
    fn a_text_that_is_no_envelope_is_malformed_and_routed_with_its_text() {
        let mut raw = received(&Message::new("orders", MessageType::Command, "x"), 1);
        raw.message_text = Some("plain text".into());
        let problem = read_queue_message(&raw, &ReaderWarnings::default()).unwrap_err();
        assert!(problem.detail.starts_with("the payload is not a JSON envelope"), "{problem}");
        let stand_in = unreadable(&raw, "orders");
        assert_eq!(stand_in.body.bytes.as_slice(), b"plain text".as_slice());
        assert_eq!(stand_in.header.id, "2eda9978-57d0-4566-842e-7c52b83512c5");
        assert!(Receipt::of(&stand_in).is_some());
    }
}
