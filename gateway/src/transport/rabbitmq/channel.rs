//! The consumer: `basic.get` on the subscription's queue (a one-shot pull, so nothing waits
//! unreceived in a prefetch buffer), and ack, nack and republish on the same AMQP channel, whose
//! delivery tags are the receipts.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};

use super::producer::Publisher;
use super::subscription::{QueueType, RabbitMqSubscription};
use super::{broker_error, DELIVERY_COUNT_HEADER, PRIOR_DELIVERIES_HEADER};
use crate::budget::CountingReport;
use crate::channel::Channel;
use crate::error::{ChannelError, ErrorKind};
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};
use crate::transport::kit::{self, AfterRouting};
use crate::transport::receive_loop::receive_readable;

/// `basic.get` answers at once when the queue is empty: the pause before asking again.
const EMPTY_PAUSE: Duration = Duration::from_millis(50);

fn header<'a>(headers: Option<&'a FieldTable>, name: &str) -> Option<&'a AMQPValue> {
    headers?.inner().get(name)
}

fn text(value: &AMQPValue) -> Option<&str> {
    match value {
        AMQPValue::LongString(text) => std::str::from_utf8(text.as_bytes()).ok(),
        AMQPValue::ShortString(text) => Some(text.as_str()),
        _ => None,
    }
}

/// An integer header of any AMQP integer type (`x-delivery-count` is a signed 64-bit `l`).
fn integer(value: &AMQPValue) -> Option<i64> {
    Some(match value {
        AMQPValue::ShortShortInt(n) => i64::from(*n),
        AMQPValue::ShortShortUInt(n) => i64::from(*n),
        AMQPValue::ShortInt(n) => i64::from(*n),
        AMQPValue::ShortUInt(n) => i64::from(*n),
        AMQPValue::LongInt(n) => i64::from(*n),
        AMQPValue::LongUInt(n) => i64::from(*n),
        AMQPValue::LongLongInt(n) => *n,
        other => text(other)?.parse().ok()?,
    })
}

/// The broker's delivery number on a quorum queue (first delivery = 1): the deliveries before
/// this one, `x-delivery-count` (read only when the broker marks the delivery `redelivered`: a
/// count the publisher set shows through on a first delivery), plus those the copy had before a
/// delay queue (`x-gateway-prior-deliveries`), plus this one. A classic queue has no counter.
pub fn broker_delivery_number(
    queue_type: QueueType,
    headers: Option<&FieldTable>,
    redelivered: bool,
    warnings: &ReaderWarnings,
) -> Option<i64> {
    if queue_type == QueueType::Classic {
        return None;
    }
    let earlier = match header(headers, DELIVERY_COUNT_HEADER).filter(|_| redelivered) {
        None => 0,
        Some(value) => integer(value).unwrap_or_else(|| {
            warnings.unreadable_broker_count(&format!("{value:?}"));
            0
        }),
    };
    let prior = attributes::broker_count_from_text(header(headers, PRIOR_DELIVERIES_HEADER).and_then(text), warnings);
    Some(earlier.max(0).saturating_add(prior.unwrap_or(0).max(0)).saturating_add(1))
}

/// The reader: a delivery as a `Message`, its handled count resolved with the broker's delivery
/// number on a quorum queue (none on a classic one). The receipt is the delivery tag.
pub fn read_delivery(
    delivery: &Delivery,
    queue_type: QueueType,
    warnings: &ReaderWarnings,
) -> Result<Message, MalformedMessage> {
    let headers = delivery.properties.headers().as_ref();
    let body = std::str::from_utf8(&delivery.data)
        .map_err(|e| MalformedMessage { detail: format!("the body is not UTF-8: {e}") })?;
    let attribute = |name: &str| header(headers, name).and_then(text);
    let broker = broker_delivery_number(queue_type, headers, delivery.redelivered, warnings);
    attributes::read_message(attribute, body, broker, Some(delivery.delivery_tag.to_string()), warnings)
}

/// How a settle call ends a delivery.
#[derive(Debug, Clone, Copy)]
enum Settle {
    Acknowledge,
    /// `basic.reject(requeue=true)`: back on the queue, counted by a quorum queue on every
    /// version. Not `basic.nack(requeue=true)`: from RabbitMQ 4.3 a nack is a return "without
    /// failure" that `x-delivery-count` no longer counts (rabbitmq-server PR 15387), so a budget
    /// on that count would never fire.
    Return,
}

