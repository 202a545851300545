//! The connection to a Kafka cluster: a producer, an admin client for topic creation, and a
//! consumer per channel.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, Producer as _};

use super::channel::KafkaChannel;
use super::producer::KafkaProducer;
use super::subscription::KafkaSubscription;
use super::{broker_error, CALL_TIMEOUT};
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::runtime::GatewayRuntime;
use crate::subscription::MakeChannels;
use crate::transport::kit;

/// A Kafka cluster and the clients this process talks to it through.
#[derive(Clone)]
pub struct KafkaConnection {
    bootstrap: String,
    producer: Arc<FutureProducer>,
    admin: Arc<AdminClient<DefaultClientContext>>,
    runtime: GatewayRuntime,
    /// How long the connection-level calls (`create_topic`, `topic_exists`) may take.
    deadline: Duration,
}

/// How long `connect` and `connect_on` may take, and the connection-level calls after it: from a
/// cold client the first metadata request is an ApiVersion exchange and the request, through the
/// bootstrap and then again to the address the node advertises.
pub const CONNECT_DEADLINE: Duration = CALL_TIMEOUT;

impl std::fmt::Debug for KafkaConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConnection").field("bootstrap", &self.bootstrap).finish()
    }
}

fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap).set("log_level", "3");
    config
}

impl KafkaConnection {
    /// Connects to the cluster at `bootstrap` (`host:port[,host:port]`) on the shared gateway
    /// runtime, and checks that it answers.
    pub async fn connect(bootstrap: &str) -> Result<KafkaConnection, ChannelError> {
        KafkaConnection::connect_on(bootstrap, GatewayRuntime::shared()).await
    }

    /// As `connect`, with this connection's calls (and those of every channel and producer made
    /// from it) on `runtime`.
    pub async fn connect_on(bootstrap: &str, runtime: GatewayRuntime) -> Result<KafkaConnection, ChannelError> {
        KafkaConnection::connect_within(bootstrap, runtime, CONNECT_DEADLINE).await
    }

    /// As `connect_on`, the check that the cluster answers (and each connection-level call after
    /// it) failing as a `Timeout` once it has taken `deadline` ([`CONNECT_DEADLINE`] otherwise).
    pub async fn connect_within(
        bootstrap: &str,
        runtime: GatewayRuntime,
        deadline: Duration,
    ) -> Result<KafkaConnection, ChannelError> {
        let producer: FutureProducer = client_config(bootstrap)
            // Every send waits for the broker's acknowledgement; no idempotence needed for tests,
            // but no reordering of a channel's sends either.
            .set("acks", "all")
            .set("linger.ms", "0")
            .set("max.in.flight.requests.per.connection", "1")
            .create()
            .map_err(|e| broker_error(bootstrap, "create producer", e))?;
        let admin: AdminClient<DefaultClientContext> =
            client_config(bootstrap).create().map_err(|e| broker_error(bootstrap, "create admin client", e))?;
        let connection = KafkaConnection {
            bootstrap: bootstrap.to_owned(),
            producer: Arc::new(producer),
            admin: Arc::new(admin),
            runtime,
            deadline,
        };
        // Clients connect lazily: ask for the cluster's metadata so a wrong address fails here.
        connection.topic_exists("__consumer_offsets").await?;
        Ok(connection)
    }

    pub fn producer(&self) -> KafkaProducer {
        KafkaProducer::new(self.producer.clone(), self.runtime.clone())
    }

    /// Creates `topic` with one partition (replication 1); an existing topic is left as it is.
    pub async fn create_topic(&self, topic: &str) -> Result<(), ChannelError> {
        self.create_topic_within(topic, self.deadline).await
    }

