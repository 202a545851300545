//! The SQS consumer channel.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_sqs::types::{Message as SqsMessage, MessageSystemAttributeName};

use super::producer::send_to_queue;
use super::{broker_error, read_sns_envelope, send_error, MAX_VISIBILITY_TIMEOUT_SECONDS, MAX_WAIT_SECONDS};
use crate::budget::CountingReport;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};
use crate::transport::kit::{self, AfterRouting};

/// How the queue's messages are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// Sent straight to the queue: body and message attributes.
    Raw,
    /// Published to an SNS topic subscribed by the queue without raw delivery.
    Sns,
}

#[derive(Debug, Clone)]
pub struct SqsChannel {
    pub(super) client: aws_sdk_sqs::Client,
    pub(super) runtime: GatewayRuntime,
    pub(super) queue_url: String,
    pub(super) dead_letter_url: Option<String>,
    pub(super) invalid_url: Option<String>,
    pub(super) subscription: Subscription,
    pub(super) envelope: Envelope,
    pub(super) fifo: bool,
    pub(super) warnings: std::sync::Arc<ReaderWarnings>,
    pub(super) counting: CountingReport,
}

/// The reader: an SQS message (raw, or carrying an SNS envelope) as a `Message`.
pub fn read_sqs_message(
    message: &SqsMessage,
    envelope: Envelope,
    warnings: &ReaderWarnings,
) -> Result<Message, MalformedMessage> {
    let body = message.body().unwrap_or_default();
    let receipt = message.receipt_handle().map(str::to_owned);
    match envelope {
        Envelope::Raw => {
            let received = message.message_attributes();
            let attribute = |name: &str| received?.get(name)?.string_value();
            attributes::read_message(attribute, body, broker_count(message, warnings), receipt, warnings)
        }
        Envelope::Sns => read_sns_envelope(body, broker_count(message, warnings), receipt, warnings),
    }
}

fn broker_count(message: &SqsMessage, warnings: &ReaderWarnings) -> Option<i64> {
    let text = message.attributes().and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount));
    attributes::broker_count_from_text(text.map(String::as_str), warnings)
}

impl SqsChannel {
    /// The broker message as a `Message`; the handled count through the delivery-count rule.
    pub fn read(&self, message: &SqsMessage) -> Result<Message, MalformedMessage> {
        read_sqs_message(message, self.envelope, &self.warnings)
    }

    /// The URL resolved at creation for the dead-letter or invalid-message queue named `queue`.
    fn destination_url(&self, queue: &str) -> Option<&str> {
        let subscription = &self.subscription;
        [
            (&subscription.dead_letter_routing_key, &self.dead_letter_url),
            (&subscription.invalid_message_routing_key, &self.invalid_url),
        ]
        .into_iter()
        .find(|(name, _)| name.as_deref() == Some(queue))
        .and_then(|(_, url)| url.as_deref())
    }

    async fn receive_batch(&self, wait_seconds: i32) -> Result<Vec<SqsMessage>, ChannelError> {
        let request = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(1)
            .wait_time_seconds(wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All");
        let output = self.runtime.call(request.send()).await.map_err(|e| broker_error(self.name(), "receive", e))?;
        Ok(output.messages.unwrap_or_default())
    }

    async fn change_visibility(
        &self,
        message: &Message,
        seconds: u64,
        operation: &'static str,
    ) -> Result<(), ChannelError> {
        let receipt = self.receipt(message, operation)?;
        let request = self
            .client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(seconds.min(MAX_VISIBILITY_TIMEOUT_SECONDS) as i32);
        self.runtime.call(request.send()).await.map_err(|e| broker_error(self.name(), operation, e))?;
        Ok(())
    }

    async fn delete(&self, message: &Message, operation: &'static str) -> Result<(), ChannelError> {
        let receipt = self.receipt(message, operation)?;
        let request = self.client.delete_message().queue_url(&self.queue_url).receipt_handle(receipt);
        self.runtime.call(request.send()).await.map_err(|e| broker_error(self.name(), operation, e))?;
        Ok(())
    }

    fn receipt<'m>(&self, message: &'m Message, operation: &'static str) -> Result<&'m str, ChannelError> {
        message.receipt.as_deref().ok_or_else(|| kit::not_in_flight(self.name(), operation, message))
    }

    /// The raw message, for routing when it cannot be read.
    fn unreadable(&self, raw: &SqsMessage) -> Message {
        attributes::unreadable(
            raw.message_id().unwrap_or_default(),
            &self.subscription.routing_key,
            raw.body().unwrap_or_default(),
            raw.receipt_handle().map(str::to_owned),
        )
    }
}

#[async_trait]
impl Channel for SqsChannel {
    /// Nothing is held by the client: SQS makes what was not settled visible again when its visibility timeout lapses.
    async fn close(&self) -> Result<(), ChannelError> {
        Ok(())
    }

    // A channel is named after the queue it reads, not the subscription.
    #[allow(clippy::misnamed_getters)]
    fn name(&self) -> &str {
        &self.subscription.routing_key
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        let started = Instant::now();
        loop {
            let remaining = timeout.saturating_sub(started.elapsed());
            let wait = remaining.as_secs().min(MAX_WAIT_SECONDS);
            for raw in self.receive_batch(wait as i32).await? {
                match self.read(&raw) {
                    Ok(message) => return Ok(Some(message)),
                    Err(problem) => kit::route_unreadable(self, &self.unreadable(&raw), problem).await?,
                }
            }
            if started.elapsed() >= timeout {
                return Ok(None);
            }
            if wait == 0 {
                // SQS long-polls in whole seconds: wait out a sub-second remainder, look once more.
                tokio::time::sleep(remaining).await;
            }
        }
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.delete(message, "acknowledge").await
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let publish = async |queue: &str, copy: Message| {
            let url = self.destination_url(queue).ok_or_else(|| ChannelError::Missing { channel: queue.to_owned() })?;
            send_to_queue(&self.runtime, &self.client, url, &copy, 0, self.fifo)
                .await
                .map_err(|e| send_error(url, "reject", e))
        };
        let settle = async |after| match after {
            AfterRouting::Acknowledge => self.delete(message, "reject").await,
            AfterRouting::Release => self.change_visibility(message, 0, "release after a failed reject").await,
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        // Whole seconds, rounded up: never visible again before the delay.
        let seconds = kit::whole_seconds(delay);
        self.change_visibility(message, seconds, "requeue").await
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.change_visibility(message, 0, "nack").await
    }

    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}
