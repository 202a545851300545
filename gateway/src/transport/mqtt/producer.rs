//! Publishing: a `Message` as a QoS 1 PUBLISH whose payload is the envelope, confirmed by the
//! broker's PUBACK. One publish is outstanding at a time (the client does not say which packet
//! id a publish got before it is sent, so sends are serialised and matched in order).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rumqttc::{Event, MqttOptions, Outgoing, Packet, QoS};
use tokio::sync::{mpsc, Mutex};

use super::session::{open_session, Session};
use super::{broker_error, NO_DELAY};
use crate::channel::Producer;
use crate::error::{ChannelError, ErrorKind};
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::envelope;
use crate::transport::kit;

/// How long a publish may wait for its PUBACK.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// What the producer's event loop reports about its publishes.
#[derive(Debug, Clone, Copy)]
enum Notice {
    /// A PUBLISH went out with this packet id.
    Sent(u16),
    /// The broker acknowledged this packet id.
    Acknowledged(u16),
}

struct Inner {
    session: Session,
    /// Held for a whole publish: the next `Sent` is that publish's.
    notices: Mutex<mpsc::UnboundedReceiver<Notice>>,
}

/// Publishes to the topic in each message's header (or to a given topic, for rejection and
/// requeued copies).
#[derive(Clone)]
pub struct MqttProducer {
    inner: Arc<Inner>,
    runtime: GatewayRuntime,
}

impl MqttProducer {
    pub(super) async fn open(runtime: &GatewayRuntime, options: MqttOptions) -> Result<MqttProducer, ChannelError> {
        let (notify, notices) = mpsc::unbounded_channel();
        let on_event = move |event: Event| {
            let notice = match event {
                Event::Outgoing(Outgoing::Publish(pkid)) => Notice::Sent(pkid),
                Event::Incoming(Packet::PubAck(ack)) => Notice::Acknowledged(ack.pkid),
                _ => return,
            };
            let _ = notify.send(notice);
        };
        let session = open_session(runtime, options, Vec::new(), None, on_event).await?;
        let inner = Arc::new(Inner { session, notices: Mutex::new(notices) });
        Ok(MqttProducer { inner, runtime: runtime.clone() })
    }

    /// Publishes `message` to `topic` at QoS 1 and waits for the broker's PUBACK.
    pub async fn publish_to(&self, topic: &str, message: &Message) -> Result<(), ChannelError> {
        let payload = envelope::to_payload(topic, message)?;
        self.publish_raw(topic, payload).await
    }

    /// Publishes `payload` as given: for payloads the gateway did not write.
    pub async fn publish_raw(&self, topic: &str, payload: Vec<u8>) -> Result<(), ChannelError> {
        let (inner, name) = (self.inner.clone(), topic.to_owned());
        self.runtime
            .call(async move {
                let mut notices = inner.notices.lock().await;
                // Notices of an earlier publish that timed out are stale.
                while notices.try_recv().is_ok() {}
                inner
                    .session
                    .client
                    .publish(name.as_str(), QoS::AtLeastOnce, false, payload)
                    .await
                    .map_err(|e| broker_error(&name, "publish", e))?;
                let confirmed = async {
                    let mut sent = None;
                    while let Some(notice) = notices.recv().await {
                        match (notice, sent) {
                            (Notice::Sent(pkid), None) => sent = Some(pkid),
                            (Notice::Acknowledged(pkid), Some(ours)) if pkid == ours => return Ok(()),
                            _ => {}
                        }
                    }
                    Err(kit::broker_error(&name, "publish", ErrorKind::Refused, "the MQTT session has ended"))
                };
                match tokio::time::timeout(PUBLISH_TIMEOUT, confirmed).await {
                    Ok(result) => result,
                    Err(elapsed) => Err(kit::broker_error(&name, "publish", ErrorKind::Timeout, elapsed)),
                }
            })
            .await
    }
}

#[async_trait]
impl Producer for MqttProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message).await
    }

    /// MQTT has no per-message delay: a delayed send is refused rather than delivered early.
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        kit::refuse_delay(message, delay, NO_DELAY)?;
        self.send(message).await
    }
}
