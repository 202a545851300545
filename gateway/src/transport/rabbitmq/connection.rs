//! The connection to a RabbitMQ broker: one AMQP connection, a publishing channel in confirm
//! mode shared by its producers and channels, and channel creation per make-channels (queues
//! declared through the default exchange; no exchange of the project's own).

use std::sync::Arc;
use std::time::Duration;

use lapin::options::{ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties};

use super::broker_error;
use super::channel::RabbitMqChannel;
use super::producer::{Publisher, RabbitMqProducer};
use super::subscription::{QueueType, RabbitMqSubscription};
use crate::budget;
use crate::channel::Channel;
use crate::error::{ChannelError, ErrorKind};
use crate::runtime::GatewayRuntime;
use crate::subscription::MakeChannels;
use crate::transport::kit;

/// How long connecting (the AMQP handshake, the publishing channel, its confirm mode) may take
/// before it fails as a `Timeout`: 30 s, as RabbitMQ.Client's connection timeout. lapin has no
/// deadline of its own, and a node that accepts the socket and then stops answering would hold
/// the caller for ever.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(30);

/// A RabbitMQ broker and the connection this process talks to it through.
#[derive(Clone)]
pub struct RabbitMqConnection {
    url: String,
    connection: Arc<Connection>,
    publisher: Arc<Publisher>,
    runtime: GatewayRuntime,
}

impl std::fmt::Debug for RabbitMqConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitMqConnection").field("url", &self.url).finish()
    }
}

/// The delivery limit a quorum queue is declared with when the subscription asks for none: no
/// limit in practice. Left out, the broker's default applies, and it moved: none up to 3.13, 20
/// from 4.0, where a message is dropped after its 20th return (measured on 4.0.5: 21 deliveries,
/// then gone, never reaching the budget of a subscription whose R is above 20). Not `-1`, 4.0's
/// "no limit": 3.10.8 reads it as a limit below every count and drops a message at its first
/// return (measured). This value means the same on both.
const NO_DELIVERY_LIMIT: i64 = i32::MAX as i64;

/// The arguments a queue of `queue_type` is declared with; a quorum queue also gets its delivery
/// limit (none in practice unless asked for) and, with a dead-letter queue, dead-letters there
/// what the limit stops.
fn queue_arguments(queue_type: QueueType, delivery_limit: Option<u32>, dead_letter: Option<&str>) -> FieldTable {
    let mut arguments = FieldTable::default();
    arguments.insert("x-queue-type".into(), AMQPValue::LongString(queue_type.as_str().into()));
    if queue_type == QueueType::Quorum {
        // An integer: a string limit is accepted at declare time and then silently ignored (measured).
        let limit = delivery_limit.map_or(NO_DELIVERY_LIMIT, i64::from);
        arguments.insert("x-delivery-limit".into(), AMQPValue::LongLongInt(limit));
        if let (Some(_), Some(queue)) = (delivery_limit, dead_letter) {
            arguments.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
            arguments.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(queue.into()));
        }
    }
    arguments
}

impl RabbitMqConnection {
    /// Connects to the broker at `url` (`amqp://user:password@host:port/%2f`), on the shared
    /// gateway runtime.
    pub async fn connect(url: &str) -> Result<RabbitMqConnection, ChannelError> {
        RabbitMqConnection::connect_on(url, GatewayRuntime::shared()).await
    }

    /// As `connect`, with this connection's calls (and those of every channel and producer made
    /// from it) on `runtime`.
    pub async fn connect_on(url: &str, runtime: GatewayRuntime) -> Result<RabbitMqConnection, ChannelError> {
        RabbitMqConnection::connect_within(url, runtime, CONNECT_DEADLINE).await
    }

    /// As `connect_on`, failing as a `Timeout` once connecting has taken `deadline`
    /// ([`CONNECT_DEADLINE`] otherwise).
    pub async fn connect_within(
        url: &str,
        runtime: GatewayRuntime,
        deadline: Duration,
    ) -> Result<RabbitMqConnection, ChannelError> {
        let address = url.to_owned();
        let connecting = async move {
            let connection = Connection::connect(&address, ConnectionProperties::default()).await?;
            let channel = connection.create_channel().await?;
            channel.confirm_select(ConfirmSelectOptions::default()).await?;
            Ok::<_, lapin::Error>((connection, channel))
        };
        let (connection, channel) = kit::within(&runtime, url, "connect", deadline, connecting)
            .await?
            .map_err(|e| broker_error(url, "connect", e))?;
        let publisher = Arc::new(Publisher::new(channel, runtime.clone()));
        Ok(RabbitMqConnection { url: url.to_owned(), connection: Arc::new(connection), publisher, runtime })
    }

