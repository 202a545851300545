//! The RocketMQ configuration: `rocketmq` (pop consumption, a normal topic).
//!
//! The broker, once per test binary, from the source `source::start` picks: the name server in
//! `NAMESRV_ADDR` (RocketMQ's own variable), the image `cargo xtask brokers images` builds (the
//! same jars and launcher on Debian's JRE; see `container`), or a name server and
//! broker in one local JVM, from the jars and launcher `cargo xtask brokers install rocketmq` puts
//! under `.brokers/rocketmq`.
//! Or, when `CONFORMANCE_ROCKETMQ_IMPL=rocketmq-rust` (see `implementation`), the Rust name server
//! and broker `cargo xtask brokers install rocketmq --impl rocketmq-rust` puts under
//! `.brokers/rocketmq/rust`, behind `providers/brokers/rocketmq-rust/launcher.sh`.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::rocketmq::{RocketMqConnection, RocketMqSubscription};
use gateway::{Channel, Producer, Subscription};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};
use contract::Implementation;

struct Broker {
    connection: RocketMqConnection,
    _running: Running,
}

/// The name server's port and the broker's, `p`, with `p - 2` (its fast channel) and `p + 1`
/// (its HA port) free too: four distinct ports.
pub fn free_ports() -> (u16, u16) {
    let mut ports = local::FreePorts::default();
    (ports.pick(&[]), ports.pick(&[-2, 1]))
}

/// The local broker; its process's port is the name server's, the address clients start from.
fn start_launcher() -> Result<LocalProcess, LocalError> {
    let ports = free_ports();
    start_java(&local::install_dir("rocketmq").join("run").join(ports.1.to_string()), ports, false, None)
}

/// A name server and broker of the caller's own on `ports` (from [`free_ports`]), their store in
/// `folder`, shut down in order and kept when they stop: a test stops them and starts them again
/// between two deliveries. The name server's address is `127.0.0.1:{ports.0}`.
pub fn start_kept(folder: &Path, ports: (u16, u16)) -> Result<LocalProcess, LocalError> {
    start_java(folder, ports, true, None)
}

/// As [`start_kept`], the broker registering `advertised` (another loopback address, such as
/// 127.0.0.2) with the name server: a test's fault proxy listens there on the broker's port and
/// forwards to 127.0.0.1, so every connection a client makes to the broker goes through it.
pub fn start_kept_behind(folder: &Path, ports: (u16, u16), advertised: &str) -> Result<LocalProcess, LocalError> {
    start_java(folder, ports, true, Some(advertised))
}

fn start_java(
    work: &Path,
    (name_server_port, broker_port): (u16, u16),
    kept: bool,
    advertised: Option<&str>,
) -> Result<LocalProcess, LocalError> {
    let install = local::install_dir("rocketmq");
    let mut command = Command::new("java");
    command
        // Direct memory: the broker's per-thread store buffers (see the launcher) and Netty's.
        .args(["-Xms128m", "-Xmx512m", "-XX:MaxDirectMemorySize=384m", "-XX:+UseSerialGC"])
        // RocketMQ logs under the user's home: keep them in the run's folder.
        .arg(format!("-Duser.home={}", work.display()))
        .arg("-cp")
        .arg(format!("{}:{}", install.join("lib/*").display(), install.join("classes").display()))
        .arg("Launcher")
        .arg(work)
        .arg(name_server_port.to_string())
        .arg(broker_port.to_string())
        .args(kept.then_some("kept"))
        .args(advertised);
    local::start("rocketmq", "rocketmq", command, name_server_port, "rocketmq ready", Duration::from_secs(90))
}

