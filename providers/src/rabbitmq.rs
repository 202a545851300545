//! The RabbitMQ configurations: `rabbitmq` (a classic queue; the transport republishes) and
//! `rabbitmq-quorum` (a quorum queue; the broker counts deliveries in `x-delivery-count`).
//!
//! The broker, once per test binary, from the source `source::start` picks: the URL in
//! `AMQP_URL`, or a project-owned node of Debian's rabbitmq-server (`cargo xtask brokers install
//! rabbitmq`) behind `providers/brokers/rabbitmq/launcher.sh`: its own folder, epmd and cookie,
//! on free loopback ports, gone (folder included) when the binary exits. Never the system service.
//! Or a container (`container`, testcontainers-modules' `RabbitMq`) of
//! the image its facts name (providers/brokers/rabbitmq/broker.toml), or of the stand-in `cargo xtask brokers images` builds
//! (`localhost/conformance-rabbitmq:3.10.8`, Debian's rabbitmq-server) through
//! `CONFORMANCE_RABBITMQ_IMAGE`. The node's name is `rabbit@<the container's hostname>`, fixed for
//! the container's life, which is all quorum queues need of it (both configurations pass there).

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::rabbitmq::{QueueType, RabbitMqConnection, RabbitMqSubscription};
use gateway::{Channel, Producer, Subscription};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};
use contract::Implementation;

/// The quorum cells' `x-delivery-limit` (the native redrive limit M): far above the budget R = 3
/// the cells use, so the budget, not the broker, rejects (R-10 stays quiet).
pub const DELIVERY_LIMIT: u32 = 20;

struct Broker {
    url: String,
    connection: RabbitMqConnection,
    _running: Running,
}

/// The node's AMQP port `p` with `p + 1 ..= p + 11` free too (the node's distribution port, and
/// the CLI tools' distribution ports should anyone run them against the node), and epmd's port:
/// (AMQP, distribution, epmd), all distinct.
fn free_node_ports() -> (u16, u16, u16) {
    let mut ports = local::FreePorts::default();
    let amqp = ports.pick(&(1..=11).collect::<Vec<_>>());
    (amqp, amqp + 1, ports.pick(&[]))
}

/// The project-owned node: the launcher prints `ready <host:port>` once it accepts AMQP. A
/// node boots in 9 to 20 s on a loaded 2-core machine (measured), hence the ceiling.
fn start_local() -> Result<LocalProcess, LocalError> {
    let ports = free_node_ports();
    match crate::broker::implementation(Implementation::RabbitMq) {
        Implementation::RabbitMq4 => start_on_trixie(ports),
        // The environment names only rabbitmq's implementations (the contract checks it).
        _ => start_node(&local::install_dir("rabbitmq").join("run").join(ports.0.to_string()), ports, false),
    }
}

/// RabbitMQ 4.0.5 (`CONFORMANCE_RABBITMQ_IMPL=rabbitmq-4.0.5`): the same launcher, in the Debian
/// 13 root (`local::in_trixie`); its work dir is the root's `/run/conformance/<amqp port>`,
/// deleted when it stops.
fn start_on_trixie((amqp, dist, epmd): (u16, u16, u16)) -> Result<LocalProcess, LocalError> {
    let name = Implementation::RabbitMq4.name();
    let binary = "/usr/lib/rabbitmq/bin/rabbitmq-server";
    let mut command =
        local::in_trixie(name, binary, "rabbitmq/launcher.sh", Implementation::RabbitMq4.install_command())?;
    command
        .arg(format!("/run/conformance/{amqp}"))
        .args([amqp, dist, epmd].map(|port| port.to_string()))
        .arg(format!("conformance-{amqp}"));
    local::start(name, "rabbitmq", command, amqp, "ready", Duration::from_secs(120))
}

/// An AMQP port for [`start_kept`]: the one after it (the node's distribution port) and the 12th
/// after it (epmd's) are free too.
pub fn free_kept_port() -> u16 {
    local::FreePorts::default().pick(&(1..=12).collect::<Vec<_>>())
}

/// A node of the caller's own on AMQP port `amqp` (from [`free_kept_port`]), its database in
/// `folder`, kept when it stops: started again there, the same node name finds it. A test stops
/// and starts it between two deliveries. Its URL is [`url_at`]`(amqp)`.
pub fn start_kept(folder: &Path, amqp: u16) -> Result<LocalProcess, LocalError> {
    start_node(folder, (amqp, amqp + 1, amqp + 12), true)
}

/// The AMQP URL of a local node on `amqp`.
pub fn url_at(amqp: u16) -> String {
    format!("amqp://guest:guest@127.0.0.1:{amqp}/%2f")
}

