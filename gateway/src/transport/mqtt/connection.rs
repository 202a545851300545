//! The connection to an MQTT broker: the address, the producer's session, and a session per
//! channel (`session`).

use std::sync::Arc;

use rumqttc::{Event, Packet, Publish};

use super::channel::MqttChannel;
use super::claim::Claim;
use super::options::options;
use super::producer::MqttProducer;
use super::session::open_session;
use crate::channel::Channel;
use crate::error::{ChannelError, ErrorKind};
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::kit;

/// An MQTT broker at `host:port`, and this process's producer session on it.
#[derive(Clone)]
pub struct MqttConnection {
    host: String,
    port: u16,
    producer: MqttProducer,
    runtime: GatewayRuntime,
}

impl std::fmt::Debug for MqttConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttConnection").field("host", &self.host).field("port", &self.port).finish()
    }
}

impl MqttConnection {
    /// Connects the producer's session to the broker at `host:port`, on the shared gateway runtime.
    pub async fn connect(address: &str) -> Result<MqttConnection, ChannelError> {
        MqttConnection::connect_on(address, GatewayRuntime::shared()).await
    }

    /// As `connect`, with this connection's calls (and those of every channel and producer made
    /// from it) on `runtime`.
    pub async fn connect_on(address: &str, runtime: GatewayRuntime) -> Result<MqttConnection, ChannelError> {
        let (host, port) = address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                kit::broker_error(
                    address,
                    "connect",
                    ErrorKind::Malformed,
                    "the MQTT broker's address is not host:port",
                )
            })?;
        let client_id = format!("gateway-producer-{}", uuid::Uuid::new_v4().simple());
        let producer = MqttProducer::open(&runtime, options(&client_id, &host, port, false)).await?;
        Ok(MqttConnection { host, port, producer, runtime })
    }

    pub fn producer(&self) -> MqttProducer {
        self.producer.clone()
    }

    /// The channel of `subscription`: a persistent session named after the subscription,
    /// subscribed to its topic and its requeue topic. MQTT topics need no creation and cannot be
    /// checked for, so every make-channels mode subscribes.
    pub async fn channel(&self, subscription: &Subscription) -> Result<Arc<dyn Channel>, ChannelError> {
        if !subscription.requeue_delay.is_zero() {
            tracing::warn!(
                channel = %subscription.name,
                delay = ?subscription.requeue_delay,
                "MQTT has no per-message delay: a requeue with this delay will be refused"
            );
        }
        let claim = Claim::new(&subscription.name);
        claim.refuse_if_held(&subscription.name, &self.host, self.port).await?;
        let mut options = options(&subscription.name, &self.host, self.port, true);
        options.set_last_will(claim.will());
        let (deliveries, received) = tokio::sync::mpsc::unbounded_channel::<Publish>();
        let on_event = move |event: Event| {
            if let Event::Incoming(Packet::Publish(publish)) = event {
                // The channel is gone when the send fails: its session is being dropped too.
                let _ = deliveries.send(publish);
            }
        };
        let topics = vec![subscription.routing_key.clone(), super::requeue_topic(&subscription.name)];
        let session = open_session(&self.runtime, options, topics, Some(claim), on_event).await?;
        Ok(Arc::new(MqttChannel::new(self.runtime.clone(), session, received, subscription, self.producer())))
    }
}
