//! The Redis Streams configuration: `redis-streams` (a stream per topic, a consumer group per
//! subscription).
//!
//! The server, once per test binary, from the source `source::start` picks: the URL in
//! `REDIS_URL` (`redis://host:port`), or Debian's redis-server (`cargo xtask brokers install
//! redis`) as a project-owned local process behind `providers/brokers/redis/launcher.sh`: a free
//! loopback port, no persistence (`--save "" --appendonly no`), a work dir of its own under
//! `.brokers/redis/run`, stopped and deleted when the binary ends; or a container
//! (`container`, testcontainers-modules' `Redis`) of the image its facts name (providers/brokers/redis/broker.toml), or of the stand-in
//! `cargo xtask brokers images` builds (`localhost/conformance-redis:7.0.15`, Debian's
//! redis-server) through `CONFORMANCE_REDIS_IMAGE`.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::redis::{RedisConnection, RedisSubscription};
use gateway::{Channel, Producer, Subscription};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};
use contract::Implementation;

/// Debian's redis-server, which `cargo xtask brokers install redis` installs.
pub const REDIS_SERVER: &str = "/usr/bin/redis-server";

struct Broker {
    url: String,
    connection: RedisConnection,
    _running: Running,
}

fn start_local() -> Result<LocalProcess, LocalError> {
    let port = local::free_loopback_port();
    match crate::broker::implementation(Implementation::Redis) {
        Implementation::Redis8 => start_on_trixie(port),
        // The environment names only redis's implementations (the contract checks it).
        _ => start_server(&local::install_dir("redis").join("run").join(port.to_string()), port, false),
    }
}

/// Redis 8.0.2 (`CONFORMANCE_REDIS_IMPL=redis-8.0.2`): the same launcher, in the Debian 13 root
/// (`local::in_trixie`); its work dir is the root's `/run/conformance/<port>`.
fn start_on_trixie(port: u16) -> Result<LocalProcess, LocalError> {
    let name = Implementation::Redis8.name();
    let mut command =
        local::in_trixie(name, REDIS_SERVER, "redis/launcher.sh", Implementation::Redis8.install_command())?;
    command.arg(REDIS_SERVER).arg(format!("/run/conformance/{port}")).arg(port.to_string());
    local::start(name, "redis", command, port, "redis ready", Duration::from_secs(30))
}

/// A server of the caller's own on `port`, persisting to an append-only file in `folder` and
/// keeping it when it stops (loaded on the next start): a test stops it and starts it again
/// between two deliveries. Its URL is [`url_at`]`(port)`.
pub fn start_kept(folder: &Path, port: u16) -> Result<LocalProcess, LocalError> {
    start_server(folder, port, true)
}

/// The URL of a local server on `port`.
pub fn url_at(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

fn start_server(work: &Path, port: u16, kept: bool) -> Result<LocalProcess, LocalError> {
    if !Path::new(REDIS_SERVER).exists() {
        let install = "cargo xtask brokers install redis";
        return Err(LocalError::NotInstalled { name: "redis-server", missing: REDIS_SERVER.into(), install });
    }
    let mut command = Command::new("bash");
    command
        .arg(local::workspace_root().join("providers/brokers/redis/launcher.sh"))
        .arg(REDIS_SERVER)
        .arg(work)
        .arg(port.to_string())
        .args(kept.then_some("kept"));
    local::start("redis-server", "redis", command, port, "redis ready", Duration::from_secs(30))
}

fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("redis");
    Definition {
        transport: "redis",
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
        source::refuse_another_implementation_unless_local(&running, Implementation::Redis);
        let url = running.endpoint(|address| format!("redis://{address}"));
        let address = url.clone();
        let connection =
            source::require_answer("redis", &running, &url, async move { RedisConnection::connect(&address).await });
        Broker { url, connection, _running: running }
    })
}

/// The connection to this binary's Redis server, for bespoke tests.
pub fn connection() -> &'static RedisConnection {
    &broker().connection
}

/// The URL of this binary's Redis server, for bespoke tests that connect on their own.
pub fn url() -> &'static str {
    &broker().url
}

pub struct RedisConfiguration {
    name: &'static str,
}

pub fn redis_streams() -> &'static RedisConfiguration {
    static CONFIGURATION: RedisConfiguration = RedisConfiguration { name: "redis-streams" };
    &CONFIGURATION
}

/// A channel for `subscription` (a consumer group on a stream), with the cells' lease.
async fn channel(subscription: Subscription, lease: Duration) -> Arc<dyn Channel> {
    let name = subscription.name.clone();
    let mut subscription = RedisSubscription::new(subscription);
    subscription.lease = lease;
    connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

// Streams are left on the server: it is the test binary's own, with nothing persisted.
#[async_trait]
impl CellBroker for RedisConfiguration {
    type Created = ();

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A stream named as the cell, consumed by the group `<stream>-group`.
    fn names(&self, stream: &str) -> CellNames {
        CellNames::new(format!("{stream}-group"), stream)
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

/// Redis (for Redis Streams) through testcontainers-modules' `Redis`: the official image's
/// interface, port 6379 and "Ready to accept connections" on stdout, which the stand-in honours.
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::redis::{Redis, REDIS_PORT};
    use testcontainers_modules::testcontainers::ImageExt;
    let request = Redis::default().with_name(&image.name).with_tag(&image.tag);
    let image = image.clone();
    on_runtime(async move { start("redis", "Redis container", request, &image, Reach::Published(&[REDIS_PORT])).await })
}