/// The Rust name server and broker (rocketmq-rust), behind the project's launcher script, which
/// writes their configuration, waits until the name server routes the broker's TBW102 template
/// topic, prints the ready line, and stops both when its stdin closes, deleting their folder.
fn start_rocketmq_rust() -> Result<LocalProcess, LocalError> {
    let install = local::install_dir("rocketmq").join("rust");
    let binary = install.join("bin/rocketmq-broker-rust");
    if !binary.exists() {
        let install = Implementation::RocketMqRust.install_command();
        return Err(LocalError::NotInstalled { name: "rocketmq-rust", missing: binary, install });
    }
    let (name_server_port, broker_port) = free_ports();
    let mut command = Command::new("bash");
    command
        .arg(local::workspace_root().join("providers/brokers/rocketmq-rust/launcher.sh"))
        .arg(install.join("bin"))
        .arg(install.join("run").join(broker_port.to_string()))
        .arg(name_server_port.to_string())
        .arg(broker_port.to_string())
        // The broker takes the name server from NAMESRV_ADDR over its configuration file: an
        // endpoint left in the shell must not point it elsewhere.
        .env_remove("NAMESRV_ADDR");
    local::start("rocketmq-rust", "rocketmq", command, name_server_port, "rocketmq-rust ready", Duration::from_secs(90))
}

/// The local broker of the chosen implementation.
fn start_local() -> Result<LocalProcess, LocalError> {
    match crate::broker::implementation(Implementation::Apache) {
        Implementation::RocketMqRust => start_rocketmq_rust(),
        // The environment names only rocketmq's implementations (the contract checks it).
        _ => start_launcher(),
    }
}

/// The RocketMQ broker in each source (chosen by `source::start`).
fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("rocketmq");
    Definition {
        transport: "rocketmq",
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
        source::refuse_another_implementation_unless_local(&running, Implementation::Apache);
        let name_server = running.endpoint(|address| address.to_owned());
        let address = name_server.clone();
        let connection = source::require_answer("rocketmq", &running, &name_server, async move {
            RocketMqConnection::connect(&address).await
        });
        Broker { connection, _running: running }
    })
}

/// The connection to this binary's RocketMQ broker, for bespoke tests.
pub fn connection() -> &'static RocketMqConnection {
    &broker().connection
}

pub struct RocketMqConfiguration {
    name: &'static str,
}

pub fn rocketmq() -> &'static RocketMqConfiguration {
    static CONFIGURATION: RocketMqConfiguration = RocketMqConfiguration { name: "rocketmq" };
    &CONFIGURATION
}

/// A channel for `subscription` (a consumer group on a topic), with the cells' lease.
async fn channel(subscription: Subscription, lease: Duration) -> Arc<dyn Channel> {
    let name = subscription.name.clone();
    let mut subscription = RocketMqSubscription::new(subscription);
    subscription.invisible_time = lease;
    connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

// Topics are left on the broker: its store is the test binary's own and goes with it.
#[async_trait]
impl CellBroker for RocketMqConfiguration {
    type Created = ();

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A topic named as the cell, consumed by the group `<topic>-group`.
    fn names(&self, topic: &str) -> CellNames {
        CellNames::new(format!("{topic}-group"), topic)
    }

    async fn channel(&self, plan: &CellPlan, _: &mut ()) -> Arc<dyn Channel> {
        channel(plan.subscription.clone(), self.required_lease()).await
    }

    async fn reader(&self, destination: &str, _: &mut ()) -> Arc<dyn Channel> {
        channel(reader_subscription(destination), self.required_lease()).await
    }

    fn producer(&self, _: &CellPlan) -> Arc<dyn Producer> {
        Arc::new(connection().producer())
    }
}

/// Apache RocketMQ's name server and broker in one container, from the image `cargo xtask brokers
/// images` builds (testcontainers-modules has no RocketMQ module). Its command is the two ports.
///
/// On the host network, not published ports: the broker registers its own address with the name
/// server, and clients connect to the address the name server returns. Behind published ports
/// that address is the container's, which the client cannot reach; on the host network the broker
/// binds 127.0.0.1 on the ports the test picked, so the address it registers is the one clients
/// use, and it stays loopback only like the local process.
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::testcontainers::ImageExt;
    use testcontainers_modules::testcontainers::{core::WaitFor, GenericImage};
    let (name_server, broker) = free_ports();
    let request = GenericImage::new(&image.name, &image.tag)
        .with_wait_for(WaitFor::message_on_stdout("rocketmq ready"))
        .with_cmd([name_server.to_string(), broker.to_string()]);
    let image = image.clone();
    on_runtime(async move {
        start("rocketmq", "RocketMQ container", request, &image, Reach::HostNetwork(name_server)).await
    })
}
