//! The consumer: a group member on one topic, with manual commits. Settling a record (acknowledge,
//! reject, requeue) commits past it once every earlier record of its partition is settled too
//! (`offsets`); a nack or a failed reject seeks the group back to it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message as _, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};

use super::offsets::Offsets;
use super::producer::KafkaProducer;
use super::{broker_error, CALL_TIMEOUT};
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};
use crate::transport::kit::{self, AfterRouting};
use crate::transport::receive_loop::receive_readable;

/// A record's place, its receipt: `partition:offset`.
fn receipt_of(record: &OwnedMessage) -> String {
    format!("{}:{}", record.partition(), record.offset())
}

fn parse_receipt(receipt: &str) -> Option<(i32, i64)> {
    let (partition, offset) = receipt.split_once(':')?;
    Some((partition.parse().ok()?, offset.parse().ok()?))
}

/// The reader: a record as a `Message`. Kafka has no delivery counter, so the header count
/// stands (`delivery_count::resolve` with no broker count). Only the header names of
/// `transport::attributes` are read; a header whose value is not UTF-8 is as if absent.
pub fn read_record(record: &OwnedMessage, warnings: &ReaderWarnings) -> Result<Message, MalformedMessage> {
    let headers: Vec<(&str, &str)> = record
        .headers()
        .map(|headers| {
            headers.iter().filter_map(|header| Some((header.key, std::str::from_utf8(header.value?).ok()?))).collect()
        })
        .unwrap_or_default();
    let body = std::str::from_utf8(record.payload().unwrap_or_default())
        .map_err(|e| MalformedMessage { detail: format!("the body is not UTF-8: {e}") })?;
    let attribute = |name: &str| headers.iter().find(|(key, _)| *key == name).map(|(_, value)| *value);
    attributes::read_message(attribute, body, None, Some(receipt_of(record)), warnings)
}

pub struct KafkaChannel {
    runtime: GatewayRuntime,
    consumer: Arc<StreamConsumer>,
    subscription: Subscription,
    router: KafkaProducer,
    warnings: ReaderWarnings,
    call_deadline: Duration,
    /// The records handed out, released and settled, by partition: Kafka itself cannot tell a
    /// second settlement from a first, and its commit settles every earlier record too.
    offsets: Mutex<Offsets>,
}

impl KafkaChannel {
    pub(super) fn new(
        runtime: GatewayRuntime,
        consumer: Arc<StreamConsumer>,
        subscription: Subscription,
        router: KafkaProducer,
        call_deadline: Duration,
    ) -> KafkaChannel {
        let warnings = ReaderWarnings::new(&subscription.name);
        KafkaChannel { runtime, consumer, subscription, router, warnings, call_deadline, offsets: Mutex::default() }
    }

