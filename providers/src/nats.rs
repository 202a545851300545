//! The NATS JetStream configuration: `nats-jetstream` (a stream per subject, a durable pull
//! consumer per subscription).
//!
//! The server, once per test binary, from the source `source::start` picks: the URL in
//! `NATS_URL` (`nats://host:port`), or nats-server (`cargo xtask brokers install nats`) as a
//! project-owned local process behind `providers/brokers/nats/launcher.sh`: a free loopback port,
//! JetStream on, its store in a work dir of its own under `.brokers/nats/run`, stopped and deleted
//! when the binary ends; or a container (`container`, testcontainers-modules' `Nats` with
//! `--jetstream`) of the image its facts name (providers/brokers/nats/broker.toml), or of the
//! stand-in `cargo xtask brokers images` builds through `CONFORMANCE_NATS_IMAGE`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::nats::{NatsConnection, NatsSubscription};
use gateway::{Channel, Producer, Subscription};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};

struct Broker {
    url: String,
    connection: NatsConnection,
    _running: Running,
}

/// The nats-server `cargo xtask brokers install nats` builds.
fn server() -> PathBuf {
    local::install_dir("nats").join("nats-server")
}

fn start_local() -> Result<LocalProcess, LocalError> {
    let port = local::free_loopback_port();
    start_server(&local::install_dir("nats").join("run").join(port.to_string()), port, false)
}

/// A server of the caller's own on `port`, its store in `folder`, kept when it stops (loaded on
/// the next start): a test stops it and starts it again between two deliveries. Its URL is
/// [`url_at`]`(port)`.
pub fn start_kept(folder: &Path, port: u16) -> Result<LocalProcess, LocalError> {
    start_server(folder, port, true)
}

/// The URL of a local server on `port`.
pub fn url_at(port: u16) -> String {
    format!("nats://127.0.0.1:{port}")
}

fn start_server(work: &Path, port: u16, kept: bool) -> Result<LocalProcess, LocalError> {
    let server = server();
    if !server.exists() {
        let install = "cargo xtask brokers install nats";
        return Err(LocalError::NotInstalled { name: "nats-server", missing: server, install });
    }
    let mut command = Command::new("bash");
    command
        .arg(local::workspace_root().join("providers/brokers/nats/launcher.sh"))
        .arg(server)
        .arg(work)
        .arg(port.to_string())
        .args(kept.then_some("kept"));
    local::start("nats-server", "nats", command, port, "nats ready", Duration::from_secs(30))
}

fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("nats");
    Definition {
        transport: "nats",
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
        let url = running.endpoint(|address| format!("nats://{address}"));
        let address = url.clone();
        let connection =
            source::require_answer("nats", &running, &url, async move { NatsConnection::connect(&address).await });
        Broker { url, connection, _running: running }
    })
}

/// The connection to this binary's NATS server, for bespoke tests.
pub fn connection() -> &'static NatsConnection {
    &broker().connection
}

/// The URL of this binary's NATS server, for bespoke tests that connect on their own.
pub fn url() -> &'static str {
    &broker().url
}

pub struct NatsConfiguration {
    name: &'static str,
}

pub fn nats_jetstream() -> &'static NatsConfiguration {
    static CONFIGURATION: NatsConfiguration = NatsConfiguration { name: "nats-jetstream" };
    &CONFIGURATION
}

/// A channel for `subscription` (a durable consumer on its subject's stream), with the cells'
/// lease as its `ack_wait`.
async fn channel(subscription: Subscription, lease: Duration) -> Arc<dyn Channel> {
    let name = subscription.name.clone();
    let mut subscription = NatsSubscription::new(subscription);
    subscription.lease = lease;
    connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

// Streams are left on the server: it is the test binary's own, its store deleted at the end.
#[async_trait]
impl CellBroker for NatsConfiguration {
    type Created = ();

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A subject named as the cell, consumed by the durable consumer `<subject>-group`.
    fn names(&self, subject: &str) -> CellNames {
        CellNames::new(format!("{subject}-group"), subject)
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

/// NATS through testcontainers-modules' `Nats`, with `--jetstream`: the official image's
/// interface (port 4222, "Server is ready" on stderr), which the stand-in honours.
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::nats::{Nats, NatsServerCmd};
    use testcontainers_modules::testcontainers::ImageExt;
    let request = Nats::default()
        .with_cmd(&NatsServerCmd::default().with_jetstream())
        .with_name(&image.name)
        .with_tag(&image.tag);
    let image = image.clone();
    on_runtime(async move { start("nats", "NATS container", request, &image, Reach::Published(&[4222])).await })
}
