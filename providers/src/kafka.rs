//! The Kafka configuration: `kafka` (a consumer group per subscription, manual commits, the
//! handled count republished in the record headers).
//!
//! The broker, once per test binary, from the source `source::start` picks: the cluster in
//! `KAFKA_BOOTSTRAP_SERVERS`, or one KRaft node (combined controller and broker) in a local JVM,
//! from the jars and launcher `cargo xtask brokers install kafka` puts under `.brokers/kafka`;
//! or a container (`container`, testcontainers-modules' `apache::Kafka`) of
//! the image its facts name (providers/brokers/kafka/broker.toml), or of the stand-in `cargo xtask brokers images` builds
//! (`localhost/conformance-kafka:3.9.0`: the same jars and launcher on Debian's JRE) through
//! `CONFORMANCE_KAFKA_IMAGE`.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::kafka::{KafkaConnection, KafkaSubscription};
use gateway::{Channel, Producer, Subscription};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};
use contract::Implementation;

/// The cells' group session timeout: a consumer that goes away (a cell's end) leaves its
/// partition to nobody else, so this only bounds how long the coordinator keeps a dead member.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

struct Broker {
    connection: KafkaConnection,
    _running: Running,
}

/// The local KRaft node: the launcher formats a fresh log dir in the run's folder, prints its
/// ready line, and stops (deleting the folder) when its stdin closes.
fn start_local() -> Result<LocalProcess, LocalError> {
    let ports = free_kept_ports();
    start_node(&local::install_dir("kafka").join("run").join(ports.0.to_string()), ports, false, None)
}

/// A broker port and a controller port for [`start_kept`].
pub fn free_kept_ports() -> (u16, u16) {
    let mut ports = local::FreePorts::default();
    (ports.pick(&[]), ports.pick(&[]))
}

/// A node of the caller's own on `ports` (from [`free_kept_ports`]), its log dir in `folder`,
/// formatted on the first start and kept when it stops: a test stops it and starts it again
/// between two deliveries. Its bootstrap address is `127.0.0.1:{ports.0}`.
pub fn start_kept(folder: &Path, ports: (u16, u16)) -> Result<LocalProcess, LocalError> {
    start_node(folder, ports, true, None)
}

/// As [`start_kept`], the node telling clients to reach it on `127.0.0.1:{advertised}`: a test's
/// fault proxy listens there and forwards to `ports.0`, so every connection a client makes, the
/// ones after the bootstrap included, goes through the proxy.
pub fn start_kept_behind(folder: &Path, ports: (u16, u16), advertised: u16) -> Result<LocalProcess, LocalError> {
    start_node(folder, ports, true, Some(advertised))
}

fn start_node(
    work: &Path,
    (port, controller): (u16, u16),
    kept: bool,
    advertised: Option<u16>,
) -> Result<LocalProcess, LocalError> {
    // Kafka 4.4.0 (`CONFORMANCE_KAFKA_IMPL=kafka-4.4.0`): its jars under .brokers/kafka-4.4.0,
    // behind the same launcher.
    let implementation = crate::broker::implementation(Implementation::Kafka);
    let install = match implementation {
        Implementation::Kafka4 => local::install_dir(implementation.name()),
        _ => local::install_dir("kafka"),
    };
    let launcher = install.join("classes/KafkaLauncher.class");
    if !launcher.exists() {
        return Err(LocalError::NotInstalled {
            name: implementation.name(),
            missing: launcher,
            install: implementation.install_command(),
        });
    }
    let mut command = Command::new("java");
    command
        .args(["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC"])
        .arg("-cp")
        .arg(format!("{}:{}", install.join("lib/*").display(), install.join("classes").display()))
        .arg("KafkaLauncher")
        .arg(work)
        .arg(port.to_string())
        .arg(controller.to_string())
        .args(kept.then_some("kept"))
        .args(advertised.map(|advertised| advertised.to_string()));
    local::start(implementation.name(), "kafka", command, port, "kafka ready", Duration::from_secs(120))
}

/// The Kafka broker in each source (chosen by `source::start`).
fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("kafka");
    Definition {
        transport: "kafka",
        endpoint_variable,
        image,
        #[cfg(feature = "containers")]
        container: Some(container),
        local: start_local,
    }
}

