//! The PostgreSQL configuration: `postgres` (one queue table, `FOR UPDATE SKIP LOCKED` receives,
//! a visibility deadline as the lease).
//!
//! The database, once per test binary, from the source `source::start` picks: the connection
//! string in `DATABASE_URL`, or a cluster of the binary's own: `initdb` into a temporary folder
//! and `postgres` on a free loopback port, behind `providers/brokers/postgres/launcher.sh`, from
//! the Debian package `cargo xtask brokers install postgres` installs (never the system's
//! service); or a container (`container`, testcontainers-modules' `Postgres`) of
//! the image its facts name (providers/brokers/postgres/broker.toml), or of the stand-in `cargo xtask brokers images` builds
//! (`localhost/conformance-postgres:15`, Debian's postgresql-15 behind an entrypoint honouring the
//! official image's interface) through `CONFORMANCE_POSTGRES_IMAGE`. Either way the database
//! trusts the one user `USER` (reachable on 127.0.0.1 only), so the connection string has the same shape.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::postgres::{PostgresConnection, PostgresSubscription};
use gateway::{Channel, Producer, Subscription};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};
use contract::Implementation;

/// Where the Debian package postgresql-15 puts the server and initdb.
pub const POSTGRES_BIN: &str = "/usr/lib/postgresql/15/bin";
/// The one user of the binary's own cluster (trusted, loopback only).
pub(crate) const USER: &str = "conformance";

struct Broker {
    connection: PostgresConnection,
    url: String,
    _running: Running,
}

/// The local cluster: the launcher prints `postgres ready <url>` once the server accepts
/// connections, and removes the cluster when the test binary's stdin closes.
fn start_local() -> Result<LocalProcess, LocalError> {
    match crate::broker::implementation(Implementation::Postgres) {
        Implementation::Postgres17 => start_on_trixie(local::free_loopback_port()),
        // The environment names only postgres's implementations (the contract checks it).
        _ => start_cluster(local::free_loopback_port(), None),
    }
}

/// PostgreSQL 17 (`CONFORMANCE_POSTGRES_IMPL=postgres-17`): the same launcher, in the Debian 13
/// root (`local::in_trixie`), with that root's server.
fn start_on_trixie(port: u16) -> Result<LocalProcess, LocalError> {
    const BIN: &str = "/usr/lib/postgresql/17/bin";
    let name = Implementation::Postgres17.name();
    let server = format!("{BIN}/postgres");
    let mut command =
        local::in_trixie(name, &server, "postgres/launcher.sh", Implementation::Postgres17.install_command())?;
    command.arg(BIN).arg(port.to_string()).arg(USER);
    local::start(name, "postgres", command, port, "postgres ready", Duration::from_secs(90))
}

/// A cluster of the caller's own in `folder` on `port`, kept there when it stops (made by initdb
/// on the first start): a test stops it and starts it again between two deliveries. Its
/// connection string is [`url_at`]`(port)`.
pub fn start_kept(folder: &Path, port: u16) -> Result<LocalProcess, LocalError> {
    start_cluster(port, Some(folder))
}

/// The connection string of a local cluster on `port`.
pub fn url_at(port: u16) -> String {
    format!("postgres://{USER}@127.0.0.1:{port}/postgres")
}

fn start_cluster(port: u16, kept: Option<&Path>) -> Result<LocalProcess, LocalError> {
    let server = Path::new(POSTGRES_BIN).join("postgres");
    if !server.exists() {
        return Err(LocalError::NotInstalled {
            name: "postgres",
            missing: server,
            install: "cargo xtask brokers install postgres",
        });
    }
    let mut command = Command::new("bash");
    command
        .arg(local::workspace_root().join("providers/brokers/postgres/launcher.sh"))
        .arg(POSTGRES_BIN)
        .arg(port.to_string())
        .arg(USER)
        .args(kept);
    local::start("postgres", "postgres", command, port, "postgres ready", Duration::from_secs(90))
}

/// The PostgreSQL database in each source (chosen by `source::start`).
fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("postgres");
    Definition {
        transport: "postgres",
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
        source::refuse_another_implementation_unless_local(&running, Implementation::Postgres);
        let url = running.endpoint(|address| format!("postgres://{USER}@{address}/postgres"));
        let address = url.clone();
        let connection = source::require_answer("postgres", &running, &url, async move {
            let connection = PostgresConnection::connect(&address).await?;
            connection.create_schema().await?;
            Ok::<_, gateway::ChannelError>(connection)
        });
        Broker { connection, url, _running: running }
    })
}

/// The connection to this binary's database, for bespoke tests.
pub fn connection() -> &'static PostgresConnection {
    &broker().connection
}

/// This binary's database's connection string, for bespoke tests that look at the table.
pub fn url() -> &'static str {
    &broker().url
}

pub struct PostgresConfiguration {
    name: &'static str,
}

pub fn postgres() -> &'static PostgresConfiguration {
    static CONFIGURATION: PostgresConfiguration = PostgresConfiguration { name: "postgres" };
    &CONFIGURATION
}

/// A channel for `subscription` (a queue), with `lease`.
pub async fn channel_with_lease(subscription: Subscription, lease: Duration) -> Arc<dyn Channel> {
    let name = subscription.name.clone();
    let mut subscription = PostgresSubscription::new(subscription);
    subscription.lease = lease;
    connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

// Rows are left in the table: the cluster is the test binary's own and goes with it.
#[async_trait]
impl CellBroker for PostgresConfiguration {
    type Created = ();

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A queue named as the cell, received by the subscription `<queue>-sub`.
    fn names(&self, queue: &str) -> CellNames {
        CellNames::new(format!("{queue}-sub"), queue)
    }

    async fn channel(&self, plan: &CellPlan, _: &mut ()) -> Arc<dyn Channel> {
        channel_with_lease(plan.subscription.clone(), self.required_lease()).await
    }

    async fn reader(&self, destination: &str, _: &mut ()) -> Arc<dyn Channel> {
        channel_with_lease(reader_subscription(destination), self.required_lease()).await
    }

    fn producer(&self, _: &CellPlan) -> Arc<dyn Producer> {
        Arc::new(connection().producer())
    }
}

/// The port PostgreSQL listens on in its container (the official image's).
#[cfg(feature = "containers")]
const POSTGRES_PORT: u16 = 5432;

/// PostgreSQL through testcontainers-modules' `Postgres`: the official image's variables, with the
/// provider's one user trusted (the port is on 127.0.0.1 only) and the database `postgres`, so the
/// connection string is the local cluster's; the server's options are the local launcher's (no
/// fsync, and room for a connection per channel of every cell at once).
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::postgres::Postgres;
    use testcontainers_modules::testcontainers::ImageExt;
    let options = ["fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=500"];
    let request = Postgres::default()
        .with_user(USER)
        .with_db_name("postgres")
        .with_host_auth()
        .with_name(&image.name)
        .with_tag(&image.tag)
        .with_cmd(options.iter().flat_map(|option| ["-c", option]));
    let image = image.clone();
    on_runtime(async move {
        start("postgres", "PostgreSQL container", request, &image, Reach::Published(&[POSTGRES_PORT])).await
    })
}
