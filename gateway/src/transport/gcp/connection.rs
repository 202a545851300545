//! The connection to a Pub/Sub endpoint, subscriptions, and channel creation per make-channels.

use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Channel as GrpcChannel, Endpoint};

use super::broker_error;
use super::pb::{self, publisher_client::PublisherClient, subscriber_client::SubscriberClient};
use super::producer::GcpProducer;
use super::pull::PullChannel;
use super::stream::StreamChannel;
use super::subscription::{Consumption, GcpSubscription, DEFAULT_CALL_DEADLINE};
use crate::budget;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::runtime::GatewayRuntime;
use crate::subscription::{MakeChannels, Subscription};
use crate::transport::kit;

/// A Pub/Sub endpoint (an emulator or fake: plaintext gRPC, anonymous credentials) and project.
#[derive(Clone)]
pub struct GcpConnection {
    endpoint: String,
    project: String,
    grpc: GrpcChannel,
    runtime: GatewayRuntime,
}

impl std::fmt::Debug for GcpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcpConnection").field("endpoint", &self.endpoint).field("project", &self.project).finish()
    }
}

fn created_or_exists<T>(result: Result<T, tonic::Status>) -> Result<(), tonic::Status> {
    match result {
        Ok(_) => Ok(()),
        Err(status) if status.code() == tonic::Code::AlreadyExists => Ok(()),
        Err(status) => Err(status),
    }
}

impl GcpConnection {
    /// Connects lazily to `endpoint` (`http://host:port`) for `project`, on the shared gateway
    /// runtime; `with_runtime` moves it to the caller's.
    pub fn emulator(endpoint: &str, project: &str) -> Result<GcpConnection, ChannelError> {
        GcpConnection::connect(endpoint, project, GatewayRuntime::shared())
    }

    /// Runs this connection's calls, and those of every channel and producer made from it, on
    /// `runtime` (the gRPC channel is opened again there).
    pub fn with_runtime(self, runtime: GatewayRuntime) -> Result<GcpConnection, ChannelError> {
        GcpConnection::connect(&self.endpoint, &self.project, runtime)
    }

