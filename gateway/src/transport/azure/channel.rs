//! The consumer: Get Messages one at a time under the lease's visibility timeout, and the
//! settlements through the message's pop receipt.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use azure_storage_queue::models::{QueueClientReceiveMessagesOptions, ReceivedMessage};
use azure_storage_queue::QueueClient;

use super::clients::Clients;
use super::message::{self, read_queue_message, Receipt};
use super::producer::AzureQueueProducer;
use super::subscription::AzureQueueSubscription;
use super::{broker_error, error_code, visibility_seconds};
use crate::budget::CountingReport;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;
use crate::subscription::Subscription;
use crate::transport::attributes::ReaderWarnings;
use crate::transport::kit::{self, AfterRouting};
use crate::transport::receive_loop::receive_readable;

/// A Get Messages returns at once, empty or not (no long poll): the pause before the next one.
const EMPTY_PAUSE: Duration = Duration::from_millis(50);

/// The error codes that say a pop receipt no longer holds: the lease lapsed and the message was
/// handed out again (or settled) since this channel received it.
const RECEIPT_GONE: [&str; 2] = ["PopReceiptMismatch", "MessageNotFound"];

pub struct AzureQueueChannel {
    clients: Clients,
    queue: Arc<QueueClient>,
    subscription: Subscription,
    router: AzureQueueProducer,
    warnings: ReaderWarnings,
    counting: CountingReport,
    lease_seconds: i32,
    call_deadline: Duration,
}

impl AzureQueueChannel {
    pub(super) fn new(
        clients: Clients,
        azure: &AzureQueueSubscription,
        router: AzureQueueProducer,
    ) -> AzureQueueChannel {
        let subscription = azure.subscription.clone();
        let queue = Arc::new(clients.queue(&subscription.routing_key));
        // At least a second: a visibility timeout of 0 would hand the message to the next receive.
        let lease_seconds = i32::try_from(kit::whole_seconds(azure.lease).max(1)).unwrap_or(i32::MAX);
        AzureQueueChannel {
            clients,
            queue,
            warnings: ReaderWarnings::new(&subscription.name),
            counting: CountingReport::of(azure),
            lease_seconds,
            call_deadline: azure.call_deadline,
            subscription,
            router,
        }
    }

    /// One message, if the queue has a visible one: a Get Messages of one under the lease.
    async fn fetch(&self) -> Result<Option<ReceivedMessage>, ChannelError> {
        let (queue, lease) = (self.queue.clone(), self.lease_seconds);
        let receiving = async move {
            let options = QueueClientReceiveMessagesOptions {
                number_of_messages: Some(1),
                visibility_timeout: Some(lease),
                ..Default::default()
            };
            let received = queue.receive_messages(Some(options)).await?.into_model()?;
            Ok::<_, azure_core::Error>(received.items.unwrap_or_default().into_iter().next())
        };
        let fetched = kit::within(self.clients.runtime(), self.name(), "receive", self.call_deadline, receiving)
            .await?
            .map_err(|e| broker_error(self.name(), "receive", e))?;
        if let Some(received) = &fetched {
            if received.dequeue_count.is_none() {
                self.warnings.unreadable_broker_count("no DequeueCount");
            }
        }
        Ok(fetched)
    }

    fn receipt(&self, message: &Message, operation: &'static str) -> Result<Receipt, ChannelError> {
        Receipt::of(message).ok_or_else(|| kit::not_in_flight(self.name(), operation, message))
    }

    /// A failed settlement: `NotInFlight` where the service no longer honours the pop receipt.
    fn settle_error(&self, message: &Message, operation: &'static str, error: azure_core::Error) -> ChannelError {
        if error_code(&error).is_some_and(|code| RECEIPT_GONE.contains(&code)) {
            return kit::not_in_flight(self.name(), operation, message);
        }
        broker_error(self.name(), operation, error)
    }

    async fn delete(&self, message: &Message, operation: &'static str) -> Result<(), ChannelError> {
        let Receipt { message_id, pop_receipt } = self.receipt(message, operation)?;
        let queue = self.queue.clone();
        let deleting = async move { queue.delete_message(&message_id, &pop_receipt, None).await.map(drop) };
        kit::within(self.clients.runtime(), self.name(), operation, self.call_deadline, deleting)
            .await?
            .map_err(|e| self.settle_error(message, operation, e))
    }

    /// Makes the message visible again after `delay`: the next receive counts it.
    async fn release(&self, message: &Message, delay: Duration, operation: &'static str) -> Result<(), ChannelError> {
        let Receipt { message_id, pop_receipt } = self.receipt(message, operation)?;
        let visibility = visibility_seconds(self.name(), operation, delay)?;
        let queue = self.queue.clone();
        let updating = async move { queue.update_message(&message_id, &pop_receipt, visibility, None).await.map(drop) };
        kit::within(self.clients.runtime(), self.name(), operation, self.call_deadline, updating)
            .await?
            .map_err(|e| self.settle_error(message, operation, e))
    }
}

#[async_trait]
impl Channel for AzureQueueChannel {
    /// Nothing is held by the client: a message not settled is handed out again, counted, once
    /// its visibility timeout lapses.
    async fn close(&self) -> Result<(), ChannelError> {
        Ok(())
    }

    fn name(&self) -> &str {
        &self.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        let fetch = |_| self.fetch();
        let read = |received: &ReceivedMessage| read_queue_message(received, &self.warnings);
        let route = move |received: ReceivedMessage, problem| async move {
            kit::route_unreadable(self, &message::unreadable(&received, &self.subscription.routing_key), problem).await
        };
        receive_readable(timeout, EMPTY_PAUSE, fetch, read, route).await
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.delete(message, "acknowledge").await
    }

    /// Azure queues have no dead-lettering: the stamped copy is sent to the rejection queue by
    /// the gateway, then the original deleted.
    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let publish = async |queue: &str, copy: Message| self.router.send_to(queue, &copy, Duration::ZERO).await;
        let settle = async |after| match after {
            AfterRouting::Acknowledge => self.delete(message, "reject").await,
            AfterRouting::Release => self.release(message, Duration::ZERO, "release after a failed reject").await,
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    /// A visibility update to the delay: the service hands it out again no sooner, counted.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.release(message, delay, "requeue").await
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.release(message, Duration::ZERO, "nack").await
    }

    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}