    pub fn producer(&self) -> RabbitMqProducer {
        RabbitMqProducer::new(self.publisher.clone())
    }

    /// Opens an AMQP channel, failing as a `Timeout` past `deadline`.
    async fn new_channel(&self, name: &str, deadline: Duration) -> Result<lapin::Channel, ChannelError> {
        let connection = self.connection.clone();
        kit::within(&self.runtime, name, "open channel", deadline, async move { connection.create_channel().await })
            .await?
            .map_err(|e| broker_error(name, "open channel", e))
    }

    /// Declares `queue` on `channel` (`passive`: only checks that it exists), failing as a
    /// `Timeout` past `deadline`.
    async fn declare(
        &self,
        channel: &lapin::Channel,
        queue: &str,
        passive: bool,
        arguments: FieldTable,
        deadline: Duration,
    ) -> Result<(), ChannelError> {
        let (channel, name) = (channel.clone(), ShortString::from(queue));
        let declaring = async move {
            let options = QueueDeclareOptions { durable: true, passive, ..QueueDeclareOptions::default() };
            channel.queue_declare(name, options, arguments).await
        };
        kit::within(&self.runtime, queue, "declare queue", deadline, declaring)
            .await?
            .map(drop)
            .map_err(|e| broker_error(queue, "declare queue", e))
    }

    /// The channel of `subscription`, its queues declared first under `MakeChannels::Create`
    /// (the work queue, then the dead-letter and invalid-message queues, of the same type). Each
    /// of these calls fails as a `Timeout` past the subscription's `call_deadline`.
    pub async fn channel(&self, subscription: &RabbitMqSubscription) -> Result<Arc<dyn Channel>, ChannelError> {
        let (common, deadline) = (&subscription.subscription, subscription.call_deadline);
        let channel = self.new_channel(&common.name, deadline).await?;
        match common.make_channels {
            MakeChannels::Create => {
                let (queue_type, limit) = (subscription.queue_type, subscription.delivery_limit);
                let dead_letter = common.dead_letter_routing_key.as_deref();
                self.declare(
                    &channel,
                    &common.routing_key,
                    false,
                    queue_arguments(queue_type, limit, dead_letter),
                    deadline,
                )
                .await?;
                let destinations = [&common.dead_letter_routing_key, &common.invalid_message_routing_key];
                for queue in destinations.into_iter().flatten() {
                    self.declare(&channel, queue, false, queue_arguments(queue_type, None, None), deadline).await?;
                }
            }
            MakeChannels::Validate => {
                // A failed passive declare closes the channel it ran on: use a throwaway one.
                let probe = self.new_channel(&common.name, deadline).await?;
                match self.declare(&probe, &common.routing_key, true, FieldTable::default(), deadline).await {
                    Ok(()) => {}
                    Err(error) if error.kind() == Some(ErrorKind::NotFound) => {
                        return Err(ChannelError::Missing { channel: common.name.clone() })
                    }
                    Err(error) => return Err(error),
                }
            }
            MakeChannels::Assume => {}
        }
        if subscription.queue_type == QueueType::Quorum {
            budget::warn_if_unenforceable(common, subscription);
        }
        Ok(Arc::new(RabbitMqChannel::new(self.runtime.clone(), channel, subscription, self.publisher.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(arguments: &FieldTable) -> Option<&AMQPValue> {
        arguments.inner().get("x-delivery-limit")
    }

    #[test]
    fn a_quorum_queue_always_declares_its_limit_so_no_broker_default_applies() {
        let asked = queue_arguments(QueueType::Quorum, Some(5), None);
        assert_eq!(limit(&asked), Some(&AMQPValue::LongLongInt(5)));
        let unasked = queue_arguments(QueueType::Quorum, None, None);
        assert_eq!(limit(&unasked), Some(&AMQPValue::LongLongInt(i64::from(i32::MAX))));
        assert_eq!(limit(&queue_arguments(QueueType::Classic, None, None)), None);
    }
}
