//! The consumer: a persistent session's deliveries, held in flight until settled by a PUBACK.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use rumqttc::Publish;
use tokio::sync::mpsc;

use super::producer::MqttProducer;
use super::session::Session;
use super::{broker_error, requeue_topic, NO_DELAY};
use crate::channel::Channel;
use crate::error::{ChannelError, ErrorKind};
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::attributes::{self, ReaderWarnings};
use crate::transport::envelope;
use crate::transport::kit::{self, AfterRouting};
use crate::transport::receive_loop::receive_readable;

/// A delivery taken from the session, under the receipt the channel gave it.
struct Delivery {
    receipt: String,
    publish: Publish,
}

pub struct MqttChannel {
    runtime: GatewayRuntime,
    session: Session,
    subscription: Subscription,
    requeue_topic: String,
    /// Deliveries the session's event loop received and no receive has taken yet.
    deliveries: tokio::sync::Mutex<mpsc::UnboundedReceiver<Publish>>,
    /// Taken and not yet settled, by receipt. A packet id is reused once acknowledged, so the
    /// receipt is the channel's own: settling a message twice is `NotInFlight`, never the PUBACK
    /// of a later packet.
    in_flight: Mutex<HashMap<String, Publish>>,
    router: MqttProducer,
    warnings: ReaderWarnings,
}

impl MqttChannel {
    pub(super) fn new(
        runtime: GatewayRuntime,
        session: Session,
        deliveries: mpsc::UnboundedReceiver<Publish>,
        subscription: &Subscription,
        router: MqttProducer,
    ) -> MqttChannel {
        MqttChannel {
            runtime,
            session,
            requeue_topic: requeue_topic(&subscription.name),
            subscription: subscription.clone(),
            deliveries: tokio::sync::Mutex::new(deliveries),
            in_flight: Mutex::new(HashMap::new()),
            router,
            warnings: ReaderWarnings::new(&subscription.name),
        }
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<String, Publish>> {
        // Every update is a single map call, so a poisoned lock is still consistent.
        self.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next delivery within `wait`, put in flight under a fresh receipt.
    async fn next_delivery(&self, wait: Duration) -> Result<Option<Delivery>, ChannelError> {
        let mut deliveries = self.deliveries.lock().await;
        let publish = match tokio::time::timeout(wait, deliveries.recv()).await {
            Ok(Some(publish)) => publish,
            Ok(None) => {
                let why = self.session.ended().unwrap_or_else(|| "the MQTT session has ended".to_owned());
                return Err(kit::broker_error(self.name(), "receive", ErrorKind::Refused, why));
            }
            Err(_) => return Ok(None),
        };
        let receipt = uuid::Uuid::new_v4().to_string();
        self.in_flight().insert(receipt.clone(), publish.clone());
        Ok(Some(Delivery { receipt, publish }))
    }

    /// The raw delivery, for routing when it cannot be read. MQTT 3.1.1 gives a message no id.
    fn unreadable(&self, delivery: Delivery) -> Message {
        attributes::unreadable(
            &uuid::Uuid::new_v4().to_string(),
            &delivery.publish.topic,
            &String::from_utf8_lossy(&delivery.publish.payload),
            Some(delivery.receipt),
        )
    }

    /// The in-flight delivery `message` came from, still in flight.
    fn delivery_of(&self, message: &Message, operation: &'static str) -> Result<String, ChannelError> {
        let not_in_flight = || kit::not_in_flight(self.name(), operation, message);
        let receipt = message.receipt.clone().ok_or_else(not_in_flight)?;
        if self.in_flight().contains_key(&receipt) {
            Ok(receipt)
        } else {
            Err(not_in_flight())
        }
    }

    /// The PUBACK of the delivery under `receipt`, which leaves flight.
    async fn puback(&self, message: &Message, operation: &'static str) -> Result<(), ChannelError> {
        let receipt = message.receipt.as_deref().ok_or_else(|| kit::not_in_flight(self.name(), operation, message))?;
        let publish =
            self.in_flight().remove(receipt).ok_or_else(|| kit::not_in_flight(self.name(), operation, message))?;
        let client = self.session.client.clone();
        self.runtime
            .call(async move { client.ack(&publish).await })
            .await
            .map_err(|e| broker_error(self.name(), operation, e))
    }

    /// Requeue and nack: a copy with the handled count as the pump left it goes to this
    /// subscription's requeue topic, then the original is acknowledged. A copy that cannot be
    /// published leaves the original in flight, unacknowledged.
    async fn republish(&self, message: &Message, operation: &'static str) -> Result<(), ChannelError> {
        self.delivery_of(message, operation)?;
        self.router.publish_to(&self.requeue_topic, &message.without_receipt()).await?;
        self.puback(message, operation).await
    }
}

#[async_trait]
impl Channel for MqttChannel {
    // A channel is named after its subscription (its session's client id).
    fn name(&self) -> &str {
        &self.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        let fetch = |wait| self.next_delivery(wait);
        let read = |delivery: &Delivery| {
            envelope::read_payload(&delivery.publish.payload, None, Some(delivery.receipt.clone()), &self.warnings)
        };
        let route = move |delivery, problem| async move {
            kit::route_unreadable(self, &self.unreadable(delivery), problem).await
        };
        receive_readable(timeout, Duration::ZERO, fetch, read, route).await
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.puback(message, "acknowledge").await
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        self.delivery_of(message, "reject")?;
        let publish = async |topic: &str, copy: Message| self.router.publish_to(topic, &copy).await;
        // MQTT cannot release a message: one whose copy was not routed stays in flight,
        // unacknowledged, and the broker resends it when the session reconnects.
        let settle = async |after| match after {
            AfterRouting::Acknowledge => self.puback(message, "reject").await,
            AfterRouting::Release => Ok(()),
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    /// MQTT has no per-message delay: a delayed requeue is refused (the message stays in flight)
    /// rather than redelivered early.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        if !delay.is_zero() {
            return Err(kit::broker_error(self.name(), "requeue", ErrorKind::Unsupported, NO_DELAY));
        }
        self.republish(message, "requeue").await
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.republish(message, "nack").await
    }

    /// Disconnects the session once the PUBACKs already made are sent. Its session stays on the
    /// broker, which resends every message not acknowledged (taken or not) when a session of the
    /// same name connects.
    async fn close(&self) -> Result<(), ChannelError> {
        self.session.stop().await;
        Ok(())
    }
}
