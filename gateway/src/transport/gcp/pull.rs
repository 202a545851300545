//! The pull consumer: unary Pull, ModifyAckDeadline and Acknowledge through the tonic client.

use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::Channel as GrpcChannel;

use super::pb::{self, subscriber_client::SubscriberClient};
use super::producer::GcpProducer;
use super::{broker_error, whole_seconds, MAX_ACK_DEADLINE_SECONDS};
use crate::budget::CountingReport;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};
use crate::transport::kit::{self, AfterRouting};
use crate::transport::receive_loop::receive_readable;

/// How long an empty pull waits before looking again.
const EMPTY_PULL_PAUSE: Duration = Duration::from_millis(100);
/// The shortest deadline given to a Pull call.
const MIN_PULL_DEADLINE: Duration = Duration::from_secs(2);

/// The reader: a received Pub/Sub message as a `Message`, its handled count resolved with the
/// delivery attempt (0 without a DeadLetterPolicy: the header count stands).
pub fn read_received_message(
    received: &pb::ReceivedMessage,
    warnings: &ReaderWarnings,
) -> Result<Message, MalformedMessage> {
    let message = received.message.as_ref().ok_or_else(|| MalformedMessage { detail: "no message".into() })?;
    let body = std::str::from_utf8(&message.data)
        .map_err(|e| MalformedMessage { detail: format!("the data is not UTF-8: {e}") })?;
    let attribute = |name: &str| message.attributes.get(name).map(String::as_str);
    let attempt = Some(i64::from(received.delivery_attempt));
    attributes::read_message(attribute, body, attempt, Some(received.ack_id.clone()), warnings)
}

pub struct PullChannel {
    runtime: GatewayRuntime,
    client: SubscriberClient<GrpcChannel>,
    path: String,
    subscription: Subscription,
    router: GcpProducer,
    warnings: ReaderWarnings,
    counting: CountingReport,
}

impl PullChannel {
    /// `path` is the subscription's full name; `router` publishes rejected copies.
    pub(super) fn new(
        runtime: GatewayRuntime,
        client: SubscriberClient<GrpcChannel>,
        path: String,
        subscription: Subscription,
        counting: CountingReport,
        router: GcpProducer,
    ) -> PullChannel {
        PullChannel {
            runtime,
            client,
            path,
            warnings: ReaderWarnings::new(&subscription.name),
            subscription,
            router,
            counting,
        }
    }

    async fn pull_one(&self, wait: Duration) -> Result<Option<pb::ReceivedMessage>, ChannelError> {
        let mut client = self.client.clone();
        let mut request = tonic::Request::new(pb::PullRequest {
            subscription: self.path.clone(),
            max_messages: 1,
            ..Default::default()
        });
        // A server may hold an empty pull open for a while (pstest: 500 ms); bound it, but not
        // so tightly that every empty pull ends as a cancelled call.
        request.set_timeout(wait.max(MIN_PULL_DEADLINE));
        match self.runtime.call(async move { client.pull(request).await }).await {
            Ok(response) => Ok(response.into_inner().received_messages.into_iter().next()),
            Err(status) if matches!(status.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled) => Ok(None),
            Err(status) => Err(broker_error(self.name(), "pull", status)),
        }
    }

    async fn modify_ack_deadline(
        &self,
        message: &Message,
        seconds: u64,
        operation: &'static str,
    ) -> Result<(), ChannelError> {
        let ack_id = self.ack_id(message, operation)?;
        let mut client = self.client.clone();
        let request = pb::ModifyAckDeadlineRequest {
            subscription: self.path.clone(),
            ack_ids: vec![ack_id],
            ack_deadline_seconds: seconds.min(MAX_ACK_DEADLINE_SECONDS) as i32,
        };
        self.runtime
            .call(async move { client.modify_ack_deadline(request).await })
            .await
            .map_err(|e| broker_error(self.name(), operation, e))?;
        Ok(())
    }

    async fn ack(&self, message: &Message, operation: &'static str) -> Result<(), ChannelError> {
        let ack_id = self.ack_id(message, operation)?;
        let mut client = self.client.clone();
        let request = pb::AcknowledgeRequest { subscription: self.path.clone(), ack_ids: vec![ack_id] };
        self.runtime
            .call(async move { client.acknowledge(request).await })
            .await
            .map_err(|e| broker_error(self.name(), operation, e))?;
        Ok(())
    }

    fn ack_id(&self, message: &Message, operation: &'static str) -> Result<String, ChannelError> {
        message.receipt.clone().ok_or_else(|| kit::not_in_flight(self.name(), operation, message))
    }

    /// The raw message, for routing when it cannot be read.
    fn unreadable(&self, received: pb::ReceivedMessage) -> Message {
        let (id, data) = received.message.map(|m| (m.message_id, m.data)).unwrap_or_default();
        attributes::unreadable(
            &id,
            &self.subscription.routing_key,
            &String::from_utf8_lossy(&data),
            Some(received.ack_id),
        )
    }
}

#[async_trait]
impl Channel for PullChannel {
    /// Nothing is held by the client: Pub/Sub delivers what was not settled again when its ack deadline lapses.
    async fn close(&self) -> Result<(), ChannelError> {
        Ok(())
    }

    // A channel is named after the Pub/Sub subscription it reads.
    fn name(&self) -> &str {
        &self.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        let pull = |wait| self.pull_one(wait);
        let route = move |received, problem| async move {
            kit::route_unreadable(self, &self.unreadable(received), problem).await
        };
        let read = |received: &pb::ReceivedMessage| read_received_message(received, &self.warnings);
        receive_readable(timeout, EMPTY_PULL_PAUSE, pull, read, route).await
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.ack(message, "acknowledge").await
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let publish = async |topic: &str, copy: Message| self.router.publish_to(topic, &copy).await;
        let settle = async |after| match after {
            AfterRouting::Acknowledge => self.ack(message, "reject").await,
            AfterRouting::Release => self.modify_ack_deadline(message, 0, "release after a failed reject").await,
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    /// The ack deadline becomes the delay: the broker redelivers it no sooner (at most 600 s).
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.modify_ack_deadline(message, whole_seconds(delay), "requeue").await
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.modify_ack_deadline(message, 0, "nack").await
    }

    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}
