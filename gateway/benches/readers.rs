//! Bytes allocated per message by each transport's reader (broker message → `Message`), on
//! ADR 0077's shape: a 256-byte body and one bag entry; the median of 5 rounds of 1,000 reads.
//! A counting global allocator sums requested bytes; the figure goes to BENCHMARKS.md.
//! Run: `cargo bench -p gateway --all-features --bench readers`. Each transport's reader is
//! measured when its feature is on, so a single feature builds too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use gateway::transport::attributes as wire;
use gateway::{Message, MessageType};

struct Counting;

static BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const ROUNDS: usize = 5;
const READS: usize = 1_000;

fn adr_shaped_message() -> Message {
    let mut message = Message::new("orders", MessageType::Command, vec![b'x'; 256]);
    message.header.bag.insert("orderType".into(), "express".into());
    message
}

/// The median over rounds of the bytes one read allocates.
fn bytes_per_message(mut read: impl FnMut()) -> usize {
    let mut rounds: Vec<usize> = (0..ROUNDS)
        .map(|_| {
            let before = BYTES.load(Ordering::Relaxed);
            for _ in 0..READS {
                read();
            }
            (BYTES.load(Ordering::Relaxed) - before) / READS
        })
        .collect();
    rounds.sort_unstable();
    rounds[ROUNDS / 2]
}

/// A reader's figure, printed as one line of the table.
fn report(reader: &str, bytes: usize) {
    println!("{reader}: {bytes} B");
}

#[cfg(feature = "sqs")]
mod sqs {
    use super::*;
    use aws_sdk_sqs::types::{Message as SqsMessage, MessageAttributeValue, MessageSystemAttributeName};
    use gateway::transport::sqs::{read_sqs_message, Envelope};

    fn raw_sqs(message: &Message) -> SqsMessage {
        let mut builder = SqsMessage::builder()
            .message_id("00000000-0000-0000-0000-000000000000")
            .receipt_handle("receipt-handle-as-long-as-sqs-makes-them-0123456789abcdef")
            .body(String::from_utf8(message.body.bytes.clone()).unwrap())
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "1");
        for (name, value) in wire::header_attributes(message) {
            builder = builder.message_attributes(
                name,
                MessageAttributeValue::builder().data_type("String").string_value(value).build().unwrap(),
            );
        }
        builder.build()
    }

    fn sns_enveloped(message: &Message) -> SqsMessage {
        let attributes: serde_json::Map<String, serde_json::Value> = wire::header_attributes(message)
            .into_iter()
            .map(|(name, value)| (name.to_owned(), serde_json::json!({ "Type": "String", "Value": value })))
            .collect();
        let envelope = serde_json::json!({
            "Type": "Notification",
            "MessageId": "00000000-0000-0000-0000-000000000000",
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
            "Message": String::from_utf8(message.body.bytes.clone()).unwrap(),
            "Timestamp": "2026-11-30T00:00:00.000Z",
            "SignatureVersion": "1",
            "MessageAttributes": attributes,
        });
        SqsMessage::builder()
            .message_id("00000000-0000-0000-0000-000000000001")
            .receipt_handle("receipt-handle-as-long-as-sqs-makes-them-0123456789abcdef")
            .body(envelope.to_string())
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "1")
            .build()
    }

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        let (raw, enveloped) = (raw_sqs(message), sns_enveloped(message));
        report(
            "sqs (raw attributes)",
            bytes_per_message(|| drop(black_box(read_sqs_message(black_box(&raw), Envelope::Raw, warnings).unwrap()))),
        );
        report(
            "sns (SNS envelope in SQS)",
            bytes_per_message(|| {
                drop(black_box(read_sqs_message(black_box(&enveloped), Envelope::Sns, warnings).unwrap()))
            }),
        );
    }
}

#[cfg(feature = "gcp")]
mod gcp {
    use super::*;
    use gateway::transport::gcp::{proto, read_received_message, read_streamed_message, StreamedMessage};

    fn pubsub_attributes(message: &Message) -> std::collections::HashMap<String, String> {
        wire::header_attributes(message).into_iter().map(|(name, value)| (name.to_owned(), value)).collect()
    }

    fn pulled(message: &Message) -> proto::ReceivedMessage {
        proto::ReceivedMessage {
            ack_id: "projects/conformance/subscriptions/orders:1".into(),
            delivery_attempt: 1,
            message: Some(proto::PubsubMessage {
                data: message.body.bytes.clone(),
                attributes: pubsub_attributes(message),
                message_id: "1".into(),
                ..Default::default()
            }),
        }
    }

