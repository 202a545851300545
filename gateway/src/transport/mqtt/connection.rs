//! The connection to an MQTT broker: the address, the producer's session, and a session per
//! channel. Every session's event loop runs as a task on the connection's `GatewayRuntime`.

use std::sync::Arc;
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnectionError, Event, EventLoop, MqttOptions, Outgoing, Packet, Publish, QoS, SubscribeReasonCode,
};
use tokio::task::JoinHandle;

use super::broker_error;
use super::channel::MqttChannel;
use super::producer::MqttProducer;
use crate::channel::Channel;
use crate::error::{ChannelError, ErrorKind};
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::kit;

/// How long connecting (to the CONNACK) or subscribing (to the SUBACK) may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause before an event loop that lost its connection tries again.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
/// Packets larger than the client's 10 KiB default are allowed, up to this.
const MAX_PACKET: usize = 1024 * 1024;
/// The requests (publishes, acks) a session queues for its event loop.
const REQUEST_CAPACITY: usize = 256;

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

/// A session's event loop, stopped when the last owner drops it.
pub(super) struct Session {
    pub client: AsyncClient,
    task: JoinHandle<()>,
}

impl Session {
    /// Ends the session's connection with a DISCONNECT queued behind every request already made
    /// (the PUBACKs of settled messages), so those reach the broker first; the persistent
    /// session stays, with whatever is still unacknowledged. Waits for the event loop to send it,
    /// at most `STOP_CEILING`, then stops the loop either way.
    pub async fn stop(&self) {
        if self.client.disconnect().await.is_ok() {
            let deadline = tokio::time::Instant::now() + STOP_CEILING;
            while !self.task.is_finished() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.task.abort();
    }
}

/// How long `Session::stop` waits for its DISCONNECT to be sent.
const STOP_CEILING: Duration = Duration::from_secs(5);

impl Drop for Session {
    fn drop(&mut self) {
        // The TCP connection closes with the event loop; a persistent session stays on the broker.
        self.task.abort();
    }
}

fn options(client_id: &str, host: &str, port: u16, persistent: bool) -> MqttOptions {
    let mut options = MqttOptions::new(client_id, host, port);
    options
        .set_clean_session(!persistent)
        .set_manual_acks(true)
        .set_keep_alive(Duration::from_secs(30))
        .set_max_packet_size(MAX_PACKET, MAX_PACKET)
        .set_request_channel_capacity(REQUEST_CAPACITY);
    options
}

/// Polls `eventloop` until `done` says the awaited packet came, handing every other event to
/// `on_event`. A connection error is the handshake's failure.
async fn poll_until(
    eventloop: &mut EventLoop,
    name: &str,
    operation: &'static str,
    mut done: impl FnMut(&Packet) -> Result<bool, ChannelError>,
    on_event: &mut (impl FnMut(Event) + Send),
) -> Result<(), ChannelError> {
    let handshake = async {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(packet)) => {
                    if done(&packet)? {
                        return Ok(());
                    }
                    on_event(Event::Incoming(packet));
                }
                Ok(event) => on_event(event),
                Err(error) => return Err(broker_error(name, operation, error)),
            }
        }
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(result) => result,
        Err(elapsed) => Err(kit::broker_error(name, operation, ErrorKind::Timeout, elapsed)),
    }
}

/// Drives a connected session's event loop for as long as its `Session` lives, reconnecting
/// after a lost connection (a persistent session resumes: the broker resends what was not
/// acknowledged). A lost connection is logged once per outage, never per message.
async fn drive(mut eventloop: EventLoop, name: String, mut on_event: impl FnMut(Event) + Send) {
    let mut down = false;
    loop {
        match eventloop.poll().await {
            Ok(event) => {
                if down {
                    tracing::info!(session = %name, "MQTT connection restored");
                    down = false;
                }
                // A DISCONNECT sent is the session's end (`Session::stop`): never reconnect after it.
                let disconnected = matches!(event, Event::Outgoing(Outgoing::Disconnect));
                on_event(event);
                if disconnected {
                    return;
                }
            }
            Err(error) => {
                if !down {
                    tracing::warn!(session = %name, %error, "MQTT connection lost; reconnecting");
                    down = true;
                }
                if matches!(error, ConnectionError::RequestsDone) {
                    return;
                }
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }
    }
}

/// Connects a session and, for a consumer, subscribes it to `topics` at QoS 1; then drives it on
/// `runtime`. Every event, those seen during the handshake included, goes to `on_event`.
pub(super) async fn open_session(
    runtime: &GatewayRuntime,
    options: MqttOptions,
    topics: Vec<String>,
    on_event: impl FnMut(Event) + Send + 'static,
) -> Result<Session, ChannelError> {
    let name = options.client_id();
    let task_runtime = runtime.clone();
    runtime
        .call(async move {
            let (client, mut eventloop) = AsyncClient::new(options, REQUEST_CAPACITY);
            let mut on_event = on_event;
            let connected = |packet: &Packet| Ok(matches!(packet, Packet::ConnAck(_)));
            poll_until(&mut eventloop, &name, "connect", connected, &mut on_event).await?;
            if !topics.is_empty() {
                let filters = topics.iter().map(|topic| rumqttc::SubscribeFilter::new(topic.clone(), QoS::AtLeastOnce));
                client.subscribe_many(filters).await.map_err(|e| broker_error(&name, "subscribe", e))?;
                let subscribed = |packet: &Packet| match packet {
                    Packet::SubAck(ack) if ack.return_codes.contains(&SubscribeReasonCode::Failure) => {
                        Err(kit::broker_error(
                            &name,
                            "subscribe",
                            ErrorKind::Rejected,
                            format!("the broker refused {topics:?}"),
                        ))
                    }
                    Packet::SubAck(_) => Ok(true),
                    _ => Ok(false),
                };
                poll_until(&mut eventloop, &name, "subscribe", subscribed, &mut on_event).await?;
            }
            let task = task_runtime.spawn(drive(eventloop, name, on_event));
            Ok(Session { client, task })
        })
        .await
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
        let options = options(&subscription.name, &self.host, self.port, true);
        let (deliveries, received) = tokio::sync::mpsc::unbounded_channel::<Publish>();
        let on_event = move |event: Event| {
            if let Event::Incoming(Packet::Publish(publish)) = event {
                // The channel is gone when the send fails: its session is being dropped too.
                let _ = deliveries.send(publish);
            }
        };
        let topics = vec![subscription.routing_key.clone(), super::requeue_topic(&subscription.name)];
        let session = open_session(&self.runtime, options, topics, on_event).await?;
        Ok(Arc::new(MqttChannel::new(self.runtime.clone(), session, received, subscription, self.producer())))
    }
}