    fn connect(endpoint: &str, project: &str, runtime: GatewayRuntime) -> Result<GcpConnection, ChannelError> {
        // The channel's dispatch task runs on the runtime current at creation: make it the
        // gateway's, not a caller's that may end first.
        let _gateway_runtime = runtime.handle().enter();
        let grpc = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| broker_error(endpoint, "connect", e))?
            .connect_lazy();
        Ok(GcpConnection { endpoint: endpoint.to_owned(), project: project.to_owned(), grpc, runtime })
    }

    pub fn topic_path(&self, topic: &str) -> String {
        format!("projects/{}/topics/{topic}", self.project)
    }

    pub fn subscription_path(&self, subscription: &str) -> String {
        format!("projects/{}/subscriptions/{subscription}", self.project)
    }

    pub fn producer(&self, ordering: bool) -> GcpProducer {
        GcpProducer::new(&self.endpoint, &self.project, ordering, self.runtime.clone())
    }

    fn subscriber_client(&self) -> SubscriberClient<GrpcChannel> {
        SubscriberClient::new(self.grpc.clone())
    }

    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Creates `topic` unless it exists, within `DEFAULT_CALL_DEADLINE`.
    pub async fn create_topic(&self, topic: &str) -> Result<(), ChannelError> {
        self.create_topic_within(topic, DEFAULT_CALL_DEADLINE).await
    }

    async fn create_topic_within(&self, topic: &str, deadline: Duration) -> Result<(), ChannelError> {
        let mut client = PublisherClient::new(self.grpc.clone());
        let request = pb::Topic { name: self.topic_path(topic), ..Default::default() };
        let call = async move { client.create_topic(request).await };
        let result = kit::within(&self.runtime, topic, "create topic", deadline, call).await?;
        created_or_exists(result).map_err(|e| broker_error(topic, "create topic", e))
    }

    async fn create_subscription(&self, subscription: &GcpSubscription) -> Result<(), ChannelError> {
        let common = &subscription.subscription;
        let dead_letter_policy = match (subscription.policy_topic(), subscription.dead_letter_policy) {
            (Some(topic), Some(attempts)) => Some(pb::DeadLetterPolicy {
                dead_letter_topic: self.topic_path(topic),
                max_delivery_attempts: attempts as i32,
            }),
            _ => None,
        };
        let request = pb::Subscription {
            name: self.subscription_path(&common.name),
            topic: self.topic_path(&common.routing_key),
            ack_deadline_seconds: subscription.ack_deadline.as_secs() as i32,
            enable_message_ordering: subscription.ordering,
            dead_letter_policy,
            ..Default::default()
        };
        let mut client = self.subscriber_client();
        let call = async move { client.create_subscription(request).await };
        let deadline = subscription.call_deadline;
        let result = kit::within(&self.runtime, &common.name, "create subscription", deadline, call).await?;
        created_or_exists(result).map_err(|e| broker_error(&common.name, "create subscription", e))
    }

    /// Whether the subscription exists; an answer that does not come in time is an error, not a no.
    async fn subscription_exists(&self, subscription: &GcpSubscription) -> Result<bool, ChannelError> {
        let name = &subscription.subscription.name;
        let mut client = self.subscriber_client();
        let request = pb::GetSubscriptionRequest { subscription: self.subscription_path(name) };
        let call = async move { client.get_subscription(request).await };
        let answer = kit::within(&self.runtime, name, "get subscription", subscription.call_deadline, call).await?;
        match answer {
            Ok(_) => Ok(true),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(false),
            Err(status) => Err(broker_error(name, "get subscription", status)),
        }
    }

    /// The consumer channel of a subscription: creates or checks its topics and subscription per
    /// the make-channels mode, then logs R-11 once if the budget cannot be enforced.
    pub async fn channel(&self, subscription: &GcpSubscription) -> Result<Arc<dyn Channel>, ChannelError> {
        let common = &subscription.subscription;
        match common.make_channels {
            MakeChannels::Create => {
                let destinations = [
                    &common.dead_letter_routing_key,
                    &common.invalid_message_routing_key,
                    &subscription.native_dead_letter_topic,
                ];
                for topic in std::iter::once(&common.routing_key).chain(destinations.into_iter().flatten()) {
                    self.create_topic_within(topic, subscription.call_deadline).await?;
                }
                self.create_subscription(subscription).await?;
            }
            MakeChannels::Validate if !self.subscription_exists(subscription).await? => {
                return Err(ChannelError::Missing { channel: common.name.clone() });
            }
            MakeChannels::Validate | MakeChannels::Assume => {}
        }
        budget::warn_if_unenforceable(common, subscription);
        let router = self.producer(false);
        Ok(match subscription.consumption {
            Consumption::Pull => Arc::new(PullChannel::new(
                self.runtime.clone(),
                self.subscriber_client(),
                self.subscription_path(&common.name),
                common.clone(),
                budget::CountingReport::of(subscription),
                router,
                subscription.call_deadline,
            )),
            Consumption::Stream => Arc::new(StreamChannel::start(
                &self.runtime,
                self.endpoint().to_owned(),
                self.subscription_path(&common.name),
                subscription,
                router,
            )),
        })
    }

    /// A pull reader of `topic` through a new subscription named `name` (no dead-letter policy):
    /// how a dead-letter or invalid-message topic is read.
    pub async fn reader(&self, topic: &str, name: &str) -> Result<Arc<dyn Channel>, ChannelError> {
        self.channel(&GcpSubscription::new(Subscription::new(name, topic), Consumption::Pull)).await
    }

    /// Deletes subscriptions and topics by name, ignoring ones already gone: test teardown.
    pub async fn delete(&self, subscriptions: &[String], topics: &[String]) {
        for name in subscriptions {
            let mut client = self.subscriber_client();
            let request = pb::DeleteSubscriptionRequest { subscription: self.subscription_path(name) };
            let _ = self.runtime.call(async move { client.delete_subscription(request).await }).await;
        }
        for topic in topics {
            let mut client = PublisherClient::new(self.grpc.clone());
            let request = pb::DeleteTopicRequest { topic: self.topic_path(topic) };
            let _ = self.runtime.call(async move { client.delete_topic(request).await }).await;
        }
    }
}
