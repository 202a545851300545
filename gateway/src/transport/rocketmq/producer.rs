//! Publishing: a `Message` as a RocketMQ message whose user properties carry the header.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rocketmq_client_rust::DefaultMQProducer;
use rocketmq_model::common::message::message_builder::MessageBuilder;
use rocketmq_model::common::message::message_single::Message as RocketMessage;

use super::broker_error;
use crate::channel::Producer;
use crate::error::ChannelError;
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::attributes;

/// How long a send may take before it counts as failed.
const SEND_TIMEOUT_MILLIS: u64 = 5_000;

/// The message to produce to `topic`: the body as is, the header as user properties, and the
/// broker's timer delay when `delay` is non-zero.
pub fn to_rocketmq_message(topic: &str, message: &Message, delay: Duration) -> Result<RocketMessage, ChannelError> {
    let mut builder = MessageBuilder::new().topic(topic).body_slice(&message.body.bytes);
    for (name, value) in attributes::header_attributes(message) {
        // Fails only for RocketMQ's reserved property names, which no header attribute uses.
        builder = builder.raw_property(name, value).map_err(|e| broker_error(topic, "send", e))?;
    }
    if !delay.is_zero() {
        builder = builder.delay_millis(delay.as_millis().try_into().unwrap_or(u64::MAX));
    }
    builder.build().map_err(|e| broker_error(topic, "send", e))
}

/// The client's producer behind a trait object. Proving the client's types `Send` takes the
/// compiler past its default recursion limit; behind `dyn`, only this crate has to.
#[async_trait]
pub(super) trait NativeSender: Send + Sync {
    async fn send_native(&self, message: RocketMessage) -> Result<(), String>;
}

#[async_trait]
impl NativeSender for DefaultMQProducer {
    async fn send_native(&self, message: RocketMessage) -> Result<(), String> {
        self.send_with_timeout(message, SEND_TIMEOUT_MILLIS).await.map(drop).map_err(|e| super::describe(&e))
    }
}

/// Produces to the topic in each message's header (or to a given topic, for rejection copies).
#[derive(Clone)]
pub struct RocketMqProducer {
    producer: Arc<dyn NativeSender>,
    runtime: GatewayRuntime,
}

impl RocketMqProducer {
    pub(super) fn new(producer: Arc<dyn NativeSender>, runtime: GatewayRuntime) -> RocketMqProducer {
        RocketMqProducer { producer, runtime }
    }

    pub async fn publish_to(&self, topic: &str, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.send_native(to_rocketmq_message(topic, message, delay)?).await
    }

    /// Produces a RocketMQ message as given: for messages the gateway did not write.
    pub async fn send_native(&self, outgoing: RocketMessage) -> Result<(), ChannelError> {
        let topic = outgoing.topic().to_string();
        let producer = self.producer.clone();
        self.runtime
            .call(async move { producer.send_native(outgoing).await })
            .await
            .map_err(|e| broker_error(&topic, "send", e))?;
        Ok(())
    }
}

#[async_trait]
impl Producer for RocketMqProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message, Duration::ZERO).await
    }

    /// RocketMQ 5's timer messages: delivered not before the delay.
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message, delay).await
    }
}
