//! Publishing with the official client: one publisher per topic, on the gateway's runtime.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use google_cloud_auth::credentials::anonymous::Builder as Anonymous;
use google_cloud_pubsub::client::Publisher;
use tokio::sync::Mutex;

use super::broker_error;
use crate::channel::Producer;
use crate::error::ChannelError;
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::attributes::header_attributes;
use crate::transport::kit;

/// Publishes to the topic named by the message's topic (or a given topic, for routed copies).
pub struct GcpProducer {
    endpoint: String,
    project: String,
    /// Ordered topics: the partition key becomes the ordering key.
    ordering: bool,
    runtime: GatewayRuntime,
    publishers: Mutex<HashMap<String, Publisher>>,
}

impl GcpProducer {
    pub(super) fn new(endpoint: &str, project: &str, ordering: bool, runtime: GatewayRuntime) -> GcpProducer {
        GcpProducer {
            endpoint: endpoint.to_owned(),
            project: project.to_owned(),
            ordering,
            runtime,
            publishers: Mutex::default(),
        }
    }

    async fn publisher(&self, topic: &str) -> Result<Publisher, ChannelError> {
        let mut publishers = self.publishers.lock().await;
        if let Some(publisher) = publishers.get(topic) {
            return Ok(publisher.clone());
        }
        let path = format!("projects/{}/topics/{topic}", self.project);
        let endpoint = self.endpoint.clone();
        let publisher = self
            .runtime
            .call(async move {
                Publisher::builder(path)
                    .with_endpoint(endpoint)
                    .with_credentials(Anonymous::new().build())
                    // One message per batch: a conformance send must not wait for a batch to fill.
                    .set_message_count_threshold(1)
                    .build()
                    .await
            })
            .await
            .map_err(|e| broker_error(topic, "create publisher", e))?;
        publishers.insert(topic.to_owned(), publisher.clone());
        Ok(publisher)
    }

    /// Publishes `message` to `topic`, whatever its header says (rejection routing).
    pub async fn publish_to(&self, topic: &str, message: &Message) -> Result<(), ChannelError> {
        let publisher = self.publisher(topic).await?;
        let mut outgoing = google_cloud_pubsub::model::Message::new()
            .set_data(message.body.bytes.clone())
            .set_attributes(header_attributes(message));
        if let (true, Some(key)) = (self.ordering, &message.header.partition_key) {
            outgoing = outgoing.set_ordering_key(key.clone());
        }
        self.runtime
            .call(async move { publisher.publish(outgoing).await })
            .await
            .map_err(|e| broker_error(topic, "publish", e))?;
        Ok(())
    }
}

#[async_trait]
impl Producer for GcpProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message).await
    }

    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        kit::refuse_delay(message, delay, "Pub/Sub has no per-message delivery delay")?;
        self.send(message).await
    }
}