    fn offsets(&self) -> std::sync::MutexGuard<'_, Offsets> {
        // Every update is one call that cannot panic midway: a poisoned lock is still consistent.
        self.offsets.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next record to hand out within `wait`: a record fetched again after a seek back that
    /// is still held or already settled is passed over.
    async fn fetch(&self, wait: Duration) -> Result<Option<OwnedMessage>, ChannelError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let consumer = self.consumer.clone();
            let received = self.runtime.call(async move {
                tokio::time::timeout_at(deadline, async { consumer.recv().await.map(|record| record.detach()) }).await
            });
            match received.await {
                Err(_elapsed) => return Ok(None),
                Ok(Ok(record)) if self.offsets().fetched(record.partition(), record.offset()) => {
                    return Ok(Some(record))
                }
                Ok(Ok(_passed_over)) => {}
                Ok(Err(error)) => return Err(broker_error(self.name(), "receive", error)),
            }
        }
    }

    /// Takes `message` out of flight, giving its partition and offset.
    fn take(&self, message: &Message, operation: &'static str) -> Result<(i32, i64), ChannelError> {
        let not_in_flight = || kit::not_in_flight(self.name(), operation, message);
        let receipt = message.receipt.as_deref().ok_or_else(not_in_flight)?;
        let (partition, offset) = parse_receipt(receipt).ok_or_else(not_in_flight)?;
        if self.offsets().take(partition, offset) {
            Ok((partition, offset))
        } else {
            Err(not_in_flight())
        }
    }

    /// Settles the record at `place` (Kafka's acknowledgement): commits the group's offset as far
    /// as every record below it is settled, which may be not at all yet.
    async fn settle(&self, (partition, offset): (i32, i64), operation: &'static str) -> Result<(), ChannelError> {
        let Some(settled_to) = self.offsets().settled(partition, offset) else { return Ok(()) };
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset(&self.subscription.routing_key, partition, Offset::Offset(settled_to))
            .map_err(|e| broker_error(self.name(), operation, e))?;
        let consumer = self.consumer.clone();
        // A synchronous commit blocks its thread: off the runtime's workers. One cut off at the
        // deadline goes on, and lands or not: the record stays settled here, as its handler is
        // done with it (a later commit covers it).
        let committing = async move {
            tokio::task::spawn_blocking(move || consumer.commit(&offsets, CommitMode::Sync))
                .await
                .expect("a commit panicked")
        };
        kit::within(&self.runtime, self.name(), operation, self.call_deadline, committing)
            .await?
            .map_err(|e| broker_error(self.name(), operation, e))
    }

    /// Seeks the group back to the record at `place`: it is fetched again, unchanged, next.
    async fn seek_back(&self, (partition, offset): (i32, i64), operation: &'static str) -> Result<(), ChannelError> {
        let (consumer, topic) = (self.consumer.clone(), self.subscription.routing_key.clone());
        self.runtime
            .call(async move {
                tokio::task::spawn_blocking(move || {
                    consumer.seek(&topic, partition, Offset::Offset(offset), CALL_TIMEOUT)
                })
                .await
                .expect("a seek panicked")
            })
            .await
            .map_err(|e| broker_error(self.name(), operation, e))
    }

    /// The raw record, for routing when it cannot be read.
    fn unreadable(&self, record: &OwnedMessage) -> Message {
        let body = String::from_utf8_lossy(record.payload().unwrap_or_default());
        let id = format!("{}/{}@{}", record.topic(), record.partition(), record.offset());
        attributes::unreadable(&id, &self.subscription.routing_key, &body, Some(receipt_of(record)))
    }
}

#[async_trait]
impl Channel for KafkaChannel {
    // A channel is named after its consumer group.
    fn name(&self) -> &str {
        &self.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        // No pause after an empty fetch: the fetch itself waits.
        let fetch = |wait| self.fetch(wait);
        let route = move |record: OwnedMessage, problem| async move {
            kit::route_unreadable(self, &self.unreadable(&record), problem).await
        };
        let read = |record: &OwnedMessage| read_record(record, &self.warnings);
        receive_readable(timeout, Duration::ZERO, fetch, read, route).await
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        let place = self.take(message, "acknowledge")?;
        self.settle(place, "acknowledge").await
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let place = self.take(message, "reject")?;
        let publish = async |topic: &str, copy: Message| self.router.publish_to(topic, &copy).await;
        let settle = async |after| match after {
            AfterRouting::Acknowledge => self.settle(place, "reject").await,
            AfterRouting::Release => self.seek_back(place, "release after a failed reject").await,
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    /// Kafka has no delay and no counter: the record stays uncommitted for the delay (the
    /// channel waits, as a blocking retry does; the partition's later records wait behind it),
    /// then a copy as the pump left it (its handled count grown) goes to the end of the same
    /// topic and the original is committed. The same topic, not a retry topic: the copy is read
    /// by the very group that read the original, with no second subscription to keep.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let place = self.take(message, "requeue")?;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if let Err(error) = self.router.publish_to(&self.subscription.routing_key, &message.without_receipt()).await {
            if let Err(release) = self.seek_back(place, "release after a failed requeue").await {
                tracing::warn!(channel = self.name(), message_id = message.id(), %release, "releasing after a failed requeue failed too");
            }
            return Err(error);
        }
        self.settle(place, "requeue").await
    }

