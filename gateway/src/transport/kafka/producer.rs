//! The producer: a gateway message as a record (body as the value, the partition key as the key,
//! the header as record headers).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::{broker_error, CALL_TIMEOUT};
use crate::channel::Producer;
use crate::error::ChannelError;
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::{attributes, kit};

/// The header as record headers, in the layout `transport::attributes` gives.
pub fn to_record_headers(message: &Message) -> OwnedHeaders {
    let attributes = attributes::header_attributes(message);
    attributes.iter().fold(OwnedHeaders::new_with_capacity(attributes.len()), |headers, (name, value)| {
        headers.insert(Header { key: name, value: Some(value.as_str()) })
    })
}

/// Produces to the topic in each message's header (or to a given topic: requeue copies,
/// rejection copies).
#[derive(Clone)]
pub struct KafkaProducer {
    producer: Arc<FutureProducer>,
    runtime: GatewayRuntime,
}

impl std::fmt::Debug for KafkaProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaProducer").finish_non_exhaustive()
    }
}

impl KafkaProducer {
    pub(super) fn new(producer: Arc<FutureProducer>, runtime: GatewayRuntime) -> KafkaProducer {
        KafkaProducer { producer, runtime }
    }

    /// Produces `message` to `topic` and waits for the broker's acknowledgement.
    pub async fn publish_to(&self, topic: &str, message: &Message) -> Result<(), ChannelError> {
        let (headers, body, key) =
            (to_record_headers(message), message.body.bytes.clone(), message.header.partition_key.clone());
        self.send_native(topic, key.map(String::into_bytes), body, headers).await
    }

    /// Produces a record as given: for records the gateway did not write.
    pub async fn send_native(
        &self,
        topic: &str,
        key: Option<Vec<u8>>,
        value: Vec<u8>,
        headers: OwnedHeaders,
    ) -> Result<(), ChannelError> {
        let (producer, name) = (self.producer.clone(), topic.to_owned());
        self.runtime
            .call(async move {
                let mut record = FutureRecord::<[u8], [u8]>::to(&name).payload(&value).headers(headers);
                if let Some(key) = &key {
                    record = record.key(key);
                }
                producer.send(record, CALL_TIMEOUT).await.map(drop).map_err(|(error, _)| error)
            })
            .await
            .map_err(|e| broker_error(topic, "send", e))
    }
}

#[async_trait]
impl Producer for KafkaProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message).await
    }

    /// Kafka has no per-message delay: a delayed send is refused, not sent early.
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        kit::refuse_delay(message, delay, "Kafka has no per-message delivery delay")?;
        self.send(message).await
    }
}
