//! The pull consumer: unary Pull, ModifyAckDeadline and Acknowledge through the tonic client.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinHandle;
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
/// The deadline of a Pull call. Long, as a Pull is never cut short by a receive's timeout (see
/// `PullChannel::in_flight`): it ends when the server answers, empty or not (pstest answers an
/// empty pull after 500 ms), or, should the server hold it, at this deadline.
const PULL_DEADLINE: Duration = Duration::from_secs(60);

/// A Pull call running on the gateway's runtime.
type Pulling = JoinHandle<Result<tonic::Response<pb::PullResponse>, tonic::Status>>;

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
    call_deadline: Duration,
    /// The Pull a receive started and stopped waiting for, taken over by the next receive. A
    /// Pull is never cancelled by a receive's timeout: the server counts a delivery when it
    /// answers, and an answer the client drops leases the message to no one until its ack
    /// deadline lapses (it comes back 10 s late, counted once more: a first delivery presenting 1,
    /// a dead-letter copy stamped R + 1, under load 1 run in 10; #31).
    in_flight: tokio::sync::Mutex<Option<Pulling>>,
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
        call_deadline: Duration,
    ) -> PullChannel {
        PullChannel {
            runtime,
            client,
            path,
            warnings: ReaderWarnings::new(&subscription.name),
            subscription,
            router,
            counting,
            call_deadline,
            in_flight: tokio::sync::Mutex::new(None),
        }
    }

    /// At most one message: the answer of the Pull in flight, or of a new one, if it comes within
    /// `wait`; otherwise the Pull goes on for the next receive to take over.
    async fn pull_one(&self, wait: Duration) -> Result<Option<pb::ReceivedMessage>, ChannelError> {
        let mut in_flight = self.in_flight.lock().await;
        let pulling = in_flight.get_or_insert_with(|| self.start_pull());
        let Ok(joined) = tokio::time::timeout(wait, pulling).await else { return Ok(None) };
        *in_flight = None;
        match joined.expect("a Pull call panicked") {
            Ok(response) => Ok(response.into_inner().received_messages.into_iter().next()),
            // The server held an empty Pull to its deadline, or the connection broke under it (a
            // new Pull connects again).
            Err(status) if matches!(status.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled) => Ok(None),
            Err(status) => Err(broker_error(self.name(), "pull", status)),
        }
    }

    fn start_pull(&self) -> Pulling {
        let mut client = self.client.clone();
        let mut request = tonic::Request::new(pb::PullRequest {
            subscription: self.path.clone(),
            max_messages: 1,
            ..Default::default()
        });
        request.set_timeout(PULL_DEADLINE);
        self.runtime.spawn(async move { client.pull(request).await })
    }

    async fn modify_ack_deadline(
        &self,
        message: &Message,
        seconds: u64,
        operation: &'static str,
    ) -> Result<(), ChannelError> {
        let ack_id = self.ack_id(message, operation)?;
        self.modify_ack_deadlines(vec![ack_id], seconds, operation).await
    }

    async fn modify_ack_deadlines(
        &self,
        ack_ids: Vec<String>,
        seconds: u64,
        operation: &'static str,
    ) -> Result<(), ChannelError> {
        let mut client = self.client.clone();
        let request = pb::ModifyAckDeadlineRequest {
            subscription: self.path.clone(),
            ack_ids,
            ack_deadline_seconds: seconds.min(MAX_ACK_DEADLINE_SECONDS) as i32,
        };
        self.settle(operation, async move { client.modify_ack_deadline(request).await }).await
    }

    /// A settlement call within the call deadline. One cut off may still have reached the server
    /// (measured on pstest: it had, and the ack held): the message is settled, or comes back
    /// when its ack deadline lapses, counted.
    async fn settle(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<tonic::Response<()>, tonic::Status>> + Send + 'static,
    ) -> Result<(), ChannelError> {
        kit::within(&self.runtime, self.name(), operation, self.call_deadline, call)
            .await?
            .map_err(|e| broker_error(self.name(), operation, e))?;
        Ok(())
    }

    async fn ack(&self, message: &Message, operation: &'static str) -> Result<(), ChannelError> {
        let ack_id = self.ack_id(message, operation)?;
        let mut client = self.client.clone();
        let request = pb::AcknowledgeRequest { subscription: self.path.clone(), ack_ids: vec![ack_id] };
        self.settle(operation, async move { client.acknowledge(request).await }).await
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
    /// Nothing is held by the client but a Pull in flight: one that has answered gives its
    /// message back (a nack); one still waiting is cancelled (a message the server hands it as
    /// it is cancelled comes back when its ack deadline lapses, as any unsettled one does).
    async fn close(&self) -> Result<(), ChannelError> {
        let Some(pulling) = self.in_flight.lock().await.take() else { return Ok(()) };
        if !pulling.is_finished() {
            pulling.abort();
            return Ok(());
        }
        let Ok(Ok(response)) = pulling.await else { return Ok(()) };
        let ack_ids: Vec<String> = response.into_inner().received_messages.into_iter().map(|m| m.ack_id).collect();
        if ack_ids.is_empty() {
            return Ok(());
        }
        let mut client = self.client.clone();
        let request =
            pb::ModifyAckDeadlineRequest { subscription: self.path.clone(), ack_ids, ack_deadline_seconds: 0 };
        self.settle("close", async move { client.modify_ack_deadline(request).await }).await
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
