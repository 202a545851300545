//! The GCP configurations: `gcp-pull`, `gcp-pull-ordering`, `gcp-stream`, `gcp-stream-ordering`.
//!
//! The broker, once per test binary, from the source `source::start` picks: the emulator in
//! `PUBSUB_EMULATOR_HOST`, the Cloud SDK emulator image (or a stand-in) through testcontainers, or
//! Google's Go fake (pstest) behind the launcher `cargo xtask brokers install gcp` builds.

use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::gcp::{Consumption, GcpConnection, GcpSubscription};
use gateway::{Channel, Producer, Subscription};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::cell::Teardown;
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};

/// The DeadLetterPolicy's max_delivery_attempts (M) on every cell subscription.
pub const NATIVE_REDRIVE_LIMIT: u32 = 5;
pub const PROJECT: &str = "conformance";

struct Broker {
    endpoint: String,
    connection: GcpConnection,
    _running: Running,
}

fn start_pstest() -> Result<LocalProcess, LocalError> {
    let port = local::free_loopback_port();
    let mut command = Command::new(local::install_dir("gcp").join("pstest-launcher"));
    command.arg(port.to_string());
    local::start("pstest", "gcp", command, port, "pstest listening", Duration::from_secs(30))
}

/// The Pub/Sub broker in each source (chosen by `source::start`).
fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("gcp");
    Definition {
        transport: "gcp",
        endpoint_variable,
        image,
        #[cfg(feature = "containers")]
        container: Some(container),
        local: start_pstest,
    }
}

fn broker() -> &'static Broker {
    static BROKER: OnceLock<Broker> = OnceLock::new();
    BROKER.get_or_init(|| {
        let running = source::start(&definition());
        // PUBSUB_EMULATOR_HOST's form, host:port; the client takes a URL.
        let host = running.endpoint(|address| address.to_owned());
        let endpoint = format!("http://{host}");
        let connection =
            GcpConnection::emulator(&endpoint, PROJECT).unwrap_or_else(|e| crate::broker::fatal("gcp", &e));
        let probe = connection.clone();
        source::require_answer("gcp", &running, &host, async move { probe.create_topic("conformance-probe").await });
        Broker { endpoint, connection, _running: running }
    })
}

/// The connection to this binary's Pub/Sub broker, for bespoke tests.
pub fn connection() -> &'static GcpConnection {
    &broker().connection
}

/// The emulator's URL (`http://host:port`) and the project, for bespoke tests that connect on
/// their own.
pub fn endpoint() -> (&'static str, &'static str) {
    (&broker().endpoint, PROJECT)
}

pub struct GcpConfiguration {
    name: &'static str,
    consumption: Consumption,
    ordering: bool,
}

pub fn gcp_pull() -> &'static GcpConfiguration {
    static CONFIGURATION: GcpConfiguration =
        GcpConfiguration { name: "gcp-pull", consumption: Consumption::Pull, ordering: false };
    &CONFIGURATION
}

pub fn gcp_pull_ordering() -> &'static GcpConfiguration {
    static CONFIGURATION: GcpConfiguration =
        GcpConfiguration { name: "gcp-pull-ordering", consumption: Consumption::Pull, ordering: true };
    &CONFIGURATION
}

pub fn gcp_stream() -> &'static GcpConfiguration {
    static CONFIGURATION: GcpConfiguration =
        GcpConfiguration { name: "gcp-stream", consumption: Consumption::Stream, ordering: false };
    &CONFIGURATION
}

pub fn gcp_stream_ordering() -> &'static GcpConfiguration {
    static CONFIGURATION: GcpConfiguration =
        GcpConfiguration { name: "gcp-stream-ordering", consumption: Consumption::Stream, ordering: true };
    &CONFIGURATION
}

/// What a cell created, deleted at its end: its subscriptions, then its topics.
#[derive(Default)]
pub struct DeleteAll {
    subscriptions: Vec<String>,
    topics: Vec<String>,
}

#[async_trait]
impl Teardown for DeleteAll {
    async fn teardown(&self) {
        connection().delete(&self.subscriptions, &self.topics).await;
    }
}

/// As the seed's environment: every subscription, the cell's and its destinations' readers, has a
/// native DeadLetterPolicy "so delivery_attempt is populated on both sides": a redelivery is
/// broker-counted and a dead-letter read exercises the discriminator. Without a dead-letter topic
/// the policy's topic is the subscription's own `<name>-native-dlq`.
fn counted(
    common: Subscription,
    consumption: Consumption,
    lease: Duration,
    created: &mut DeleteAll,
) -> GcpSubscription {
    let mut subscription = GcpSubscription::new(common, consumption);
    subscription.dead_letter_policy = Some(NATIVE_REDRIVE_LIMIT);
    if subscription.subscription.dead_letter_routing_key.is_none() {
        subscription.native_dead_letter_topic = Some(format!("{}-native-dlq", subscription.subscription.name));
    }
    subscription.ack_deadline = lease;
    subscription.max_lease = Some(lease);
    created.subscriptions.push(subscription.subscription.name.clone());
    created.topics.push(subscription.subscription.routing_key.clone());
    created.topics.extend(subscription.native_dead_letter_topic.clone());
    subscription
}

#[async_trait]
impl CellBroker for GcpConfiguration {
    type Created = DeleteAll;

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A topic named as the cell, and its subscription `<topic>-sub`.
    fn names(&self, topic: &str) -> CellNames {
        CellNames::new(format!("{topic}-sub"), topic)
    }

    async fn channel(&self, plan: &CellPlan, created: &mut DeleteAll) -> Arc<dyn Channel> {
        let mut subscription = counted(plan.subscription.clone(), self.consumption, self.required_lease(), created);
        subscription.ordering = self.ordering;
        let topic = &plan.names.routing_key;
        connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {topic}: {e}"))
    }

    async fn reader(&self, destination: &str, created: &mut DeleteAll) -> Arc<dyn Channel> {
        let reader = counted(reader_subscription(destination), Consumption::Pull, self.required_lease(), created);
        connection().channel(&reader).await.expect("reader")
    }

    fn producer(&self, _: &CellPlan) -> Arc<dyn Producer> {
        Arc::new(connection().producer(self.ordering))
    }

    fn teardown(&self, created: DeleteAll) -> Option<Box<dyn Teardown>> {
        Some(Box::new(created))
    }
}

/// The Cloud SDK Pub/Sub emulator (or a stand-in image with the same interface).
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::google_cloud_sdk_emulators::{CloudSdk, PUBSUB_PORT};
    use testcontainers_modules::testcontainers::ImageExt;
    let request = CloudSdk::pubsub().with_name(&image.name).with_tag(&image.tag);
    let image = image.clone();
    on_runtime(async move {
        start("gcp", "Pub/Sub emulator container", request, &image, Reach::Published(&[PUBSUB_PORT])).await
    })
}