pub struct RabbitMqChannel {
    runtime: GatewayRuntime,
    channel: lapin::Channel,
    rabbitmq: RabbitMqSubscription,
    publisher: Arc<Publisher>,
    /// Delivery tags received and not yet settled: settling any other tag would close the channel.
    in_flight: Mutex<HashSet<u64>>,
    warnings: ReaderWarnings,
    counting: Option<CountingReport>,
}

impl RabbitMqChannel {
    pub(super) fn new(
        runtime: GatewayRuntime,
        channel: lapin::Channel,
        rabbitmq: &RabbitMqSubscription,
        publisher: Arc<Publisher>,
    ) -> RabbitMqChannel {
        let counting = (rabbitmq.queue_type == QueueType::Quorum).then(|| CountingReport::of(rabbitmq));
        let warnings = ReaderWarnings::new(&rabbitmq.subscription.name);
        RabbitMqChannel {
            runtime,
            channel,
            rabbitmq: rabbitmq.clone(),
            publisher,
            in_flight: Mutex::new(HashSet::new()),
            warnings,
            counting,
        }
    }

    fn queue(&self) -> &str {
        &self.rabbitmq.subscription.routing_key
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tag(message: &Message) -> Option<u64> {
        message.receipt.as_deref()?.parse().ok()
    }

    async fn get_one(&self) -> Result<Option<Delivery>, ChannelError> {
        let (channel, queue) = (self.channel.clone(), ShortString::from(self.queue()));
        let deadline = self.rabbitmq.call_deadline;
        let getting = async move {
            tokio::time::timeout(deadline, channel.basic_get(queue, BasicGetOptions { no_ack: false })).await
        };
        let Ok(got) = self.runtime.call(getting).await else {
            return Err(self.spent_by_a_late_get(deadline).await);
        };
        let got = got.map_err(|e| broker_error(self.name(), "basic.get", e))?;
        Ok(got.map(|got| {
            self.in_flight().insert(got.delivery.delivery_tag);
            got.delivery
        }))
    }

    /// A `basic.get` unanswered past the deadline may still be answered with a message, which
    /// would then stay unacknowledged with this channel, received by no one, until it closes. So
    /// the channel is closed now (the node returns what it holds to the queue: counted on a quorum
    /// queue, as any return) and is spent: its later calls fail `Refused`, as after a lost
    /// connection; the consumer makes a new channel.
    async fn spent_by_a_late_get(&self, deadline: Duration) -> ChannelError {
        let channel = self.channel.clone();
        let closing =
            async move { tokio::time::timeout(deadline, channel.close(200, "a basic.get timed out".into())).await };
        if let Ok(Err(error)) = self.runtime.call(closing).await {
            tracing::warn!(channel = self.name(), %error, "closing a channel after a timed-out basic.get failed");
        }
        let why = format!("no basic.get-ok within the call deadline of {deadline:?}; the channel is closed");
        kit::broker_error(self.name(), "basic.get", ErrorKind::Timeout, why)
    }

    /// Takes `message`'s delivery out of flight: every settlement starts here.
    fn claim(&self, message: &Message, operation: &'static str) -> Result<u64, ChannelError> {
        match Self::tag(message) {
            Some(tag) if self.in_flight().remove(&tag) => Ok(tag),
            _ => Err(kit::not_in_flight(self.name(), operation, message)),
        }
    }

    async fn settle_tag(&self, tag: u64, how: Settle, operation: &'static str) -> Result<(), ChannelError> {
        let channel = self.channel.clone();
        self.runtime
            .call(async move {
                match how {
                    Settle::Acknowledge => channel.basic_ack(tag, BasicAckOptions::default()).await,
                    Settle::Return => channel.basic_reject(tag, BasicRejectOptions { requeue: true }).await,
                }
            })
            .await
            .map_err(|e| broker_error(self.name(), operation, e))
    }

    async fn settle(&self, message: &Message, how: Settle, operation: &'static str) -> Result<(), ChannelError> {
        let tag = self.claim(message, operation)?;
        self.settle_tag(tag, how, operation).await
    }

    /// Publishes the copy to come back (the handled count as the pump left it), then acknowledges
    /// the original; a copy that cannot be published returns the original instead.
    async fn republish(&self, message: &Message, delay: Duration, prior: Option<u32>) -> Result<(), ChannelError> {
        let tag = self.claim(message, "requeue")?;
        let queue = self.queue().to_owned();
        match self.publisher.publish(&queue, &message.without_receipt(), delay, prior).await {
            Ok(()) => self.settle_tag(tag, Settle::Acknowledge, "requeue").await,
            Err(error) => {
                if let Err(release) = self.settle_tag(tag, Settle::Return, "requeue").await {
                    tracing::warn!(channel = self.name(), %release, "returning after a failed requeue failed too");
                }
                Err(error)
            }
        }
    }

    /// The raw message, for routing when it cannot be read.
    fn unreadable(&self, delivery: Delivery) -> Message {
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .map_or_else(|| format!("delivery-{}", delivery.delivery_tag), |id| id.to_string());
        let body = String::from_utf8_lossy(&delivery.data);
        attributes::unreadable(&id, self.queue(), &body, Some(delivery.delivery_tag.to_string()))
    }
}

#[async_trait]
impl Channel for RabbitMqChannel {
    // A channel is named after its subscription.
    fn name(&self) -> &str {
        &self.rabbitmq.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        let get = |_wait| self.get_one();
        let route = move |delivery, problem| async move {
            kit::route_unreadable(self, &self.unreadable(delivery), problem).await
        };
        let read = |delivery: &Delivery| read_delivery(delivery, self.rabbitmq.queue_type, &self.warnings);
        receive_readable(timeout, EMPTY_PAUSE, get, read, route).await
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.settle(message, Settle::Acknowledge, "acknowledge").await
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        // Nothing is published for a message this channel does not hold.
        if !Self::tag(message).is_some_and(|tag| self.in_flight().contains(&tag)) {
            return Err(kit::not_in_flight(self.name(), "reject", message));
        }
        let publish =
            async |queue: &str, copy: Message| self.publisher.publish(queue, &copy, Duration::ZERO, None).await;
        let settle = async |after| match after {
            AfterRouting::Acknowledge => self.settle(message, Settle::Acknowledge, "reject").await,
            AfterRouting::Release => self.settle(message, Settle::Return, "release after a failed reject").await,
        };
        kit::reject_by_forwarding(self.name(), &self.rabbitmq.subscription, message, rejection, publish, settle).await
    }

