//! The connection to a PostgreSQL server: a shared client for producers, receives and plain
//! settlements, the schema, and a channel (with a connection of its own for rejects) per
//! make-channels.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use super::channel::PostgresChannel;
use super::producer::PostgresProducer;
use super::subscription::PostgresSubscription;
use super::{broker_error, SCHEMA, SCHEMA_LOCK, TABLE};
use crate::budget;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::runtime::GatewayRuntime;
use crate::subscription::MakeChannels;
use crate::transport::kit;

/// How long connecting (and each connection-level call: the schema's creation and lookup) may
/// wait for the server before it fails as a `Timeout`: 30 s, as a channel's calls and a send.
/// tokio-postgres has no deadline of its own unless the connection string sets
/// `connect_timeout`, and a server that accepts the socket and then stops answering would hold
/// the caller for ever.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(30);

type BoxedFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A PostgreSQL database, by its connection string (`postgres://user@host:port/database` or
/// the key-value form), and the clients this process talks to it through.
#[derive(Clone)]
pub struct PostgresConnection {
    url: String,
    client: Arc<Client>,
    runtime: GatewayRuntime,
    deadline: Duration,
}

impl std::fmt::Debug for PostgresConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConnection").field("url", &self.url).finish()
    }
}

/// Opens a client on `runtime`, its connection task spawned there (it ends when the client
/// drops); a `Timeout` once `deadline` has passed.
async fn open(url: &str, runtime: &GatewayRuntime, deadline: Duration) -> Result<Client, ChannelError> {
    let address = url.to_owned();
    let connecting = async move {
        let (client, connection) = tokio_postgres::connect(&address, NoTls).await?;
        tokio::spawn(async move {
            // A connection that ends with an error fails every pending and later call on
            // its client, which reports it.
            let _ = connection.await;
        });
        Ok(client)
    };
    kit::within(runtime, url, "connect", deadline, connecting).await?.map_err(|e| broker_error(url, "connect", e))
}

impl PostgresConnection {
    /// Connects to the database at `url`, on the shared gateway runtime.
    pub async fn connect(url: &str) -> Result<PostgresConnection, ChannelError> {
        PostgresConnection::connect_on(url, GatewayRuntime::shared()).await
    }

    /// As `connect`, with this connection's calls (and those of every channel and producer
    /// made from it) on `runtime`.
    pub async fn connect_on(url: &str, runtime: GatewayRuntime) -> Result<PostgresConnection, ChannelError> {
        PostgresConnection::connect_within(url, runtime, CONNECT_DEADLINE).await
    }

    /// As `connect_on`, connecting and each connection-level call failing as a `Timeout` once
    /// it has taken `deadline` ([`CONNECT_DEADLINE`] otherwise).
    pub async fn connect_within(
        url: &str,
        runtime: GatewayRuntime,
        deadline: Duration,
    ) -> Result<PostgresConnection, ChannelError> {
        let client = Arc::new(open(url, &runtime, deadline).await?);
        Ok(PostgresConnection { url: url.to_owned(), client, runtime, deadline })
    }

    pub fn producer(&self) -> PostgresProducer {
        PostgresProducer::new(self.client.clone(), self.runtime.clone())
    }

    /// Creates the queue table when it is missing, within the connection's deadline.
    pub async fn create_schema(&self) -> Result<(), ChannelError> {
        self.create_schema_within(self.deadline).await
    }

    async fn create_schema_within(&self, deadline: Duration) -> Result<(), ChannelError> {
        let client = self.client.clone();
        // One simple-query message: no other call on the shared client runs inside it.
        let script = format!("BEGIN; SELECT pg_advisory_xact_lock({SCHEMA_LOCK}); {SCHEMA} COMMIT;");
        let creating = async move { client.batch_execute(&script).await };
        kit::within(&self.runtime, TABLE, "create the queue table", deadline, creating)
            .await?
            .map_err(|e| broker_error(TABLE, "create the queue table", e))
    }

    /// Whether the queue table exists, asked within the connection's deadline.
    pub async fn schema_exists(&self) -> Result<bool, ChannelError> {
        self.schema_exists_within(self.deadline).await
    }

    async fn schema_exists_within(&self, deadline: Duration) -> Result<bool, ChannelError> {
        let client = self.client.clone();
        let looking = async move { client.query_one(&format!("SELECT to_regclass('{TABLE}') IS NOT NULL"), &[]).await };
        kit::within(&self.runtime, TABLE, "look up the queue table", deadline, looking)
            .await?
            .and_then(|row| row.try_get(0))
            .map_err(|e| broker_error(TABLE, "look up the queue table", e))
    }

    /// The channel of `subscription`. Queues are names in the one table: `MakeChannels::Create`
    /// creates the table when missing, `Validate` fails when it is missing.
    pub fn channel<'a>(
        &'a self,
        subscription: &'a PostgresSubscription,
    ) -> BoxedFuture<'a, Result<Arc<dyn Channel>, ChannelError>> {
        Box::pin(self.make_channel(subscription))
    }

    async fn make_channel(&self, subscription: &PostgresSubscription) -> Result<Arc<dyn Channel>, ChannelError> {
        let common = &subscription.subscription;
        // Every call that makes the channel is held to the subscription's deadline, as the
        // channel's own calls are; the connection's is for the calls made on it directly.
        let deadline = subscription.call_deadline;
        match common.make_channels {
            MakeChannels::Create => self.create_schema_within(deadline).await?,
            MakeChannels::Validate if !self.schema_exists_within(deadline).await? => {
                return Err(ChannelError::Missing { channel: common.name.clone() })
            }
            MakeChannels::Validate | MakeChannels::Assume => {}
        }
        budget::warn_if_unenforceable(common, subscription);
        let transactions = open(&self.url, &self.runtime, subscription.call_deadline).await?;
        Ok(Arc::new(PostgresChannel::new(self.runtime.clone(), self.client.clone(), transactions, subscription)))
    }
}
