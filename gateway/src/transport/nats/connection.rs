//! The connection to a NATS server with JetStream: the client, stream and durable consumer
//! creation, and channel creation per make-channels.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::{self, stream, Context};
use async_nats::{Client, ConnectOptions, ServerAddr};

use super::channel::NatsChannel;
use super::disconnects::Disconnects;
use super::producer::{schedule_subject, NatsProducer};
use super::subscription::NatsSubscription;
use super::{broker_error, name_for};
use crate::budget;
use crate::channel::Channel;
use crate::endpoint::without_credentials;
use crate::error::{BoxError, ChannelError};
use crate::runtime::GatewayRuntime;
use crate::subscription::MakeChannels;
use crate::transport::kit;

/// How long connecting (the socket, the server's INFO, CONNECT and its PONG) may take before it
/// fails as a `Timeout`: async-nats's own default, 5 s.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(5);
/// How long a request (a settlement, a JetStream API call) waits for its answer: the client's
/// request timeout, so a server that stops answering fails the call as a `Timeout`.
const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// `options` with the user and password, or the token, `address` carries
/// (`nats://user:pass@host`, `nats://token@host`): async-nats reads credentials from its options
/// only, not from a URL.
fn with_credentials(options: ConnectOptions, address: &ServerAddr) -> ConnectOptions {
    match (address.username(), address.password()) {
        (Some(user), Some(password)) => options.user_and_password(user.to_owned(), password.to_owned()),
        (Some(token), None) => options.token(token.to_owned()),
        _ => options,
    }
}

/// A NATS server and this process's connection to it.
#[derive(Clone)]
pub struct NatsConnection {
    url: String,
    client: Client,
    jetstream: Context,
    runtime: GatewayRuntime,
    disconnects: Disconnects,
}

impl std::fmt::Debug for NatsConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConnection").field("url", &without_credentials(&self.url)).finish()
    }
}

impl NatsConnection {
    /// Connects to the server at `url` (`nats://host:port`) on the shared gateway runtime.
    pub async fn connect(url: &str) -> Result<NatsConnection, ChannelError> {
        NatsConnection::connect_on(url, GatewayRuntime::shared()).await
    }

    /// As `connect`, with this connection's calls on `runtime` (the client's connection task runs
    /// on the runtime current when it connects: the gateway's, never a caller's).
    pub async fn connect_on(url: &str, runtime: GatewayRuntime) -> Result<NatsConnection, ChannelError> {
        NatsConnection::connect_within(url, runtime, CONNECT_DEADLINE).await
    }

    /// As `connect_on`, connecting failing as a `Timeout` once it has taken `deadline`: the
    /// client's own timeout covers each attempt at a socket, the whole connect is held to it too.
    pub async fn connect_within(
        url: &str,
        runtime: GatewayRuntime,
        deadline: Duration,
    ) -> Result<NatsConnection, ChannelError> {
        let shown = without_credentials(url);
        let address: ServerAddr = url.parse().map_err(|e| broker_error(&shown, "connect", e))?;
        let disconnects = Disconnects::default();
        let counting = disconnects.clone();
        let options = with_credentials(ConnectOptions::new(), &address)
            .connection_timeout(deadline)
            .request_timeout(Some(CALL_DEADLINE))
            .event_callback(move |event| {
                if matches!(event, async_nats::Event::Disconnected) {
                    counting.record();
                }
                async {}
            });
        let client = kit::within(&runtime, &shown, "connect", deadline, async move { options.connect(address).await })
            .await?
            .map_err(|e| broker_error(&shown, "connect", e))?;
        let jetstream = jetstream::new(client.clone());
        Ok(NatsConnection { url: url.to_owned(), client, jetstream, runtime, disconnects })
    }

    pub fn producer(&self) -> NatsProducer {
        NatsProducer::new(self.jetstream.clone(), self.runtime.clone(), self.disconnects.clone())
    }

    /// The client, for raw calls (the bespoke broker tests).
    pub fn native(&self) -> Client {
        self.client.clone()
    }

