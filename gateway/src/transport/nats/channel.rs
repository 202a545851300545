//! The consumer: a durable pull consumer, fetching one message at a time, and its settlement
//! through the message's ack subject.

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::AckKind;
use async_nats::Client;
use async_trait::async_trait;
use futures_util::StreamExt;

use super::broker_error;
use super::disconnects::Disconnects;
use super::message::{self, read_stream_message};
use super::producer::NatsProducer;
use super::subscription::NatsSubscription;
use crate::budget::CountingReport;
use crate::channel::Channel;
use crate::error::{BoxError, ChannelError};
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::attributes::ReaderWarnings;
use crate::transport::kit::{self, AfterRouting};
use crate::transport::receive_loop::receive_readable;

/// The shortest pull the server is asked to hold open: a pull that expires at once would spin.
const MIN_EXPIRES: Duration = Duration::from_millis(10);

/// A message as fetched, with the consumer's `num_delivered` for it.
type Fetched = (async_nats::Message, Option<i64>);

pub struct NatsChannel {
    runtime: GatewayRuntime,
    /// For the settlements, requests to a message's ack subject.
    client: Client,
    disconnects: Disconnects,
    consumer: PullConsumer,
    subscription: Subscription,
    router: NatsProducer,
    warnings: ReaderWarnings,
    counting: CountingReport,
    call_deadline: Duration,
}

impl NatsChannel {
    pub(super) fn new(
        runtime: GatewayRuntime,
        client: Client,
        disconnects: Disconnects,
        consumer: PullConsumer,
        nats: &NatsSubscription,
        router: NatsProducer,
    ) -> NatsChannel {
        let subscription = nats.subscription.clone();
        let warnings = ReaderWarnings::new(&subscription.name);
        let (counting, call_deadline) = (CountingReport::of(nats), nats.call_deadline);
        NatsChannel { runtime, client, disconnects, consumer, counting, call_deadline, subscription, router, warnings }
    }

    /// One message, if the server has one within `wait`: a pull of one that expires then.
    async fn fetch(&self, wait: Duration) -> Result<Option<Fetched>, ChannelError> {
        let consumer = self.consumer.clone();
        let expires = wait.max(MIN_EXPIRES);
        let fetched = self
            .runtime
            .call(async move {
                let mut batch = consumer.fetch().max_messages(1).expires(expires).messages().await?;
                match batch.next().await {
                    Some(Ok(fetched)) => {
                        let delivered = fetched.info().ok().map(|info| info.delivered);
                        Ok(Some((fetched.message, delivered)))
                    }
                    Some(Err(error)) => Err(BoxError::from(error)),
                    None => Ok(None),
                }
            })
            .await
            .map_err(|e| broker_error(self.name(), "receive", e))?;
        if let Some((raw, None)) = &fetched {
            let reply = raw.reply.as_ref().map_or("", |reply| reply.as_str());
            self.warnings.unreadable_broker_count(reply);
        }
        Ok(fetched)
    }

    /// Sends `kind` to the message's ack subject as a request: the server's answer says it
    /// arrived (a plain publish could be lost without a word).
    async fn settle(&self, message: &Message, kind: AckKind, operation: &'static str) -> Result<(), ChannelError> {
        let receipt = message.receipt.clone().ok_or_else(|| kit::not_in_flight(self.name(), operation, message))?;
        let client = self.client.clone();
        let requesting = async move { client.request(receipt, kind.into()).await.map(drop) };
        let answered = async {
            kit::within(&self.runtime, self.name(), operation, self.call_deadline, requesting)
                .await?
                .map_err(|e| broker_error(self.name(), operation, e))
        };
        self.disconnects.across(self.name(), operation, answered).await
    }
}

#[async_trait]
impl Channel for NatsChannel {
    /// Nothing is held by the client: a message not settled is delivered again, counted, once its
    /// `ack_wait` lapses.
    async fn close(&self) -> Result<(), ChannelError> {
        Ok(())
    }

    // A channel is named after its durable consumer.
    fn name(&self) -> &str {
        &self.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        // No pause after an empty fetch: the pull itself waits.
        let fetch = |wait| self.fetch(wait);
        let read = |(raw, delivered): &Fetched| read_stream_message(raw, *delivered, &self.warnings);
        let route = move |(raw, _): Fetched, problem| async move {
            kit::route_unreadable(self, &message::unreadable(&raw, &self.subscription.routing_key), problem).await
        };
        receive_readable(timeout, Duration::ZERO, fetch, read, route).await
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.settle(message, AckKind::Ack, "acknowledge").await
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let publish = async |subject: &str, copy: Message| self.router.publish_to(subject, &copy).await;
        let settle = async |after| match after {
            AfterRouting::Acknowledge => self.settle(message, AckKind::Ack, "reject").await,
            AfterRouting::Release => self.settle(message, AckKind::Nak(None), "release after a failed reject").await,
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    /// A nak with the delay: the server delivers it again no sooner, counted.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let delay = (!delay.is_zero()).then_some(delay);
        self.settle(message, AckKind::Nak(delay), "requeue").await
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.settle(message, AckKind::Nak(None), "nack").await
    }

    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}
