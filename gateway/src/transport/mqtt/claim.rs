//! One consumer per subscription. MQTT 3.1.1 gives a session one connection: a second channel
//! connecting with the subscription's client id silently takes the session over, the first
//! reconnects and takes it back, and both receive and acknowledge the same messages, about twice
//! a second, with no error to either (measured on mosquitto 2.0.11). Shared subscriptions would
//! let two consumers share the messages, but not a session: what a crashed member held would stay
//! in its dead session instead of coming back to the restarted consumer.
//!
//! So a channel claims its subscription: a retained message on [`Claim::topic`] holds the token
//! of the connection that has the session. The broker clears it by that connection's will when
//! the connection dies unannounced (a crashed process); the channel clears it when it closes. A
//! channel that finds another claim is refused (`ErrorKind::Unsupported`), after a short grace
//! for a will still on its way. Two channels opened in the same instant can both pass the check:
//! the later connection takes the session, and the earlier one, finding the other claim when it
//! reconnects, ends and says why.

use std::time::Duration;

use rumqttc::{AsyncClient, ClientError, Event, LastWill, Packet, QoS, SubscribeFilter};

use super::broker_error;
use crate::error::{ChannelError, ErrorKind};
use crate::transport::kit;

/// How long a claim check may take (connect, subscribe, the fence's round trip).
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a claim found is checked again before the channel is refused: the will of a
/// connection that just died is published as soon as the broker sees the socket close.
const GRACE: Duration = Duration::from_secs(1);
const GRACE_STEP: Duration = Duration::from_millis(100);

/// A channel's claim on its subscription.
#[derive(Debug, Clone)]
pub(super) struct Claim {
    pub topic: String,
    pub token: String,
}

impl Claim {
    pub fn new(subscription_name: &str) -> Claim {
        Claim {
            topic: format!("gateway/claim/{subscription_name}"),
            token: format!("gateway-channel-{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// The will that clears the claim when its connection dies without a DISCONNECT.
    pub fn will(&self) -> LastWill {
        LastWill::new(&self.topic, Vec::new(), QoS::AtLeastOnce, true)
    }

    /// Sets the claim (a retained message, replacing any other).
    pub async fn publish(&self, client: &AsyncClient) -> Result<(), ClientError> {
        client.publish(&self.topic, QoS::AtLeastOnce, true, self.token.clone()).await
    }

    /// Clears the claim (an empty retained message removes the retained one).
    pub async fn release(&self, client: &AsyncClient) -> Result<(), ClientError> {
        client.publish(&self.topic, QoS::AtLeastOnce, true, Vec::new()).await
    }

    /// Refuses the subscription named `name` when another live connection claims it.
    pub async fn refuse_if_held(&self, name: &str, host: &str, port: u16) -> Result<(), ChannelError> {
        let deadline = tokio::time::Instant::now() + GRACE;
        loop {
            match holder(host, port, &self.topic).await.map_err(|e| broker_error(name, "claim", e))? {
                Some(other) if other != self.token => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(kit::broker_error(name, "claim", ErrorKind::Unsupported, held_by(name, &other)));
                    }
                    tokio::time::sleep(GRACE_STEP).await;
                }
                _ => return Ok(()),
            }
        }
    }
}

/// Why a channel cannot have its subscription.
pub(super) fn held_by(name: &str, other: &str) -> String {
    format!(
        "the subscription {name} is consumed by another channel ({other}): MQTT 3.1.1 gives its session one \
         connection, so competing consumers of one subscription are refused; close the other channel or use a \
         subscription of its own"
    )
}

/// The token of the connection holding the claim on `topic`, read by a short-lived clean
/// session. Retained messages follow the SUBACK on the probe's connection, so a fence published
/// to the probe's own topic, once back, shows that every retained one has arrived.
pub(super) async fn holder(host: &str, port: u16, topic: &str) -> Result<Option<String>, crate::error::BoxError> {
    let id = format!("gateway-claim-check-{}", uuid::Uuid::new_v4().simple());
    let fence = format!("gateway/claim-check/{id}");
    let mut options = super::options::options(&id, host, port, false);
    options.set_manual_acks(false);
    let (client, mut eventloop) = AsyncClient::new(options, 8);
    let check = async {
        let filters = [topic, fence.as_str()].map(|t| SubscribeFilter::new(t.to_owned(), QoS::AtLeastOnce));
        client.subscribe_many(filters).await?;
        let mut holder = None;
        loop {
            match eventloop.poll().await? {
                Event::Incoming(Packet::SubAck(_)) => client.publish(&fence, QoS::AtLeastOnce, false, "fence").await?,
                Event::Incoming(Packet::Publish(publish)) if publish.topic == topic => {
                    holder =
                        (!publish.payload.is_empty()).then(|| String::from_utf8_lossy(&publish.payload).into_owned())
                }
                Event::Incoming(Packet::Publish(publish)) if publish.topic == fence => {
                    return Ok::<_, crate::error::BoxError>(holder)
                }
                _ => {}
            }
        }
    };
    let found = tokio::time::timeout(CHECK_TIMEOUT, check).await;
    let _ = client.try_disconnect();
    let _ = tokio::time::timeout(Duration::from_millis(100), eventloop.poll()).await;
    match found {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {CHECK_TIMEOUT:?}").into()),
    }
}
