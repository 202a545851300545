//! The Azure Queue Storage configuration: `azure-queue` (a queue per cell, consumed directly).
//!
//! The service, once per test binary, from the source `source::start` picks: the storage account
//! whose connection string is in `AZURE_STORAGE_CONNECTION_STRING` (its key never written out),
//! or Azurite's queue service (`cargo xtask brokers install azure`) as a project-owned local
//! process behind `providers/brokers/azure/launcher.sh`: a free loopback port, queues in memory,
//! the development account, stopped when the binary ends; or a container (`container`,
//! testcontainers-modules' `Azurite`) of the image its facts name
//! (providers/brokers/azure/broker.toml), or of the stand-in `cargo xtask brokers images` builds
//! through `CONFORMANCE_AZURITE_IMAGE`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::azure::{AzureAccount, AzureQueueConnection, AzureQueueSubscription};
use gateway::{Channel, Producer, Subscription};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};

struct Broker {
    connection_string: String,
    connection: AzureQueueConnection,
    _running: Running,
}

/// Where `cargo xtask brokers install azure` puts Azurite and its Node.
fn install() -> PathBuf {
    local::install_dir("azure")
}

fn start_local() -> Result<LocalProcess, LocalError> {
    let port = local::free_loopback_port();
    start_service(&install().join("run").join(port.to_string()), port, false)
}

/// A service of the caller's own on `port`, its queues stored in `folder` and kept when it stops
/// (loaded on the next start): a test stops it and starts it again between two deliveries. Its
/// connection string is [`connection_string_at`]`(port)`.
pub fn start_kept(folder: &Path, port: u16) -> Result<LocalProcess, LocalError> {
    start_service(folder, port, true)
}

/// The development account's connection string for an Azurite queue service at `address`.
pub fn connection_string_for(address: &str) -> String {
    let (name, key) = gateway::transport::azure::DEVELOPMENT_ACCOUNT;
    format!("DefaultEndpointsProtocol=http;AccountName={name};AccountKey={key};QueueEndpoint=http://{address}/{name};")
}

/// The connection string of a local service on `port`.
pub fn connection_string_at(port: u16) -> String {
    connection_string_for(&format!("127.0.0.1:{port}"))
}

fn start_service(work: &Path, port: u16, kept: bool) -> Result<LocalProcess, LocalError> {
    let main = install().join("node_modules/azurite/dist/src/queue/main.js");
    if !main.exists() {
        let install = "cargo xtask brokers install azure";
        return Err(LocalError::NotInstalled { name: "Azurite", missing: main, install });
    }
    let mut command = Command::new("bash");
    command
        .arg(local::workspace_root().join("providers/brokers/azure/launcher.sh"))
        .arg(install())
        .arg(work)
        .arg(port.to_string())
        .args(kept.then_some("kept"));
    // A hang detector, never a speed bound: Node loads Azurite in about 1.5 s when idle, but a
    // CI run once took over 30 s (the old ceiling) while every other broker started beside it.
    // The launcher gives up first (110 s), printing Azurite's log.
    local::start("Azurite", "azure", command, port, "azurite ready", Duration::from_secs(120))
}

fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("azure");
    Definition {
        transport: "azure",
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
        let connection_string = running.endpoint(connection_string_for);
        let text = connection_string.clone();
        let connection = source::require_answer("azure", &running, &connection_string, async move {
            AzureQueueConnection::connect(&text).await
        });
        Broker { connection_string, connection, _running: running }
    })
}

/// The connection to this binary's queue service, for bespoke tests.
pub fn connection() -> &'static AzureQueueConnection {
    &broker().connection
}

/// This binary's account, for bespoke tests that connect on their own (through a proxy, say).
pub fn account() -> AzureAccount {
    AzureAccount::from_connection_string(&broker().connection_string).expect("the binary's connection string reads")
}

pub struct AzureConfiguration {
    name: &'static str,
}

pub fn azure_queue() -> &'static AzureConfiguration {
    static CONFIGURATION: AzureConfiguration = AzureConfiguration { name: "azure-queue" };
    &CONFIGURATION
}

/// A channel for `subscription` (its queue), with the cells' lease as its visibility timeout.
async fn channel(subscription: Subscription, lease: Duration) -> Arc<dyn Channel> {
    let name = subscription.name.clone();
    let mut subscription = AzureQueueSubscription::new(subscription);
    subscription.lease = lease;
    connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

// Queues are left on the service: it is the test binary's own, in memory, gone at its end.
#[async_trait]
impl CellBroker for AzureConfiguration {
    type Created = ();

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A queue named as the cell, consumed by the channel of the same name.
    fn names(&self, queue: &str) -> CellNames {
        CellNames::new(queue, queue)
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

/// Azurite through testcontainers-modules' `Azurite`: the official image's interface (the queue
/// service on port 10001), which the stand-in honours.
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::azurite::Azurite;
    use testcontainers_modules::testcontainers::ImageExt;
    // The client may ask for a service version newer than the image names; no telemetry (no
    // network here to send it to).
    let azurite = Azurite::default().with_skip_api_version_check().with_disable_telemetry();
    let request = azurite.with_name(&image.name).with_tag(&image.tag);
    let image = image.clone();
    on_runtime(async move { start("azure", "Azurite container", request, &image, Reach::Published(&[10001])).await })
}