    /// As `create_topic`, failing as a `Timeout` once it has taken `deadline` (the creation and
    /// the wait for the broker to serve the topic together).
    async fn create_topic_within(&self, topic: &str, deadline: Duration) -> Result<(), ChannelError> {
        let until = tokio::time::Instant::now() + deadline;
        let (admin, name) = (self.admin.clone(), topic.to_owned());
        let creating = async move {
            let new = NewTopic::new(&name, 1, TopicReplication::Fixed(1));
            admin.create_topics([&new], &AdminOptions::new().operation_timeout(Some(deadline))).await
        };
        let results = kit::within(&self.runtime, topic, "create topic", deadline, creating)
            .await?
            .map_err(|e| broker_error(topic, "create topic", e))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => return Err(broker_error(topic, "create topic", KafkaError::AdminOp(code))),
            }
        }
        // The controller answers before the broker's metadata has the topic: a consumer that
        // subscribed now would be told UnknownTopicOrPartition (measured on KRaft 3.9 under
        // load). Wait until the broker serves it, within what is left of the deadline.
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(broker_error(
                    topic,
                    "create topic",
                    KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut),
                ));
            }
            if self.topic_exists_within(topic, left).await? {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the cluster serves `topic`: known, and every partition with a leader.
    pub async fn topic_exists(&self, topic: &str) -> Result<bool, ChannelError> {
        self.topic_exists_within(topic, self.deadline).await
    }

    /// As `topic_exists`, failing as a `Timeout` once it has taken `deadline`.
    async fn topic_exists_within(&self, topic: &str, deadline: Duration) -> Result<bool, ChannelError> {
        let (producer, name) = (self.producer.clone(), topic.to_owned());
        // Metadata requests block: off the runtime's workers. librdkafka's own timeout is a
        // little past the deadline, so the deadline is always what ends a call no answer came to
        // (at its own timeout librdkafka says "broker transport failure", which reads as
        // Refused), and the blocking call does not outlive the future cut off at it by much.
        let fetch_timeout = deadline + Duration::from_millis(250);
        let fetching = async move {
            tokio::task::spawn_blocking(move || {
                let metadata = producer.client().fetch_metadata(Some(&name), fetch_timeout)?;
                Ok(metadata.topics().iter().any(|t| {
                    t.name() == name
                        && t.error().is_none()
                        && !t.partitions().is_empty()
                        && t.partitions().iter().all(|p| p.leader() >= 0)
                }))
            })
            .await
            .expect("a metadata request panicked")
        };
        kit::within(&self.runtime, topic, "fetch metadata", deadline, fetching)
            .await?
            .map_err(|e| broker_error(topic, "fetch metadata", e))
    }

    /// The channel of `subscription`: its topics created first under `MakeChannels::Create`,
    /// checked under `Validate`; a consumer in the subscription's group, subscribed to its topic.
    pub async fn channel(&self, subscription: &KafkaSubscription) -> Result<Arc<dyn Channel>, ChannelError> {
        let common = &subscription.subscription;
        match common.make_channels {
            MakeChannels::Create => {
                let destinations = [&common.dead_letter_routing_key, &common.invalid_message_routing_key];
                for topic in std::iter::once(&common.routing_key).chain(destinations.into_iter().flatten()) {
                    self.create_topic_within(topic, subscription.call_deadline).await?;
                }
            }
            MakeChannels::Validate
                if !self.topic_exists_within(&common.routing_key, subscription.call_deadline).await? =>
            {
                return Err(ChannelError::Missing { channel: common.routing_key.clone() })
            }
            MakeChannels::Validate | MakeChannels::Assume => {}
        }
        let session = subscription.session_timeout.max(Duration::from_secs(1));
        let heartbeat = (session / 3).max(Duration::from_millis(100));
        let consumer: StreamConsumer = client_config(&self.bootstrap)
            .set("group.id", &common.name)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // A new group starts at the topic's first record.
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", session.as_millis().to_string())
            .set("heartbeat.interval.ms", heartbeat.as_millis().to_string())
            .set("fetch.wait.max.ms", "100")
            .create()
            .map_err(|e| broker_error(&common.name, "create consumer", e))?;
        consumer.subscribe(&[&common.routing_key]).map_err(|e| broker_error(&common.name, "subscribe", e))?;
        Ok(Arc::new(KafkaChannel::new(
            self.runtime.clone(),
            Arc::new(consumer),
            common.clone(),
            self.producer(),
            subscription.call_deadline,
        )))
    }
}