    /// Seeks back without committing: the same record comes again, as it was sent (a nack does
    /// not count).
    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        let place = self.take(message, "nack")?;
        self.seek_back(place, "nack").await
    }

    /// Leaves the group: another member is assigned the partition and reads on from the last
    /// committed offset, so every record not committed here is read again.
    async fn close(&self) -> Result<(), ChannelError> {
        self.offsets().clear();
        let consumer = self.consumer.clone();
        self.runtime
            .call(async move {
                // Unsubscribing waits for the group thread's answer: off the runtime's workers.
                let unsubscribing = consumer.clone();
                tokio::task::spawn_blocking(move || unsubscribing.unsubscribe())
                    .await
                    .expect("an unsubscribe panicked");
                // The member gives its partitions up (and then leaves) only while it is polled:
                // unpolled, the group would wait out its session for it before assigning them to
                // anyone else. Records still buffered are dropped uncommitted, to be read again.
                let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
                while consumer.assignment().is_ok_and(|assigned| assigned.count() > 0)
                    && tokio::time::Instant::now() < deadline
                {
                    let _ = tokio::time::timeout(Duration::from_millis(100), consumer.recv()).await;
                }
            })
            .await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BagValue, MessageType};
    use crate::rejection::{keys, Rejection};
    use crate::transport::kafka::to_record_headers;
    use rdkafka::message::Timestamp;

    /// `sent` as a consumer would receive it from partition 0 at `offset`.
    fn record(sent: &Message, offset: i64) -> OwnedMessage {
        OwnedMessage::new(
            Some(sent.body.bytes.clone()),
            None,
            "orders".into(),
            Timestamp::NotAvailable,
            0,
            offset,
            Some(to_record_headers(sent)),
        )
    }

    #[test]
    fn the_header_count_stands_and_the_receipt_is_the_records_place() {
        let mut sent = Message::new("orders", MessageType::Command, "x");
        sent.header.handled_count = 2;
        let read = read_record(&record(&sent, 41), &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.handled_count, 2);
        assert_eq!(read.receipt.as_deref(), Some("0:41"));
        assert_eq!(parse_receipt("0:41"), Some((0, 41)));
    }

    #[test]
    fn the_header_round_trips_through_record_headers() {
        let mut sent = Message::new("orders", MessageType::Event, "{\"a\":1}");
        sent.header.correlation_id = Some("c-1".into());
        sent.header.partition_key = Some("p".into());
        sent.header.bag.insert("number".into(), BagValue::Int(-7));
        let read = read_record(&record(&sent, 0), &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.id, sent.header.id);
        assert_eq!(read.header.correlation_id, sent.header.correlation_id);
        assert_eq!(read.header.partition_key, sent.header.partition_key);
        assert_eq!(read.header.bag, sent.header.bag);
        assert_eq!(read.body.bytes, sent.body.bytes);
    }

    /// a forwarded rejection copy keeps its stamped count over a stale bag entry.
    #[test]
    fn a_rejection_copy_keeps_its_stamped_count_over_a_stale_bag_entry() {
        let mut received = Message::new("orders", MessageType::Command, "x");
        received.header.handled_count = 3;
        received.header.bag.insert("handledCount".into(), BagValue::Int(1));
        let copy = crate::rejection::stamp(&received, Some(&Rejection::delivery_error("budget spent")));
        let read = read_record(&record(&copy, 7), &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.handled_count, 3);
        assert!(read.header.bag.contains_key(keys::REJECTION_REASON));
    }

    #[test]
    fn a_record_without_the_header_is_malformed_and_names_what_is_missing() {
        let raw = OwnedMessage::new(Some(b"raw".to_vec()), None, "orders".into(), Timestamp::NotAvailable, 0, 0, None);
        let error = read_record(&raw, &ReaderWarnings::default()).unwrap_err();
        assert!(error.detail.contains("messageType"), "{}", error.detail);
    }
}
