//! The MQTT configuration: `mqtt` (MQTT 3.1.1, QoS 1, a persistent session per subscription).
//!
//! The broker, once per test binary, from the source `source::start` picks: the broker at
//! `MQTT_BROKER` (`host:port`), or a local mosquitto (Debian's package, `cargo xtask brokers
//! install mqtt`) behind `providers/brokers/mosquitto/launcher.sh`, which writes its
//! configuration in a temporary folder, listens on a free loopback port and stops with the
//! binary; or a container (`container`, testcontainers-modules' `Mosquitto`) of
//! the image its facts name (providers/brokers/mqtt/broker.toml), or of the stand-in `cargo xtask brokers images` builds
//! (`localhost/conformance-mosquitto:2.0.11`, Debian's mosquitto) through `CONFORMANCE_MQTT_IMAGE`.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::mqtt::MqttConnection;
use gateway::{Channel, ChannelError, Producer, Subscription};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};
use contract::Implementation;

/// Where Debian's mosquitto package puts the broker.
pub const MOSQUITTO: &str = "/usr/sbin/mosquitto";

struct Broker {
    connection: MqttConnection,
    address: String,
    _running: Running,
}

fn start_local() -> Result<LocalProcess, LocalError> {
    if crate::broker::implementation(Implementation::Mosquitto) == Implementation::Mosquitto2 {
        return start_on_trixie();
    }
    launch(local::free_loopback_port(), None)
}

/// A mosquitto of the caller's own on `port`, persisting its sessions and queued messages in
/// `store` and reading them back when started again on it: a test stops it and starts it again
/// between two deliveries. Its address is `127.0.0.1:{port}`.
pub fn start_kept(store: &Path, port: u16) -> Result<LocalProcess, LocalError> {
    launch(port, Some(store))
}

/// Debian's mosquitto behind the launcher on `port`, persisting into `store` when given.
fn launch(port: u16, store: Option<&Path>) -> Result<LocalProcess, LocalError> {
    if !Path::new(MOSQUITTO).exists() {
        let missing = MOSQUITTO.into();
        return Err(LocalError::NotInstalled {
            name: "mosquitto",
            missing,
            install: "cargo xtask brokers install mqtt",
        });
    }
    let mut command = Command::new("bash");
    command
        .arg(local::workspace_root().join("providers/brokers/mosquitto/launcher.sh"))
        .arg(MOSQUITTO)
        .arg(port.to_string())
        .args(store);
    local::start("mosquitto", "mqtt", command, port, "mosquitto ready", Duration::from_secs(30))
}

/// mosquitto 2.0.21 (`CONFORMANCE_MQTT_IMPL=mosquitto-2.0.21`): the same launcher, in the Debian
/// 13 root (`local::in_trixie`).
fn start_on_trixie() -> Result<LocalProcess, LocalError> {
    let name = Implementation::Mosquitto2.name();
    let mut command =
        local::in_trixie(name, MOSQUITTO, "mosquitto/launcher.sh", Implementation::Mosquitto2.install_command())?;
    let port = local::free_loopback_port();
    command.arg(MOSQUITTO).arg(port.to_string());
    local::start(name, "mqtt", command, port, "mosquitto ready", Duration::from_secs(30))
}

/// The MQTT broker in each source (chosen by `source::start`).
fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("mqtt");
    Definition {
        transport: "mqtt",
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
        source::refuse_another_implementation_unless_local(&running, Implementation::Mosquitto);
        let endpoint = running.endpoint(|address| address.to_owned());
        let address = endpoint.clone();
        let connection =
            source::require_answer("mqtt", &running, &endpoint, async move { MqttConnection::connect(&address).await });
        Broker { connection, address: endpoint, _running: running }
    })
}

/// The connection to this binary's MQTT broker, for bespoke tests.
pub fn connection() -> &'static MqttConnection {
    &broker().connection
}

/// This binary's MQTT broker as `host:port`, for bespoke tests that need a plain client.
pub fn address() -> &'static str {
    &broker().address
}

pub struct MqttConfiguration {
    name: &'static str,
}

pub fn mqtt() -> &'static MqttConfiguration {
    static CONFIGURATION: MqttConfiguration = MqttConfiguration { name: "mqtt" };
    &CONFIGURATION
}

/// A channel for `subscription`: a persistent session on its topic.
async fn channel(subscription: Subscription) -> Arc<dyn Channel> {
    let name = subscription.name.clone();
    connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

// Sessions are left on the broker: it is the test binary's own and goes with it.
#[async_trait]
impl CellBroker for MqttConfiguration {
    type Created = ();

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A topic named as the cell, read by the persistent session `<topic>-session`.
    fn names(&self, topic: &str) -> CellNames {
        CellNames::new(format!("{topic}-session"), topic)
    }

    async fn channel(&self, plan: &CellPlan, _: &mut ()) -> Arc<dyn Channel> {
        channel(plan.subscription.clone()).await
    }

    /// A channel opened while another of the subscription is open is refused (see
    /// `gateway::transport::mqtt`: one consumer per subscription).
    async fn try_channel(&self, plan: &CellPlan) -> Result<Arc<dyn Channel>, ChannelError> {
        connection().channel(&plan.subscription).await
    }

    async fn reader(&self, destination: &str, _: &mut ()) -> Arc<dyn Channel> {
        channel(reader_subscription(destination)).await
    }

    fn producer(&self, _: &CellPlan) -> Arc<dyn Producer> {
        Arc::new(connection().producer())
    }
}

/// The port mosquitto listens on in its container (the official image's).
#[cfg(feature = "containers")]
const MQTT_PORT: u16 = 1883;

/// mosquitto through testcontainers-modules' `Mosquitto`: the official image started with its
/// `/mosquitto-no-auth.conf` (anonymous clients on 1883). The module waits for "mosquitto version
/// 2.0.18 running", its own tag's version, which any other version (the pinned 2.0.11, Debian's in
/// the stand-in) never prints: this waits for the part of that line every version prints.
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::mosquitto::Mosquitto;
    use testcontainers_modules::testcontainers::core::WaitFor;
    use testcontainers_modules::testcontainers::ImageExt;
    let request = Mosquitto::default()
        .with_name(&image.name)
        .with_tag(&image.tag)
        .with_ready_conditions(vec![WaitFor::message_on_stderr(" running")]);
    let image = image.clone();
    on_runtime(
        async move { start("mqtt", "mosquitto container", request, &image, Reach::Published(&[MQTT_PORT])).await },
    )
}