fn broker() -> &'static Broker {
    static BROKER: OnceLock<Broker> = OnceLock::new();
    BROKER.get_or_init(|| {
        let running = source::start(&definition());
        source::refuse_another_implementation_unless_local(&running, Implementation::Kafka);
        let bootstrap = running.endpoint(|address| address.to_owned());
        let address = bootstrap.clone();
        let connection =
            source::require_answer(
                "kafka",
                &running,
                &bootstrap,
                async move { KafkaConnection::connect(&address).await },
            );
        Broker { connection, _running: running }
    })
}

/// The connection to this binary's Kafka broker, for bespoke tests.
pub fn connection() -> &'static KafkaConnection {
    &broker().connection
}

pub struct KafkaConfiguration {
    name: &'static str,
}

pub fn kafka() -> &'static KafkaConfiguration {
    static CONFIGURATION: KafkaConfiguration = KafkaConfiguration { name: "kafka" };
    &CONFIGURATION
}

/// A channel for `subscription` (a consumer group on a topic), with the cells' session timeout.
pub async fn channel(subscription: Subscription) -> Arc<dyn Channel> {
    let name = subscription.name.clone();
    let mut subscription = KafkaSubscription::new(subscription);
    subscription.session_timeout = SESSION_TIMEOUT;
    connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

// Topics are left on the broker: its log dir is the test binary's own and goes with it.
#[async_trait]
impl CellBroker for KafkaConfiguration {
    type Created = ();

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A topic named as the cell, consumed by the group `<topic>-group`.
    fn names(&self, topic: &str) -> CellNames {
        CellNames::new(format!("{topic}-group"), topic)
    }

    async fn channel(&self, plan: &CellPlan, _: &mut ()) -> Arc<dyn Channel> {
        channel(plan.subscription.clone()).await
    }

    async fn reader(&self, destination: &str, _: &mut ()) -> Arc<dyn Channel> {
        channel(reader_subscription(destination)).await
    }

    fn producer(&self, _: &CellPlan) -> Arc<dyn Producer> {
        Arc::new(connection().producer())
    }
}

/// The port Kafka's clients connect to in its container (testcontainers-modules'
/// `apache::KAFKA_PORT`).
#[cfg(feature = "containers")]
const KAFKA_PORT: u16 = 9092;

/// One Kafka KRaft node through testcontainers-modules' `apache::Kafka` on the JVM image: the
/// configuration is the environment: the module's, the controller's listener moved to localhost, and the local
/// launcher's tuning (one partition, no initial rebalance delay, short group sessions, no topic
/// made by a typo).
///
/// Behind a published port, not on the host network: a Kafka client connects to the address the
/// broker advertises, and the module advertises the host-mapped one: once the container runs (and
/// its port is mapped), it writes the start script that exports `KAFKA_ADVERTISED_LISTENERS` with
/// `127.0.0.1:<mapped port>`, then waits for "Kafka Server started". So the broker stays on a
/// port the engine picks, on 127.0.0.1 only, and its fixed in-container ports (the inter-broker
/// 9093, the controller's 9094) cannot collide with another binary's, as on the host network.
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::kafka::apache::Kafka;
    use testcontainers_modules::testcontainers::ImageExt;
    let tuning = [
        // The module's listeners but the controller's, on localhost instead of 0.0.0.0: Kafka
        // 3.9.0 advertises the controller listener as bound and refuses a non-routable address
        // ("advertised.listeners cannot use the nonroutable meta-address 0.0.0.0"); the
        // controller is reached from inside the container only (the module's quorum voter is
        // localhost:9094).
        ("KAFKA_LISTENERS", "PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:9093,CONTROLLER://localhost:9094"),
        ("KAFKA_NUM_PARTITIONS", "1"),
        ("KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS", "1"),
        ("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1"),
        ("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1"),
        ("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0"),
        ("KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS", "1000"),
        ("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false"),
        ("KAFKA_HEAP_OPTS", "-Xms128m -Xmx512m"),
    ];
    let mut request = Kafka::default().with_jvm_image().with_name(&image.name).with_tag(&image.tag);
    for (name, value) in tuning {
        request = request.with_env_var(name, value);
    }
    let image = image.clone();
    on_runtime(async move { start("kafka", "Kafka container", request, &image, Reach::Published(&[KAFKA_PORT])).await })
}