    fn streamed(message: &Message) -> StreamedMessage {
        StreamedMessage::new().set_data(message.body.bytes.clone()).set_attributes(pubsub_attributes(message))
    }

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        let (pull, stream) = (pulled(message), streamed(message));
        report(
            "gcp pull (ReceivedMessage)",
            bytes_per_message(|| drop(black_box(read_received_message(black_box(&pull), warnings).unwrap()))),
        );
        // The stream reader is handed the receipt the channel makes; its allocation counts too.
        report(
            "gcp stream (PubsubMessage)",
            bytes_per_message(|| {
                let receipt = "00000000-0000-0000-0000-000000000000".to_owned();
                drop(black_box(read_streamed_message(black_box(&stream), Some(1), receipt, warnings).unwrap()))
            }),
        );
    }
}

#[cfg(feature = "rocketmq")]
mod rocketmq {
    use super::*;
    use gateway::transport::rocketmq::{read_popped_message, to_rocketmq_message, PoppedMessage};

    /// As the broker pops it: the produced message, a first delivery, and the pop checkpoint the
    /// broker adds (the reader keeps it as the receipt).
    fn popped(message: &Message) -> PoppedMessage {
        use rocketmq_model::common::message::{MessageConst, MessageTrait};
        let mut popped = PoppedMessage::default();
        popped.set_message_inner(to_rocketmq_message("orders", message, std::time::Duration::ZERO).unwrap());
        popped.set_reconsume_times(0);
        popped.put_property(MessageConst::PROPERTY_POP_CK.into(), "0 1796031448693 10000 1 0 broker-a 0 0".into());
        popped
    }

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        let pop = popped(message);
        report(
            "rocketmq pop (MessageExt)",
            bytes_per_message(|| drop(black_box(read_popped_message(black_box(&pop), warnings).unwrap()))),
        );
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use gateway::transport::postgres::{read_row, ReceivedRow};

    /// As the receive statement returns it: the header as parallel name and value arrays, a
    /// first delivery.
    fn row(message: &Message) -> ReceivedRow {
        let (attribute_names, attribute_values) =
            wire::header_attributes(message).into_iter().map(|(name, value)| (name.to_owned(), value)).unzip();
        ReceivedRow { id: 1, deliveries: 1, attribute_names, attribute_values, body: message.body.bytes.clone() }
    }

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        let row = row(message);
        report(
            "postgres (a queue row)",
            bytes_per_message(|| drop(black_box(read_row(black_box(&row), warnings).unwrap()))),
        );
    }
}

#[cfg(feature = "mqtt")]
mod mqtt {
    use super::*;
    use gateway::transport::mqtt::{read_payload, to_payload};

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        let payload = to_payload("orders", message).unwrap();
        // The channel hands the reader a copy of the session's receipt; its allocation counts too.
        report(
            "mqtt (JSON envelope payload)",
            bytes_per_message(|| {
                let receipt = "conformance-session:1".to_owned();
                drop(black_box(read_payload(black_box(&payload), None, Some(receipt), warnings).unwrap()))
            }),
        );
    }
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use gateway::transport::redis::{read_entry, to_fields, StreamEntry};

    /// As `XREADGROUP` returns it: the entry id and its fields, a first delivery.
    fn entry(message: &Message) -> StreamEntry {
        let fields = to_fields(message).into_iter().map(|(name, value)| (name.as_bytes().to_vec(), value)).collect();
        StreamEntry { id: "1796031448693-0".into(), fields }
    }

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        let entry = entry(message);
        report(
            "redis streams (stream entry)",
            bytes_per_message(|| drop(black_box(read_entry(black_box(&entry), Some(1), warnings).unwrap()))),
        );
    }
}

#[cfg(feature = "rabbitmq")]
mod rabbitmq {
    use super::*;
    use gateway::transport::rabbitmq::{read_delivery, to_headers, AMQPValue, BasicProperties, Delivery, QueueType};

