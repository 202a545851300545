//! The connection to a Redis server: the client, one shared multiplexed connection for
//! producing and settling, consumer-group creation, and channel creation per make-channels.

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Client, Value};

use super::broker_error;
use super::channel::{RedisChannel, MAX_BLOCK};
use super::producer::RedisProducer;
use super::subscription::RedisSubscription;
use crate::budget;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::runtime::GatewayRuntime;
use crate::subscription::MakeChannels;

/// How long a command may take before it counts as failed (a blocking read adds its block time).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// A Redis server and this process's connection to it.
#[derive(Clone)]
pub struct RedisConnection {
    url: String,
    client: Client,
    commands: MultiplexedConnection,
    runtime: GatewayRuntime,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection").field("url", &self.url).finish()
    }
}

impl RedisConnection {
    /// Connects to the server at `url` (`redis://host:port`) on the shared gateway runtime.
    pub async fn connect(url: &str) -> Result<RedisConnection, ChannelError> {
        RedisConnection::connect_on(url, GatewayRuntime::shared()).await
    }

    /// As `connect`, with this connection's calls (and those of every channel and producer made
    /// from it) on `runtime`.
    pub async fn connect_on(url: &str, runtime: GatewayRuntime) -> Result<RedisConnection, ChannelError> {
        let client = Client::open(url).map_err(|e| broker_error(url, "connect", e))?;
        let commands = open(&client, &runtime, RESPONSE_TIMEOUT).await.map_err(|e| broker_error(url, "connect", e))?;
        Ok(RedisConnection { url: url.to_owned(), client, commands, runtime })
    }

    pub fn producer(&self) -> RedisProducer {
        RedisProducer::new(self.commands.clone(), self.runtime.clone())
    }

    /// The shared multiplexed connection, for raw commands (the bespoke broker tests).
    pub fn native(&self) -> MultiplexedConnection {
        self.commands.clone()
    }

    /// A connection of its own: a blocking read holds up every other command on its connection.
    pub async fn dedicated(&self) -> Result<MultiplexedConnection, ChannelError> {
        open(&self.client, &self.runtime, RESPONSE_TIMEOUT + MAX_BLOCK)
            .await
            .map_err(|e| broker_error(&self.url, "connect", e))
    }

    /// `XGROUP CREATE stream group $ MKSTREAM`: the group, and the stream when it is missing. A
    /// group sees the entries added after it was created, as a Pub/Sub subscription does.
    /// An existing group (`BUSYGROUP`) is kept as it is.
    pub async fn create_group(&self, stream: &str, group: &str) -> Result<(), ChannelError> {
        let mut command = ::redis::cmd("XGROUP");
        command.arg("CREATE").arg(stream).arg(group).arg("$").arg("MKSTREAM");
        let mut connection = self.commands.clone();
        let created = self.runtime.call(async move { command.query_async::<Value>(&mut connection).await }).await;
        match created {
            Ok(_) => Ok(()),
            Err(error) if error.code() == Some("BUSYGROUP") => Ok(()),
            Err(error) => Err(broker_error(group, "create group", error)),
        }
    }

    /// Whether `stream` has the consumer group `group` (`XINFO GROUPS`; a missing stream has none).
    pub async fn group_exists(&self, stream: &str, group: &str) -> Result<bool, ChannelError> {
        let mut command = ::redis::cmd("XINFO");
        command.arg("GROUPS").arg(stream);
        let mut connection = self.commands.clone();
        let groups = self.runtime.call(async move { command.query_async::<Value>(&mut connection).await }).await;
        let groups = match groups {
            Ok(groups) => groups,
            Err(error) if error.code().is_some() && error.to_string().contains("no such key") => return Ok(false),
            Err(error) => return Err(broker_error(group, "describe groups", error)),
        };
        let Value::Array(groups) = groups else { return Ok(false) };
        Ok(groups.into_iter().any(|info| {
            let fields: Vec<Value> = match info {
                Value::Array(fields) => fields,
                Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => return false,
            };
            let mut fields = fields.into_iter().map(super::entry::text);
            while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
                if name.as_deref() == Some("name") {
                    return value.as_deref() == Some(group);
                }
            }
            false
        }))
    }

    /// The channel of `subscription`: its group created first under `MakeChannels::Create`, or
    /// checked under `Validate`. The rejection streams need nothing: `XADD` creates a stream.
    pub async fn channel(&self, subscription: &RedisSubscription) -> Result<Arc<dyn Channel>, ChannelError> {
        let common = &subscription.subscription;
        match common.make_channels {
            MakeChannels::Create => self.create_group(&common.routing_key, &common.name).await?,
            MakeChannels::Validate => {
                if !self.group_exists(&common.routing_key, &common.name).await? {
                    return Err(ChannelError::Missing { channel: common.name.clone() });
                }
            }
            MakeChannels::Assume => {}
        }
        budget::warn_if_unenforceable(common, subscription);
        if common.requeue_delay > subscription.lease {
            tracing::warn!(
                channel = %common.name,
                delay = ?common.requeue_delay,
                lease = ?subscription.lease,
                "the requeue delay is longer than the lease: a requeued entry comes back after the lease"
            );
        }
        let receiver = self.dedicated().await?;
        Ok(Arc::new(RedisChannel::new(
            self.runtime.clone(),
            receiver,
            self.commands.clone(),
            subscription,
            self.producer(),
        )))
    }
}

/// A multiplexed connection made on `runtime`, so no caller's runtime owns it.
async fn open(
    client: &Client,
    runtime: &GatewayRuntime,
    response_timeout: Duration,
) -> Result<MultiplexedConnection, ::redis::RedisError> {
    let client = client.clone();
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(Some(response_timeout));
    runtime.call(async move { client.get_multiplexed_async_connection_with_config(&config).await }).await
}
