//! The connection to a RocketMQ name server: one process-wide client runtime, a producer, topic
//! creation, and channel creation per make-channels.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use rocketmq_client_rust::{
    ClientConfig, ClientInstanceHandle, ClientRuntime, ClientRuntimeConfig, DefaultMQProducer, ProducerTopicAdmin,
    TelemetryHandle, TopicCreateRequest,
};
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

use super::channel::{Broker, RocketMqChannel};
use super::producer::{ClientProducer, NativeSender, RocketMqProducer};
use super::subscription::RocketMqSubscription;
use super::{broker_error, BoxedFuture};
use crate::budget;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::runtime::GatewayRuntime;
use crate::subscription::MakeChannels;
use crate::transport::kit;

/// Every handle of one connection shares one client instance (its connections); handles differ
/// only in their call gate, so a channel's long poll never holds up another's ack.
const CLIENT_DOMAIN: u64 = 1;
/// The broker's template topic, through which clients create topics.
const TEMPLATE_TOPIC: &str = "TBW102";
const ADMIN_TIMEOUT_MILLIS: u64 = 5_000;

/// The client's own runtime, once per process. The client does its I/O on a runtime it owns:
/// rocketmq-runtime says production code must build it through `RuntimeOwner` and never borrow
/// a caller's Tokio runtime (its borrowing constructor is a hidden test harness). The
/// connection's `GatewayRuntime` drives the gateway's side of each call.
fn client_runtime() -> &'static Arc<ClientRuntime> {
    static CLIENT: OnceLock<(RuntimeOwner, Arc<ClientRuntime>)> = OnceLock::new();
    &CLIENT
        .get_or_init(|| {
            let config =
                RuntimeConfig { thread_name: "rocketmq-client".into(), worker_threads: 2, ..Default::default() };
            let plan = RuntimeOwner::plan(config).expect("the RocketMQ client runtime configuration is valid");
            let owner = plan.build().expect("the RocketMQ client runtime starts");
            // A no-op telemetry handle: the client must not install a global tracing subscriber.
            let runtime = ClientRuntime::try_new(
                owner.root_context().component("client"),
                ClientRuntimeConfig::default(),
                TelemetryHandle::noop(),
            )
            .expect("the RocketMQ client runtime configuration is valid");
            (owner, runtime)
        })
        .1
}

/// Topic creation, behind a trait object for the reason `BoxedFuture` gives.
trait TopicAdmin: Send + Sync {
    fn create_topic(&self, request: TopicCreateRequest) -> BoxedFuture<'static, Result<(), String>>;
}

/// A producer kept for topic creation. Its `create_topic_request` takes `&mut self`, but a
/// `DefaultMQProducer` is a handle on a shared implementation (whose admin creates topics through
/// `&self`), so each creation takes a clone of its own. Behind one lock, as before, every channel
/// made at once queued for it: in a rocketmq matrix, 80 creations of 20 ms (p50) waited 500 ms
/// (p50) and up to 1.2 s for the lock, and under CI's load a channel waited past its 10 s setup
/// deadline.
struct ClientAdmin(DefaultMQProducer);

impl TopicAdmin for ClientAdmin {
    fn create_topic(&self, request: TopicCreateRequest) -> BoxedFuture<'static, Result<(), String>> {
        create_topic_on(self.0.clone(), request)
    }
}

fn create_topic_on(
    mut admin: DefaultMQProducer,
    request: TopicCreateRequest,
) -> BoxedFuture<'static, Result<(), String>> {
    Box::pin(async move { admin.create_topic_request(request).await.map_err(|e| super::describe(&e)) })
}

/// A RocketMQ name server and the clients this process talks to it through. No field or public
/// future names a client type (see `BoxedFuture`).
#[derive(Clone)]
pub struct RocketMqConnection {
    name_server: String,
    producer: Arc<dyn NativeSender>,
    admin: Arc<dyn TopicAdmin>,
    runtime: GatewayRuntime,
}

impl std::fmt::Debug for RocketMqConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocketMqConnection").field("name_server", &self.name_server).finish()
    }
}

async fn started_producer(name_server: &str, group: String) -> Result<DefaultMQProducer, ChannelError> {
    let mut producer = DefaultMQProducer::builder(client_runtime().clone())
        .producer_group(group)
        .name_server_addr(name_server)
        .build();
    producer.start().await.map_err(|e| broker_error(name_server, "start producer", e))?;
    Ok(producer)
}

/// A started handle on the client instance for `name_server` (one per process and name server:
/// its instance name is the name server's).
async fn started_handle(
    name_server: &str,
    runtime: &GatewayRuntime,
) -> Result<Arc<ClientInstanceHandle>, ChannelError> {
    let mut config = ClientConfig::default();
    config.set_namesrv_addr(name_server.into());
    // The client pools instances by ip@instance name: with the default name, a second name
    // server in the same process found the first one's instance and was refused
    // (core.argument.invalid), so one process could not talk to two clusters (seen when the
    // restart test's own broker ran beside the shared one).
    config.set_instance_name(
        format!("gateway-{}", name_server.replace(|c: char| !c.is_ascii_alphanumeric(), "-")).into(),
    );
    let handle = ClientInstanceHandle::get_or_create(client_runtime(), CLIENT_DOMAIN, config, None)
        .map_err(|e| broker_error(name_server, "create client", e))?;
    let handle = Arc::new(handle);
    let started = handle.clone();
    runtime
        .call(async move { started.start().await })
        .await
        .map_err(|e| broker_error(name_server, "start client", e))?;
    Ok(handle)
}

