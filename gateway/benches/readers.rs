//! Bytes allocated per message by each transport's reader (broker message → `Message`), on
//! ADR 0077's shape: a 256-byte body and one bag entry; the median of 5 rounds of 1,000 reads.
//! A counting global allocator sums requested bytes; the figure goes to BENCHMARKS.md.
//! Run: `cargo bench -p gateway --features sqs,gcp,rocketmq --bench readers`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_sdk_sqs::types::{Message as SqsMessage, MessageAttributeValue, MessageSystemAttributeName};
use gateway::transport::attributes as wire;
use gateway::transport::gcp::{proto, read_received_message, read_streamed_message, StreamedMessage};
use gateway::transport::rocketmq::{read_popped_message, to_rocketmq_message, PoppedMessage};
use gateway::transport::sqs::{read_sqs_message, Envelope};
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

fn main() {
    // `cargo bench` passes harness flags such as --bench; there is nothing to choose here.
    let message = adr_shaped_message();
    let warnings = wire::ReaderWarnings::new("bench");
    println!("reader bytes allocated per message (median of {ROUNDS} rounds of {READS}; 256-byte body, one bag entry)");
    let (raw, enveloped) = (raw_sqs(&message), sns_enveloped(&message));
    let sqs =
        bytes_per_message(|| drop(black_box(read_sqs_message(black_box(&raw), Envelope::Raw, &warnings).unwrap())));
    let sns = bytes_per_message(|| {
        drop(black_box(read_sqs_message(black_box(&enveloped), Envelope::Sns, &warnings).unwrap()))
    });
    let (pull, stream) = (pulled(&message), streamed(&message));
    let pulled = bytes_per_message(|| drop(black_box(read_received_message(black_box(&pull), &warnings).unwrap())));
    // The stream reader is handed the receipt the channel makes; its allocation counts too.
    let streamed = bytes_per_message(|| {
        let receipt = "00000000-0000-0000-0000-000000000000".to_owned();
        drop(black_box(read_streamed_message(black_box(&stream), Some(1), receipt, &warnings).unwrap()))
    });
    let pop = popped(&message);
    let rocketmq = bytes_per_message(|| drop(black_box(read_popped_message(black_box(&pop), &warnings).unwrap())));
    println!("sqs (raw attributes): {sqs} B");
    println!("sns (SNS envelope in SQS): {sns} B");
    println!("gcp pull (ReceivedMessage): {pulled} B");
    println!("gcp stream (PubsubMessage): {streamed} B");
    println!("rocketmq pop (MessageExt): {rocketmq} B");
}
