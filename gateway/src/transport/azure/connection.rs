//! The connection to a storage account's queue service: the clients every call goes through
//! (one HTTP client, the SAS policy), queue creation, and channel creation per make-channels.

use std::sync::Arc;
use std::time::Duration;

use azure_storage_queue::{QueueClient, QueueServiceClient, QueueServiceClientOptions};

use super::account::AzureAccount;
use super::channel::AzureQueueChannel;
use super::clients::Clients;
use super::producer::AzureQueueProducer;
use super::subscription::AzureQueueSubscription;
use super::{broker_error, check_queue_name};
use crate::budget;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::runtime::GatewayRuntime;
use crate::subscription::MakeChannels;
use crate::transport::kit;

/// How long connecting (one call that reads the service's properties) may take before it fails
/// as a `Timeout`: 30 s, as the calls after it.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(30);
const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// A storage account's queue service and this process's clients of it.
#[derive(Clone)]
pub struct AzureQueueConnection {
    clients: Clients,
}

impl std::fmt::Debug for AzureQueueConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureQueueConnection").field("queue_endpoint", &self.endpoint()).finish()
    }
}

impl AzureQueueConnection {
    /// Connects with a storage connection string (`AzureAccount::from_connection_string`) on the
    /// shared gateway runtime.
    pub async fn connect(connection_string: &str) -> Result<AzureQueueConnection, ChannelError> {
        let account = AzureAccount::from_connection_string(connection_string)?;
        AzureQueueConnection::connect_within(account, GatewayRuntime::shared(), CONNECT_DEADLINE).await
    }

    /// Connects to `account`'s queue service, its calls on `runtime`: one call reads the
    /// service's properties, so an endpoint that does not answer, or refuses the account's key,
    /// fails here, as a `Timeout` past `deadline`.
    pub async fn connect_within(
        account: AzureAccount,
        runtime: GatewayRuntime,
        deadline: Duration,
    ) -> Result<AzureQueueConnection, ChannelError> {
        let clients = Clients::new(account, runtime);
        let endpoint = clients.account().queue_endpoint.to_string();
        let options = QueueServiceClientOptions {
            client_options: clients.options().clone(),
            ..QueueServiceClientOptions::default()
        };
        let service = QueueServiceClient::new(clients.account().queue_endpoint.clone(), None, Some(options))
            .map_err(|e| broker_error(&endpoint, "connect", e))?;
        let asking = async move { service.get_properties(None).await.map(drop) };
        kit::within(clients.runtime(), &endpoint, "connect", deadline, asking)
            .await?
            .map_err(|e| broker_error(&endpoint, "connect", e))?;
        Ok(AzureQueueConnection { clients })
    }

    /// The queue endpoint (no credential: the key is never in it).
    pub fn endpoint(&self) -> &str {
        self.clients.account().queue_endpoint.as_str()
    }

    pub fn producer(&self) -> AzureQueueProducer {
        AzureQueueProducer::new(self.clients.clone(), CALL_DEADLINE)
    }

    /// The client of `queue`, for raw calls (the bespoke broker tests).
    pub fn native(&self, queue: &str) -> Result<QueueClient, ChannelError> {
        check_queue_name(queue)?;
        Ok(self.clients.queue(queue))
    }

    /// Creates `queue` where missing (an existing one is kept as it is).
    pub async fn create_queue(&self, queue: &str, deadline: Duration) -> Result<(), ChannelError> {
        let client = self.native(queue)?;
        let creating = async move { client.create(None).await.map(drop) };
        kit::within(self.clients.runtime(), queue, "create queue", deadline, creating)
            .await?
            .map_err(|e| broker_error(queue, "create queue", e))
    }

    async fn queue_exists(&self, queue: &str, deadline: Duration) -> Result<bool, ChannelError> {
        let client = self.native(queue)?;
        let asking = async move { client.exists().await };
        kit::within(self.clients.runtime(), queue, "find queue", deadline, asking)
            .await?
            .map_err(|e| broker_error(queue, "find queue", e))
    }

    /// The channel of `subscription`: under `MakeChannels::Create` its queue and its rejection
    /// queues are created first; under `Validate` its queue must exist (`Missing` otherwise).
    pub async fn channel(&self, subscription: &AzureQueueSubscription) -> Result<Arc<dyn Channel>, ChannelError> {
        let (common, deadline) = (&subscription.subscription, subscription.call_deadline);
        check_queue_name(&common.routing_key)?;
        match common.make_channels {
            MakeChannels::Create => {
                let destinations = [&common.dead_letter_routing_key, &common.invalid_message_routing_key];
                for queue in std::iter::once(&common.routing_key).chain(destinations.into_iter().flatten()) {
                    self.create_queue(queue, deadline).await?;
                }
            }
            MakeChannels::Validate => {
                if !self.queue_exists(&common.routing_key, deadline).await? {
                    return Err(ChannelError::Missing { channel: common.name.clone() });
                }
            }
            MakeChannels::Assume => {}
        }
        budget::warn_if_unenforceable(common, subscription);
        let router = self.producer().with_call_deadline(deadline);
        Ok(Arc::new(AzureQueueChannel::new(self.clients.clone(), subscription, router)))
    }
}