    /// As `basic.get` returns it: the header as AMQP headers; on a quorum queue, a second delivery
    /// carrying the broker's `x-delivery-count`.
    fn delivery(message: &Message, quorum: bool) -> Delivery {
        let mut headers = to_headers(message);
        if quorum {
            headers.insert("x-delivery-count".into(), AMQPValue::LongLongInt(1));
        }
        let mut delivery = Delivery::mock(7, "".into(), "orders".into(), quorum, message.body.bytes.clone());
        delivery.properties = BasicProperties::default().with_headers(headers);
        delivery
    }

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        for (reader, queue_type) in [
            ("rabbitmq classic (Delivery)", QueueType::Classic),
            ("rabbitmq quorum (Delivery, x-delivery-count)", QueueType::Quorum),
        ] {
            let delivery = delivery(message, queue_type == QueueType::Quorum);
            report(
                reader,
                bytes_per_message(|| {
                    drop(black_box(read_delivery(black_box(&delivery), queue_type, warnings).unwrap()))
                }),
            );
        }
    }
}

#[cfg(feature = "kafka")]
mod kafka {
    use super::*;
    use gateway::transport::kafka::{read_record, to_record_headers, Record};

    /// As the consumer hands it over: the header as record headers, partition 0, offset 41.
    fn record(message: &Message) -> Record {
        let timestamp = rdkafka::message::Timestamp::NotAvailable;
        Record::new(
            Some(message.body.bytes.clone()),
            None,
            "orders".into(),
            timestamp,
            0,
            41,
            Some(to_record_headers(message)),
        )
    }

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        let record = record(message);
        report(
            "kafka (record)",
            bytes_per_message(|| drop(black_box(read_record(black_box(&record), warnings).unwrap()))),
        );
    }
}

#[cfg(feature = "nats")]
mod nats {
    use super::*;
    use gateway::transport::nats::{read_stream_message, to_headers};

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        let delivered = gateway::transport::nats::native::Message {
            subject: "orders".into(),
            reply: Some("$JS.ACK.orders.orders-group.1.7.7.1700000000000000000.0".into()),
            payload: message.body.bytes.clone().into(),
            headers: Some(to_headers(message)),
            status: None,
            description: None,
            length: 0,
        };
        report(
            "nats jetstream (stream message)",
            bytes_per_message(|| {
                drop(black_box(read_stream_message(black_box(&delivered), Some(1), warnings).unwrap()))
            }),
        );
    }
}

#[cfg(feature = "azure")]
mod azure {
    use super::*;
    use gateway::transport::azure::native::models::ReceivedMessage;
    use gateway::transport::azure::read_queue_message;

    pub fn measure(message: &Message, warnings: &wire::ReaderWarnings) {
        let text = String::from_utf8(gateway::transport::envelope::to_payload("orders", message).unwrap()).unwrap();
        // The model is non-exhaustive: made as the client makes it, field by field.
        let mut received = ReceivedMessage::default();
        received.dequeue_count = Some(1);
        received.message_id = Some("2eda9978-57d0-4566-842e-7c52b83512c5".into());
        received.pop_receipt = Some("MDREZWMyMDI2MjE6MDA6MzFiOGU5".into());
        received.message_text = Some(text);
        report(
            "azure queue (the JSON envelope text; the receipt the reader makes included)",
            bytes_per_message(|| drop(black_box(read_queue_message(black_box(&received), warnings).unwrap()))),
        );
    }
}

fn main() {
    // `cargo bench` passes harness flags such as --bench; there is nothing to choose here.
    let message = adr_shaped_message();
    let warnings = wire::ReaderWarnings::new("bench");
    println!("reader bytes allocated per message (median of {ROUNDS} rounds of {READS}; 256-byte body, one bag entry)");
    #[cfg(feature = "sqs")]
    sqs::measure(&message, &warnings);
    #[cfg(feature = "gcp")]
    gcp::measure(&message, &warnings);
    #[cfg(feature = "rocketmq")]
    rocketmq::measure(&message, &warnings);
    #[cfg(feature = "postgres")]
    postgres::measure(&message, &warnings);
    #[cfg(feature = "mqtt")]
    mqtt::measure(&message, &warnings);
    #[cfg(feature = "redis")]
    redis::measure(&message, &warnings);
    #[cfg(feature = "rabbitmq")]
    rabbitmq::measure(&message, &warnings);
    #[cfg(feature = "kafka")]
    kafka::measure(&message, &warnings);
    #[cfg(feature = "nats")]
    nats::measure(&message, &warnings);
    #[cfg(feature = "azure")]
    azure::measure(&message, &warnings);
}
