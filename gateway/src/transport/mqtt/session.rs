//! An MQTT session: one client connection and its event loop, driven on the gateway runtime
//! until its owner stops or drops it. The producer and every channel each hold one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnectionError, Event, EventLoop, MqttOptions, Outgoing, Packet, QoS, SubscribeReasonCode,
};
use tokio::task::JoinHandle;

use super::broker_error;
use super::claim::{self, Claim};
use super::options::REQUEST_CAPACITY;
use crate::error::{ChannelError, ErrorKind};
use crate::runtime::GatewayRuntime;
use crate::transport::kit;

/// How long connecting (to the CONNACK) or subscribing (to the SUBACK) may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause before an event loop that lost its connection tries again.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// A session's event loop, stopped when the last owner drops it.
pub(super) struct Session {
    pub client: AsyncClient,
    task: JoinHandle<()>,
    /// A channel's claim on its subscription (see `claim`); none for the producer.
    claim: Option<Claim>,
    /// Why the event loop ended on its own, when it did.
    ended: Arc<Mutex<Option<String>>>,
}

impl Session {
    /// Ends the session's connection with a DISCONNECT queued behind every request already made
    /// (the PUBACKs of settled messages), so those reach the broker first; the persistent
    /// session stays, with whatever is still unacknowledged. Waits for the event loop to send it,
    /// at most `STOP_CEILING`, then stops the loop either way.
    pub async fn stop(&self) {
        if let Some(claim) = &self.claim {
            // Queued before the DISCONNECT, which suppresses the will that would clear it.
            let _ = claim.release(&self.client).await;
        }
        if self.client.disconnect().await.is_ok() {
            let deadline = tokio::time::Instant::now() + STOP_CEILING;
            while !self.task.is_finished() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.task.abort();
    }

    /// Why the session ended on its own (another channel took it), if it did.
    pub fn ended(&self) -> Option<String> {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).clone()
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
/// acknowledged). A lost connection is logged once per outage, never per message. A channel's
/// session that finds its subscription claimed by another channel before reconnecting ends
/// instead, saying why in `ended`; after a reconnect it claims its subscription again.
async fn drive(
    mut eventloop: EventLoop,
    name: String,
    mut on_event: impl FnMut(Event) + Send,
    claim: Option<(Claim, AsyncClient)>,
    ended: Arc<Mutex<Option<String>>>,
) {
    let mut down = false;
    loop {
        match eventloop.poll().await {
            Ok(event) => {
                if down {
                    tracing::info!(session = %name, "MQTT connection restored");
                    down = false;
                }
                if let (Event::Incoming(Packet::ConnAck(_)), Some((claim, client))) = (&event, &claim) {
                    // Not awaited: this loop is what drains the request queue.
                    let _ = client.try_publish(&claim.topic, QoS::AtLeastOnce, true, claim.token.clone());
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
                if let Some((claim, _)) = &claim {
                    let (host, port) = eventloop.mqtt_options.broker_address();
                    if let Ok(Some(other)) = claim::holder(&host, port, &claim.topic).await {
                        if other != claim.token {
                            let why = claim::held_by(&name, &other);
                            tracing::error!(session = %name, "MQTT session taken over; this channel ends: {why}");
                            *ended.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// Connects a session and, for a consumer, subscribes it to `topics` at QoS 1 and sets its
/// `claim` (its will, set in `options`, clears it); then drives it on `runtime`. Every event,
/// those seen during the handshake included, goes to `on_event`.
pub(super) async fn open_session(
    runtime: &GatewayRuntime,
    options: MqttOptions,
    topics: Vec<String>,
    claim: Option<Claim>,
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
            if let Some(claim) = &claim {
                // Confirmed before the channel is handed out, so a channel opened after this one
                // finds the claim.
                claim.publish(&client).await.map_err(|e| broker_error(&name, "claim", e))?;
                let confirmed = |packet: &Packet| Ok(matches!(packet, Packet::PubAck(_)));
                poll_until(&mut eventloop, &name, "claim", confirmed, &mut on_event).await?;
            }
            let ended = Arc::new(Mutex::new(None));
            let driven = claim.clone().map(|claim| (claim, client.clone()));
            let task = task_runtime.spawn(drive(eventloop, name, on_event, driven, ended.clone()));
            Ok(Session { client, task, claim, ended })
        })
        .await
}