impl RocketMqConnection {
    /// Connects to the name server at `host:port` and starts the producers, on the shared
    /// gateway runtime.
    pub async fn connect(name_server: &str) -> Result<RocketMqConnection, ChannelError> {
        RocketMqConnection::connect_on(name_server, GatewayRuntime::shared()).await
    }

    /// As `connect`, with this connection's calls (and those of every channel and producer
    /// made from it) on `runtime`.
    pub async fn connect_on(name_server: &str, runtime: GatewayRuntime) -> Result<RocketMqConnection, ChannelError> {
        let address = name_server.to_owned();
        let instance = format!("conformance-{}", uuid::Uuid::new_v4().simple());
        let (producer, admin) = runtime
            .call(async move {
                let producer = started_producer(&address, format!("{instance}-producer")).await?;
                let admin = started_producer(&address, format!("{instance}-admin")).await?;
                let producer: Arc<dyn NativeSender> = Arc::new(ClientProducer(Arc::new(producer)));
                let admin: Arc<dyn TopicAdmin> = Arc::new(ClientAdmin(admin));
                Ok::<_, ChannelError>((producer, admin))
            })
            .await?;
        Ok(RocketMqConnection { name_server: name_server.to_owned(), producer, admin, runtime })
    }

    /// The name server's `host:port` this connection was made to.
    pub fn name_server(&self) -> &str {
        &self.name_server
    }

    pub fn producer(&self) -> RocketMqProducer {
        RocketMqProducer::new(self.producer.clone(), self.runtime.clone())
    }

    /// A started handle on this connection's client instance.
    pub(super) async fn handle(&self) -> Result<Arc<ClientInstanceHandle>, ChannelError> {
        started_handle(&self.name_server, &self.runtime).await
    }

    /// Creates `topic` with one queue, or updates it when it exists.
    pub async fn create_topic(&self, topic: &str) -> Result<(), ChannelError> {
        let admin = self.admin.clone();
        let request = TopicCreateRequest {
            key: TEMPLATE_TOPIC.to_owned(),
            topic: topic.to_owned(),
            queue_count: 1,
            system_flag: None,
            attributes: HashMap::new(),
        };
        self.runtime.call(admin.create_topic(request)).await.map_err(|e| broker_error(topic, "create topic", e))
    }

    /// The broker serving `topic`, or `None` when the name server knows no such topic.
    pub(super) async fn broker_of(
        &self,
        handle: &Arc<ClientInstanceHandle>,
        topic: &str,
    ) -> Result<Option<Broker>, ChannelError> {
        let handle = handle.clone();
        let name = topic.to_owned();
        let route = self
            .runtime
            .call(async move { handle.topic_route(&name, ADMIN_TIMEOUT_MILLIS).await })
            .await
            .map_err(|e| broker_error(topic, "topic route", e))?;
        // One broker serves a conformance topic; a multi-broker route would need a pop per broker.
        Ok(route.and_then(|route| {
            let data = route.broker_datas.first()?;
            let address = data.broker_addrs().get(&0)?.clone();
            Some(Broker { name: data.broker_name().clone(), address })
        }))
    }

    /// The channel of `subscription`, its topics created first under `MakeChannels::Create`,
    /// failing as a `Timeout` once the whole of it has taken the subscription's `setup_deadline`.
    /// Connecting makes no round trip (the client reaches the name server on its first call:
    /// measured, a connect through a name server 1.5 s away returns in 11 ms), so this is where
    /// a slow name server is first met.
    pub fn channel<'a>(
        &'a self,
        subscription: &'a RocketMqSubscription,
    ) -> BoxedFuture<'a, Result<Arc<dyn Channel>, ChannelError>> {
        let (connection, owned) = (self.clone(), subscription.clone());
        let making = async move { connection.make_channel(&owned).await };
        let (name, deadline) = (&subscription.subscription.name, subscription.setup_deadline);
        Box::pin(async move { kit::within(&self.runtime, name, "make channel", deadline, making).await? })
    }

    async fn make_channel(&self, subscription: &RocketMqSubscription) -> Result<Arc<dyn Channel>, ChannelError> {
        let common = &subscription.subscription;
        if common.make_channels == MakeChannels::Create {
            let destinations = [&common.dead_letter_routing_key, &common.invalid_message_routing_key];
            for topic in std::iter::once(&common.routing_key).chain(destinations.into_iter().flatten()) {
                self.create_topic(topic).await?;
            }
        }
        let receiver = self.handle().await?;
        let broker = match self.broker_of(&receiver, &common.routing_key).await? {
            Some(broker) => broker,
            None => return Err(ChannelError::Missing { channel: common.name.clone() }),
        };
        budget::warn_if_unenforceable(common, subscription);
        let settler = self.handle().await?;
        Ok(Arc::new(RocketMqChannel::new(
            self.runtime.clone(),
            receiver,
            settler,
            broker,
            subscription,
            self.producer(),
        )))
    }
}
