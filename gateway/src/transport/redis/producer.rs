//! Publishing: `XADD` of a message as one stream entry, to the stream named by its topic.

use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use async_trait::async_trait;

use super::broker_error;
use super::entry::to_fields;
use crate::channel::Producer;
use crate::error::ChannelError;
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::kit;

/// Adds entries to the stream in each message's header topic (or to a given stream, for
/// rejection copies). The connection is the connection's shared, multiplexed one.
#[derive(Clone)]
pub struct RedisProducer {
    connection: MultiplexedConnection,
    runtime: GatewayRuntime,
}

impl RedisProducer {
    pub(super) fn new(connection: MultiplexedConnection, runtime: GatewayRuntime) -> RedisProducer {
        RedisProducer { connection, runtime }
    }

    /// `XADD stream * field value …`: the entry id is the broker's.
    pub async fn publish_to(&self, stream: &str, message: &Message) -> Result<(), ChannelError> {
        let mut command = ::redis::cmd("XADD");
        command.arg(stream).arg("*");
        for (field, value) in to_fields(message) {
            command.arg(field).arg(value);
        }
        let mut connection = self.connection.clone();
        self.runtime
            .call(async move { command.query_async::<::redis::Value>(&mut connection).await })
            .await
            .map_err(|e| broker_error(stream, "send", e))?;
        Ok(())
    }
}

#[async_trait]
impl Producer for RedisProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message).await
    }

    /// Refused unless `delay` is zero: a stream entry is readable as soon as it is added.
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        kit::refuse_delay(message, delay, "Redis Streams has no delayed entries: an added entry is readable at once")?;
        self.send(message).await
    }
}
