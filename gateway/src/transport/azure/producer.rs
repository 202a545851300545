//! Sending: a message as one queue message, its text the JSON envelope, to the queue its header
//! topic names; a delayed send is a send whose visibility timeout is the delay.

use std::time::Duration;

use async_trait::async_trait;
use azure_storage_queue::models::{QueueClientSendMessageOptions, QueueMessage};

use super::clients::Clients;
use super::{broker_error, check_queue_name, visibility_seconds};
use crate::channel::Producer;
use crate::error::ChannelError;
use crate::message::Message;
use crate::transport::{envelope, kit};

/// Sends to the queue in each message's header topic (or to a given queue, for rejection
/// copies); a message the service did not store (no 201) is an error.
#[derive(Clone)]
pub struct AzureQueueProducer {
    clients: Clients,
    call_deadline: Duration,
}

impl AzureQueueProducer {
    pub(super) fn new(clients: Clients, call_deadline: Duration) -> AzureQueueProducer {
        AzureQueueProducer { clients, call_deadline }
    }

    /// As the default, failing as a `Timeout` past `deadline` (30 s otherwise).
    pub fn with_call_deadline(mut self, deadline: Duration) -> AzureQueueProducer {
        self.call_deadline = deadline;
        self
    }

    /// Sends `message` to `queue`, invisible for `delay` first.
    pub async fn send_to(&self, queue: &str, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let operation = if delay.is_zero() { "send" } else { "send with delay" };
        check_queue_name(queue)?;
        let text = String::from_utf8(envelope::to_payload(queue, message)?).expect("the envelope is JSON text");
        let visibility = visibility_seconds(queue, operation, delay)?;
        let content =
            QueueMessage { message_text: Some(text) }.try_into().map_err(|e| broker_error(queue, operation, e))?;
        let options = QueueClientSendMessageOptions {
            visibility_timeout: (visibility > 0).then_some(visibility),
            ..Default::default()
        };
        let client = self.clients.queue(queue);
        let sending = async move { client.send_message(content, Some(options)).await.map(drop) };
        kit::within(self.clients.runtime(), queue, operation, self.call_deadline, sending)
            .await?
            .map_err(|e| broker_error(queue, operation, e))
    }
}

#[async_trait]
impl Producer for AzureQueueProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.send_to(&message.header.topic, message, Duration::ZERO).await
    }

    /// The send's visibility timeout (whole seconds, rounded up; at most 7 days): the service
    /// hands the message out no sooner.
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.send_to(&message.header.topic, message, delay).await
    }
}
