//! Publishing: a `Message` as an AMQP message whose headers carry the header, through the default
//! exchange to the queue named by its topic (or by a rejection destination), with publisher
//! confirms; a delay through the delay queue of that delay value.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;

use super::{broker_error, PRIOR_DELIVERIES_HEADER};
use crate::channel::Producer;
use crate::error::{ChannelError, ErrorKind};
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::{attributes, kit};

/// The header as AMQP headers: every attribute a long string.
pub fn to_headers(message: &Message) -> FieldTable {
    let mut table = FieldTable::default();
    for (name, value) in attributes::header_attributes(message) {
        table.insert(ShortString::from(name), AMQPValue::LongString(LongString::from(value)));
    }
    table
}

fn properties(headers: FieldTable) -> BasicProperties {
    // Persistent, so a message outlives a broker restart as its queue does.
    BasicProperties::default().with_headers(headers).with_delivery_mode(2)
}

/// The delay queue of `queue` for `delay`: expired messages go back to `queue`.
pub(super) fn delay_queue_name(queue: &str, delay: Duration) -> String {
    format!("{queue}.delay.{}", delay.as_millis())
}

/// How long a publish waits for the node's confirm: as a receive's `basic.get`
/// (`RabbitMqSubscription::call_deadline`).
const CONFIRM_DEADLINE: Duration = Duration::from_secs(20);

/// The publishing channel (in confirm mode) one connection's producers share, the delay queues it
/// has declared, and how long a publish waits for its confirm.
pub(super) struct Publisher {
    pub channel: lapin::Channel,
    pub runtime: GatewayRuntime,
    delay_queues: Mutex<HashSet<String>>,
    confirm_deadline: Duration,
}

impl Publisher {
    pub fn new(channel: lapin::Channel, runtime: GatewayRuntime) -> Publisher {
        Publisher { channel, runtime, delay_queues: Mutex::new(HashSet::new()), confirm_deadline: CONFIRM_DEADLINE }
    }

    /// A publisher on the same channel whose publishes wait `deadline` for their confirm.
    fn within(&self, deadline: Duration) -> Publisher {
        Publisher { confirm_deadline: deadline, ..Publisher::new(self.channel.clone(), self.runtime.clone()) }
    }

    /// Publishes `payload` with `headers` to `queue` (default exchange) and waits for the broker's
    /// confirm: a message the broker could not take is an error, not a silent loss.
    pub async fn publish_raw(
        &self,
        queue: &str,
        payload: Vec<u8>,
        properties: BasicProperties,
    ) -> Result<(), ChannelError> {
        let (channel, routing_key) = (self.channel.clone(), ShortString::from(queue));
        let publishing = async move {
            let options = BasicPublishOptions::default();
            channel.basic_publish(ShortString::from(""), routing_key, options, &payload, properties).await?.await
        };
        // A confirm that does not come in time fails the publish as a `Timeout`; the message
        // may still have been stored (a retry then stores it twice: handlers are at-least-once).
        let confirmation = kit::within(&self.runtime, queue, "publish", self.confirm_deadline, publishing)
            .await?
            .map_err(|e| broker_error(queue, "publish", e))?;
        if confirmation.is_nack() {
            return Err(kit::broker_error(
                queue,
                "publish",
                ErrorKind::Other,
                "the broker refused the message (basic.nack)",
            ));
        }
        Ok(())
    }

    /// Declares the delay queue of `queue` for `delay` once per connection: a queue-level TTL
    /// (one queue per delay value, so no message waits behind a longer one) and no consumer;
    /// expired messages are dead-lettered through the default exchange back to `queue`.
    async fn delay_queue(&self, queue: &str, delay: Duration) -> Result<String, ChannelError> {
        let name = delay_queue_name(queue, delay);
        if self.delay_queues.lock().unwrap_or_else(|p| p.into_inner()).contains(&name) {
            return Ok(name);
        }
        let mut arguments = FieldTable::default();
        let ttl = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        arguments.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ttl));
        arguments.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
        arguments.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(queue.into()));
        let (channel, declared) = (self.channel.clone(), ShortString::from(name.as_str()));
        self.runtime
            .call(async move {
                let options = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
                channel.queue_declare(declared, options, arguments).await
            })
            .await
            .map_err(|e| broker_error(queue, "declare delay queue", e))?;
        self.delay_queues.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone());
        Ok(name)
    }

    /// Publishes `message` to `queue`, through its delay queue when `delay` is non-zero.
    /// `prior_deliveries`: the deliveries the message had before (a requeue through a quorum
    /// queue's delay queue), for the reader to add to the broker's restarted count.
    pub async fn publish(
        &self,
        queue: &str,
        message: &Message,
        delay: Duration,
        prior_deliveries: Option<u32>,
    ) -> Result<(), ChannelError> {
        let mut headers = to_headers(message);
        if let Some(prior) = prior_deliveries {
            headers.insert(PRIOR_DELIVERIES_HEADER.into(), AMQPValue::LongString(prior.to_string().into()));
        }
        let destination = if delay.is_zero() { queue.to_owned() } else { self.delay_queue(queue, delay).await? };
        self.publish_raw(&destination, message.body.bytes.clone(), properties(headers)).await
    }
}

/// Publishes to the queue named by each message's topic (or a given queue, for rejection copies).
#[derive(Clone)]
pub struct RabbitMqProducer {
    publisher: Arc<Publisher>,
}

impl RabbitMqProducer {
    pub(super) fn new(publisher: Arc<Publisher>) -> RabbitMqProducer {
        RabbitMqProducer { publisher }
    }

    /// This producer with its publishes failing as a `Timeout` when the node's confirm has not
    /// come within `deadline` (20 s by default): lapin waits for a confirm for ever.
    pub fn with_call_deadline(self, deadline: Duration) -> RabbitMqProducer {
        RabbitMqProducer { publisher: Arc::new(self.publisher.within(deadline)) }
    }

    pub async fn publish_to(&self, queue: &str, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.publisher.publish(queue, message, delay, None).await
    }

    /// Publishes a message as given: for messages the gateway did not write.
    pub async fn send_native(&self, queue: &str, body: &[u8], properties: BasicProperties) -> Result<(), ChannelError> {
        self.publisher.publish_raw(queue, body.to_vec(), properties).await
    }
}

#[async_trait]
impl Producer for RabbitMqProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message, Duration::ZERO).await
    }

    /// Through the delay queue of that delay value: delivered not before the delay.
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message, delay).await
    }
}