fn start_node(work: &Path, (amqp, dist, epmd): (u16, u16, u16), kept: bool) -> Result<LocalProcess, LocalError> {
    let binary = std::path::Path::new("/usr/lib/rabbitmq/bin/rabbitmq-server");
    if !binary.exists() {
        let install = "cargo xtask brokers install rabbitmq";
        return Err(LocalError::NotInstalled { name: "rabbitmq", missing: binary.to_path_buf(), install });
    }
    let mut command = Command::new("bash");
    command
        .arg(local::workspace_root().join("providers/brokers/rabbitmq/launcher.sh"))
        .arg(work)
        .arg(amqp.to_string())
        .arg(dist.to_string())
        .arg(epmd.to_string())
        .arg(format!("conformance-{amqp}"))
        .args(kept.then_some("kept"));
    local::start("rabbitmq", "rabbitmq", command, amqp, "ready", Duration::from_secs(120))
}

/// The RabbitMQ broker in each source (chosen by `source::start`).
fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("rabbitmq");
    Definition {
        transport: "rabbitmq",
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
        source::refuse_another_implementation_unless_local(&running, Implementation::RabbitMq);
        let url = running.endpoint(|address| format!("amqp://guest:guest@{address}/%2f"));
        let address = url.clone();
        let connection =
            source::require_answer(
                "rabbitmq",
                &running,
                &url,
                async move { RabbitMqConnection::connect(&address).await },
            );
        Broker { url, connection, _running: running }
    })
}

/// The connection to this binary's RabbitMQ broker, for bespoke tests.
pub fn connection() -> &'static RabbitMqConnection {
    &broker().connection
}

/// The AMQP URL of this binary's broker, for bespoke tests that speak AMQP themselves.
pub fn url() -> &'static str {
    &broker().url
}

pub struct RabbitMqConfiguration {
    name: &'static str,
    queue_type: QueueType,
}

pub fn rabbitmq() -> &'static RabbitMqConfiguration {
    static CONFIGURATION: RabbitMqConfiguration =
        RabbitMqConfiguration { name: "rabbitmq", queue_type: QueueType::Classic };
    &CONFIGURATION
}

pub fn rabbitmq_quorum() -> &'static RabbitMqConfiguration {
    static CONFIGURATION: RabbitMqConfiguration =
        RabbitMqConfiguration { name: "rabbitmq-quorum", queue_type: QueueType::Quorum };
    &CONFIGURATION
}

impl RabbitMqConfiguration {
    /// The subscription on this configuration's queue type; a quorum work queue gets the cells'
    /// delivery limit, a destination reader none (its queue was declared without one).
    fn subscription(&self, subscription: Subscription, work_queue: bool) -> RabbitMqSubscription {
        match self.queue_type {
            QueueType::Classic => RabbitMqSubscription::classic(subscription),
            QueueType::Quorum => RabbitMqSubscription::quorum(subscription, work_queue.then_some(DELIVERY_LIMIT)),
        }
    }

    async fn channel(&self, subscription: Subscription, work_queue: bool) -> Arc<dyn Channel> {
        let name = subscription.name.clone();
        let subscription = self.subscription(subscription, work_queue);
        connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {name}: {e}"))
    }
}

// Queues are left on the broker: its folder is the test binary's own and goes with it.
#[async_trait]
impl CellBroker for RabbitMqConfiguration {
    type Created = ();

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A queue named as the cell, read by the subscription `<queue>-sub`.
    fn names(&self, queue: &str) -> CellNames {
        CellNames::new(format!("{queue}-sub"), queue)
    }

    async fn channel(&self, plan: &CellPlan, _: &mut ()) -> Arc<dyn Channel> {
        RabbitMqConfiguration::channel(self, plan.subscription.clone(), true).await
    }

    async fn reader(&self, destination: &str, _: &mut ()) -> Arc<dyn Channel> {
        RabbitMqConfiguration::channel(self, reader_subscription(destination), false).await
    }

    fn producer(&self, _: &CellPlan) -> Arc<dyn Producer> {
        Arc::new(connection().producer())
    }
}

/// The port RabbitMQ takes AMQP on in its container (the official image's).
#[cfg(feature = "containers")]
const AMQP_PORT: u16 = 5672;

/// RabbitMQ through testcontainers-modules' `RabbitMq`: the official `-management` image (its
/// ready line counts that image's four plugins), guest allowed from the published port.
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::rabbitmq::RabbitMq;
    use testcontainers_modules::testcontainers::ImageExt;
    let request = RabbitMq::default().with_name(&image.name).with_tag(&image.tag);
    let image = image.clone();
    on_runtime(
        async move { start("rabbitmq", "RabbitMQ container", request, &image, Reach::Published(&[AMQP_PORT])).await },
    )
}
