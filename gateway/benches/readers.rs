//! Bytes allocated per message by each transport's reader (broker message → `Message`), on
//! ADR 0077's shape: a 256-byte body and one bag entry; the median of 5 rounds of 1,000 reads.
//! A counting global allocator sums requested bytes; the figure goes to BENCHMARKS.md.
//! Run: `cargo bench -p gateway --features sqs --bench readers`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_sdk_sqs::types::{Message as SqsMessage, MessageAttributeValue, MessageSystemAttributeName};
use gateway::transport::attributes as wire;
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

fn bytes_per_message(raw: &SqsMessage, envelope: Envelope) -> usize {
    let mut rounds: Vec<usize> = (0..ROUNDS)
        .map(|_| {
            let before = BYTES.load(Ordering::Relaxed);
            for _ in 0..READS {
                std::hint::black_box(read_sqs_message(std::hint::black_box(raw), envelope).unwrap());
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
    println!("reader bytes allocated per message (median of {ROUNDS} rounds of {READS}; 256-byte body, one bag entry)");
    println!("sqs (raw attributes): {} B", bytes_per_message(&raw_sqs(&message), Envelope::Raw));
    println!("sns (SNS envelope in SQS): {} B", bytes_per_message(&sns_enveloped(&message), Envelope::Sns));
}