    /// The stream of `subject` (named after it), created with the server's defaults (file
    /// storage, limits retention) where missing, holding the subject and its delayed messages
    /// (message schedules allowed: see `NatsProducer::send_with_delay`); an existing one is kept
    /// as it is.
    pub async fn create_stream(&self, subject: &str) -> Result<(), ChannelError> {
        self.create_stream_within(subject, CALL_DEADLINE).await
    }

    async fn create_stream_within(&self, subject: &str, deadline: Duration) -> Result<(), ChannelError> {
        let jetstream = self.jetstream.clone();
        let config = stream::Config {
            name: name_for(subject),
            subjects: vec![subject.to_owned(), schedule_subject(subject, "*")],
            allow_message_schedules: true,
            ..Default::default()
        };
        let creating = async move { jetstream.get_or_create_stream(config).await.map(drop) };
        kit::within(&self.runtime, subject, "create stream", deadline, creating)
            .await?
            .map_err(|e| broker_error(subject, "create stream", e))
    }

    /// The durable pull consumer of `subscription`, created (or updated to this configuration):
    /// explicit acks, `ack_wait` the lease, `max_deliver` the native limit, from the stream's
    /// first message.
    async fn create_consumer(&self, subscription: &NatsSubscription) -> Result<PullConsumer, ChannelError> {
        let common = &subscription.subscription;
        let config = pull::Config {
            durable_name: Some(name_for(&common.name)),
            filter_subject: common.routing_key.clone(),
            ack_policy: AckPolicy::Explicit,
            deliver_policy: DeliverPolicy::All,
            ack_wait: subscription.lease,
            max_deliver: subscription.max_deliver.map_or(-1, i64::from),
            ..Default::default()
        };
        let (jetstream, stream) = (self.jetstream.clone(), name_for(&common.routing_key));
        let creating = async move {
            let stream = jetstream.get_stream(stream).await?;
            stream.create_consumer(config).await.map_err(BoxError::from)
        };
        kit::within(&self.runtime, &common.name, "create consumer", subscription.call_deadline, creating)
            .await?
            .map_err(|e| broker_error(&common.name, "create consumer", e))
    }

    /// The existing durable consumer of `subscription`; `None` where it (or its stream) is missing.
    async fn existing_consumer(&self, subscription: &NatsSubscription) -> Result<Option<PullConsumer>, ChannelError> {
        let common = &subscription.subscription;
        let (jetstream, stream, name) = (self.jetstream.clone(), name_for(&common.routing_key), name_for(&common.name));
        let finding = async move {
            let stream = jetstream.get_stream(stream).await?;
            stream.get_consumer::<pull::Config>(&name).await
        };
        let found =
            kit::within(&self.runtime, &common.name, "find consumer", subscription.call_deadline, finding).await?;
        match found {
            Ok(consumer) => Ok(Some(consumer)),
            Err(error) if error.to_string().to_lowercase().contains("not found") => Ok(None),
            Err(error) => Err(broker_error(&common.name, "find consumer", error)),
        }
    }

    /// The channel of `subscription`: under `MakeChannels::Create` the streams of its subject and
    /// of its rejection subjects, and its consumer, are created first; otherwise the consumer
    /// must exist (`Validate` says so as `Missing`).
    pub async fn channel(&self, subscription: &NatsSubscription) -> Result<Arc<dyn Channel>, ChannelError> {
        let common = &subscription.subscription;
        let consumer = match common.make_channels {
            MakeChannels::Create => {
                let destinations = [&common.dead_letter_routing_key, &common.invalid_message_routing_key];
                for subject in std::iter::once(&common.routing_key).chain(destinations.into_iter().flatten()) {
                    self.create_stream_within(subject, subscription.call_deadline).await?;
                }
                self.create_consumer(subscription).await?
            }
            MakeChannels::Validate | MakeChannels::Assume => self
                .existing_consumer(subscription)
                .await?
                .ok_or_else(|| ChannelError::Missing { channel: common.name.clone() })?,
        };
        budget::warn_if_unenforceable(common, subscription);
        Ok(Arc::new(NatsChannel::new(
            self.runtime.clone(),
            self.client.clone(),
            self.disconnects.clone(),
            consumer,
            subscription,
            self.producer(),
        )))
    }
}