    /// Classic: republish the copy (through the delay queue of `delay`), then acknowledge.
    /// Quorum: `basic.reject(requeue=true)` at zero delay (the broker counts it); with a delay, the
    /// copy goes through the delay queue carrying the deliveries so far, since it comes back to
    /// the quorum queue as a new message whose broker count starts again.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        match (self.rabbitmq.queue_type, delay.is_zero()) {
            (QueueType::Classic, _) => self.republish(message, delay, None).await,
            (QueueType::Quorum, true) => self.settle(message, Settle::Return, "requeue").await,
            (QueueType::Quorum, false) => self.republish(message, delay, Some(message.header.handled_count)).await,
        }
    }

    /// `basic.reject(requeue=true)`: the message as it was published (classic), or counted by the
    /// broker (quorum).
    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.settle(message, Settle::Return, "nack").await
    }

    /// Closes the AMQP channel: the broker returns its unacknowledged deliveries to the queue
    /// (redelivered; a quorum queue counts them).
    async fn close(&self) -> Result<(), ChannelError> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let channel = self.channel.clone();
        self.runtime
            .call(async move { channel.close(200, "the gateway channel closed".into()).await })
            .await
            .map_err(|e| broker_error(self.name(), "close", e))
    }

    fn counting(&self) -> Option<CountingReport> {
        self.counting.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BagValue, MessageType};
    use crate::rejection::{keys, Rejection};
    use crate::transport::rabbitmq::to_headers;
    use lapin::BasicProperties;

    fn delivered(sent: &Message, redelivered: bool, earlier: Option<i64>, extra: &[(&str, AMQPValue)]) -> Delivery {
        let mut headers = to_headers(sent);
        if let Some(count) = earlier {
            headers.insert(DELIVERY_COUNT_HEADER.into(), AMQPValue::LongLongInt(count));
        }
        for (name, value) in extra {
            headers.insert((*name).into(), value.clone());
        }
        let mut delivery = Delivery::mock(7, "".into(), "orders".into(), redelivered, sent.body.bytes.clone());
        delivery.properties = BasicProperties::default().with_headers(headers);
        delivery
    }

    fn count(delivery: &Delivery, queue_type: QueueType) -> u32 {
        read_delivery(delivery, queue_type, &ReaderWarnings::default()).unwrap().header.handled_count
    }

    #[test]
    fn quorum_counts_the_earlier_deliveries_absent_then_1_2_3() {
        let sent = Message::new("orders", MessageType::Command, "x");
        let mut counts = vec![count(&delivered(&sent, false, None, &[]), QueueType::Quorum)];
        counts.extend((1..4).map(|earlier| count(&delivered(&sent, true, Some(earlier), &[]), QueueType::Quorum)));
        assert_eq!(counts, [0, 1, 2, 3]);
        // basic.get shows 0 on a first delivery.
        assert_eq!(count(&delivered(&sent, false, Some(0), &[]), QueueType::Quorum), 0);
    }

    #[test]
    fn a_publisher_set_delivery_count_is_ignored_on_a_first_delivery() {
        let mut sent = Message::new("orders", MessageType::Command, "x");
        sent.header.handled_count = 5;
        assert_eq!(count(&delivered(&sent, false, Some(7), &[]), QueueType::Quorum), 0);
    }

    #[test]
    fn classic_presents_the_header_count_whatever_the_delivery() {
        let mut sent = Message::new("orders", MessageType::Command, "x");
        sent.header.handled_count = 2;
        assert_eq!(count(&delivered(&sent, true, Some(9), &[]), QueueType::Classic), 2);
        assert_eq!(count(&delivered(&sent, false, None, &[]), QueueType::Classic), 2);
    }

    #[test]
    fn a_copy_back_from_a_delay_queue_adds_its_prior_deliveries() {
        let sent = Message::new("orders", MessageType::Command, "x");
        let prior = [(PRIOR_DELIVERIES_HEADER, AMQPValue::LongString("2".into()))];
        assert_eq!(count(&delivered(&sent, false, Some(0), &prior), QueueType::Quorum), 2);
        assert_eq!(count(&delivered(&sent, true, Some(1), &prior), QueueType::Quorum), 3);
    }

    /// a forwarded rejection copy keeps its stamped count over the broker's counter.
    #[test]
    fn a_rejection_copy_keeps_its_stamped_count_over_the_dead_letter_queue_counter() {
        let mut received = Message::new("orders", MessageType::Command, "x");
        received.header.handled_count = 3;
        received.header.bag.insert("handledCount".into(), BagValue::Int(1));
        let copy = crate::rejection::stamp(&received, Some(&Rejection::delivery_error("budget spent")));
        for earlier in [None, Some(4)] {
            let read = read_delivery(
                &delivered(&copy, earlier.is_some(), earlier, &[]),
                QueueType::Quorum,
                &ReaderWarnings::default(),
            )
            .unwrap();
            assert_eq!(read.header.handled_count, 3);
            assert!(read.header.bag.contains_key(keys::REJECTION_REASON));
        }
    }

    #[test]
    fn the_header_round_trips_through_amqp_headers() {
        let mut sent = Message::new("orders", MessageType::Event, "{\"a\":1}");
        sent.header.correlation_id = Some("c-1".into());
        sent.header.bag.insert("number".into(), BagValue::Int(-7));
        let read =
            read_delivery(&delivered(&sent, false, None, &[]), QueueType::Classic, &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.id, sent.header.id);
        assert_eq!(read.header.correlation_id, sent.header.correlation_id);
        assert_eq!(read.header.bag, sent.header.bag);
        assert_eq!(read.body.bytes, sent.body.bytes);
        assert_eq!(read.receipt.as_deref(), Some("7"));
    }

    #[test]
    fn a_message_without_the_header_is_malformed() {
        let delivery = Delivery::mock(1, "".into(), "orders".into(), false, b"raw".to_vec());
        let error = read_delivery(&delivery, QueueType::Quorum, &ReaderWarnings::default()).unwrap_err();
        assert!(error.detail.contains("is missing"), "{}", error.detail);
    }
}
