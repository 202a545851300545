//! Brokers in containers through testcontainers (feature `containers`): the definitions, the
//! loopback-only port mapping, the check `auto` makes, a watchdog that stops the test binary when
//! its broker container dies, and the exit hook that removes every container this binary started.
//!
//! Why not testcontainers' own drop: a provider's broker lives in a static for the binary's life,
//! and a static is never dropped; so each container is handed to [`exit_hook`], which removes it
//! by id when the process exits (normally, or through `std::process::exit`). A binary killed with
//! SIGKILL cannot run it: its container stays, labelled `org.testcontainers.managed-by=testcontainers`
//! (`.ci/run` fails when one is left).
//!
//! Every container call runs on the gateway's runtime, which lives as long as the process; the
//! exit hook alone uses a fresh client on a fresh thread, because it may run on any thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use futures_util::StreamExt;
use testcontainers_modules::google_cloud_sdk_emulators::{CloudSdk, PUBSUB_PORT};
use testcontainers_modules::localstack::LocalStack;
use testcontainers_modules::testcontainers::bollard::errors::Error as BollardError;
use testcontainers_modules::testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers_modules::testcontainers::bollard::query_parameters::{
    KillContainerOptionsBuilder, RemoveContainerOptionsBuilder,
};
use testcontainers_modules::testcontainers::bollard::Docker;
use testcontainers_modules::testcontainers::core::client::docker_client_instance;
use testcontainers_modules::testcontainers::core::error::{ClientError, TestcontainersError};
use testcontainers_modules::testcontainers::core::ContainerPort;
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::{ContainerAsync, Image, ImageExt};

use crate::broker::{announce, fatal, BrokerContainer, ImageRef};
use crate::fault::Fault;

/// LocalStack's edge port, where SQS and SNS answer.
pub const LOCALSTACK_PORT: u16 = 4566;

/// How long `auto` waits for a daemon to answer before it falls back to a local process.
const DAEMON_CEILING: Duration = Duration::from_secs(3);
/// How long a broker container may take from create to its ready line.
const STARTUP_CEILING: Duration = Duration::from_secs(120);

/// Why `auto` may not use containers, said in the run's source line.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("no Docker client: {0}")]
    NoClient(ClientError),
    #[error("no Docker daemon answered ({0})")]
    NoDaemon(BollardError),
    #[error("no Docker daemon answered within {0:?}")]
    NoAnswer(Duration),
    #[error("image {image} is not in the engine ({})", pull_hint(.image, .stand_in))]
    ImageMissing { image: ImageRef, stand_in: Option<&'static str> },
}

/// Why a broker container gives no broker; each names the container and its image or id.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error(
        "the {name} (image {image}) did not start: {error}; is a Docker daemon running, and is the image \
         present or pullable? Set {} to a mirror{}",
        .image.variable,
        start_hint(.image, .stand_in)
    )]
    DidNotStart { name: &'static str, image: ImageRef, stand_in: Option<&'static str>, error: Box<TestcontainersError> },
    #[error("the {name} {id} has no port mapped for {port}: {error}")]
    NoPort { name: &'static str, id: String, port: u16, error: Box<TestcontainersError> },
    #[error("the {name} {short_id} (image {image}) died mid-run ({how}); stopping so no cell is recorded")]
    Died { name: &'static str, short_id: String, image: ImageRef, how: Death },
}

/// How a broker container stopped, as the engine tells it.
#[derive(Debug, thiserror::Error)]
pub enum Death {
    #[error("exit code {0}")]
    Exited(i64),
    #[error("the engine stopped answering: {0}")]
    EngineStopped(Box<BollardError>),
    #[error("the engine ended its wait")]
    WaitEnded,
}

/// What to do about a missing image: pull it, or build its stand-in (and name it).
fn pull_hint(image: &ImageRef, stand_in: &Option<&'static str>) -> String {
    match stand_in {
        Some(name) if image.to_string() == *name => format!("build it with {BUILD_STAND_INS}"),
        Some(name) => {
            format!("pull it, or build the stand-in {name} with {BUILD_STAND_INS} and set {} to it", image.variable)
        }
        None => "pull it".to_owned(),
    }
}

/// What else the image variable may name, after "a mirror".
fn start_hint(image: &ImageRef, stand_in: &Option<&'static str>) -> String {
    match stand_in {
        Some(name) if image.to_string() == *name => format!(", or build it with {BUILD_STAND_INS}"),
        Some(name) => format!(" or to the stand-in {name}, which {BUILD_STAND_INS} builds"),
        None => String::new(),
    }
}

/// Runs `future` on the gateway's runtime from a plain thread, so callers on or off a runtime
/// (async tests, Reactor threads) may all start a broker.
fn on_runtime<T: Send + 'static>(future: impl std::future::Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || gateway::blocking::runtime().block_on(future)).join().expect("a container call panicked")
}

/// Whether `auto` may use containers: a daemon answers within 3 s and `image` is present in the
/// engine (auto never pulls). The error says why not, for the run's source line.
pub fn usable(image: &ImageRef) -> Result<(), Unusable> {
    let image = image.clone();
    on_runtime(async move {
        let check = async {
            let docker = docker_client_instance().await.map_err(Unusable::NoClient)?;
            docker.ping().await.map_err(Unusable::NoDaemon)?;
            match docker.inspect_image(&image.to_string()).await {
                Ok(_) => Ok(()),
                Err(_) => Err(Unusable::ImageMissing { stand_in: stand_in(&image), image }),
            }
        };
        tokio::time::timeout(DAEMON_CEILING, check).await.unwrap_or(Err(Unusable::NoAnswer(DAEMON_CEILING)))
    })
}

/// The command that builds every stand-in.
const BUILD_STAND_INS: &str = "`cargo xtask brokers images`";

/// Each image variable's stand-in, the image `cargo xtask brokers images` builds for it (the very
/// names xtask/src/images.rs builds; xtask/tests/tidy.rs checks). Spelled out here: the
/// transports' modules, which define the variables, are each behind a feature.
const STAND_INS: [(&str, &str); 8] = [
    ("CONFORMANCE_PUBSUB_IMAGE", "localhost/conformance-pstest:pubsub-v2.9.0"),
    ("CONFORMANCE_LOCALSTACK_IMAGE", "localhost/conformance-moto:5.2.5"),
    ("CONFORMANCE_ROCKETMQ_IMAGE", "localhost/conformance-rocketmq:5.3.3"),
    ("CONFORMANCE_REDIS_IMAGE", "localhost/conformance-redis:7.0.15"),
    ("CONFORMANCE_POSTGRES_IMAGE", "localhost/conformance-postgres:15"),
    ("CONFORMANCE_MQTT_IMAGE", "localhost/conformance-mosquitto:2.0.11"),
    ("CONFORMANCE_RABBITMQ_IMAGE", "localhost/conformance-rabbitmq:3.10.8"),
    ("CONFORMANCE_KAFKA_IMAGE", "localhost/conformance-kafka:3.9.0"),
];

/// The stand-in for `image`: every transport's broker has one. By the variable, not the image:
/// whatever it names (the upstream image, a mirror), its stand-in is the one `brokers images` builds.
fn stand_in(image: &ImageRef) -> Option<&'static str> {
    STAND_INS.iter().find(|(variable, _)| *variable == image.variable).map(|(_, name)| *name)
}

/// Publishes `ports` on 127.0.0.1 only, on ports the engine picks: like a local process, a broker
/// container is never reachable from outside the machine (testcontainers alone binds every interface).
fn loopback_only(ports: &'static [u16]) -> impl Fn(&mut HostConfig) + Send + Sync + 'static {
    move |host_config: &mut HostConfig| {
        let loopback = || Some(vec![PortBinding { host_ip: Some("127.0.0.1".into()), host_port: Some(String::new()) }]);
        host_config.publish_all_ports = Some(false);
        host_config.port_bindings =
            Some(ports.iter().map(|port| (format!("{port}/tcp"), loopback())).collect::<HashMap<_, _>>());
    }
}

/// How a broker container's port reaches the test binary.
enum Reach {
    /// Published on 127.0.0.1, on host ports the engine picks; the first is the broker's address.
    Published(&'static [u16]),
    /// The container shares the host's network and binds this loopback port itself (RocketMQ's).
    #[cfg_attr(not(feature = "rocketmq"), allow(dead_code))]
    HostNetwork(u16),
}

/// Starts `image` (already named and tagged), waits for its ready condition, and hands it to the
/// exit hook and the watchdog.
async fn start<I: Image + 'static>(
    transport: &'static str,
    name: &'static str,
    request: impl Into<testcontainers_modules::testcontainers::ContainerRequest<I>>,
    reference: &ImageRef,
    reach: Reach,
) -> Result<BrokerContainer, ContainerError> {
    let request = match reach {
        Reach::Published(ports) => request.into().with_host_config_modifier(loopback_only(ports)),
        Reach::HostNetwork(_) => request.into().with_network("host"),
    };
    let request = request.with_startup_timeout(STARTUP_CEILING);
    let container: ContainerAsync<I> = request.start().await.map_err(|error| ContainerError::DidNotStart {
        name,
        image: reference.clone(),
        stand_in: stand_in(reference),
        error: Box::new(error),
    })?;
    let id = container.id().to_owned();
    exit_hook::register(&id);
    // From here the exit hook owns its removal: forgetting the handle skips testcontainers' drop,
    // which would need a runtime at a moment process exit does not offer.
    let port = match reach {
        Reach::Published(ports) => {
            container.get_host_port_ipv4(ContainerPort::Tcp(ports[0])).await.map_err(|e| (ports[0], e))
        }
        Reach::HostNetwork(port) => Ok(port),
    };
    std::mem::forget(container);
    let port = match port {
        Ok(port) => port,
        Err((port, error)) => return Err(ContainerError::NoPort { name, id, port, error: Box::new(error) }),
    };
    let broker = BrokerContainer { transport, name, id, port };
    watchdog(&broker, reference);
    if Fault::from_environment() == Some(Fault::KillBroker) {
        kill_soon(&broker);
    }
    Ok(broker)
}

/// The Cloud SDK Pub/Sub emulator (or a stand-in image with the same interface).
pub fn pubsub(image: &ImageRef) -> Result<BrokerContainer, ContainerError> {
    let request = CloudSdk::pubsub().with_name(&image.name).with_tag(&image.tag);
    let image = image.clone();
    on_runtime(async move {
        start("gcp", "Pub/Sub emulator container", request, &image, Reach::Published(&[PUBSUB_PORT])).await
    })
}

/// LocalStack, for SQS and SNS.
pub fn localstack(image: &ImageRef) -> Result<BrokerContainer, ContainerError> {
    let request = LocalStack::default().with_name(&image.name).with_tag(&image.tag).with_env_var("SERVICES", "sqs,sns");
    let image = image.clone();
    on_runtime(async move {
        start("sqs", "localstack container", request, &image, Reach::Published(&[LOCALSTACK_PORT])).await
    })
}

/// Apache RocketMQ's name server and broker in one container, from the image `cargo xtask brokers
/// images` builds (testcontainers-modules has no RocketMQ module). Its command is the two ports.
///
/// On the host network, not published ports: the broker registers its own address with the name
/// server, and clients connect to the address the name server returns. Behind published ports
/// that address is the container's, which the client cannot reach; on the host network the broker
/// binds 127.0.0.1 on the ports the test picked, so the address it registers is the one clients
/// use, and it stays loopback only like the local process.
#[cfg(feature = "rocketmq")]
pub fn rocketmq(image: &ImageRef) -> Result<BrokerContainer, ContainerError> {
    use testcontainers_modules::testcontainers::{core::WaitFor, GenericImage};
    let (name_server, broker) = (crate::local::free_loopback_port(), crate::rocketmq::free_broker_port());
    let request = GenericImage::new(&image.name, &image.tag)
        .with_wait_for(WaitFor::message_on_stdout("rocketmq ready"))
        .with_cmd([name_server.to_string(), broker.to_string()]);
    let image = image.clone();
    on_runtime(async move {
        start("rocketmq", "RocketMQ container", request, &image, Reach::HostNetwork(name_server)).await
    })
}

/// Redis (for Redis Streams) through testcontainers-modules' `Redis`: the official image's
/// interface, port 6379 and "Ready to accept connections" on stdout, which the stand-in honours.
#[cfg(feature = "redis")]
pub fn redis(image: &ImageRef) -> Result<BrokerContainer, ContainerError> {
    use testcontainers_modules::redis::{Redis, REDIS_PORT};
    let request = Redis::default().with_name(&image.name).with_tag(&image.tag);
    let image = image.clone();
    on_runtime(async move { start("redis", "Redis container", request, &image, Reach::Published(&[REDIS_PORT])).await })
}

/// The port PostgreSQL listens on in its container (the official image's).
pub const POSTGRES_PORT: u16 = 5432;

/// PostgreSQL through testcontainers-modules' `Postgres`: the official image's variables, with the
/// provider's one user trusted (the port is on 127.0.0.1 only) and the database `postgres`, so the
/// connection string is the local cluster's; the server's options are the local launcher's (no
/// fsync, and room for a connection per channel of every cell at once).
#[cfg(feature = "postgres")]
pub fn postgres(image: &ImageRef) -> Result<BrokerContainer, ContainerError> {
    use testcontainers_modules::postgres::Postgres;
    let options = ["fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=500"];
    let request = Postgres::default()
        .with_user(crate::postgres::USER)
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

/// The port mosquitto listens on in its container (the official image's).
pub const MQTT_PORT: u16 = 1883;

/// mosquitto through testcontainers-modules' `Mosquitto`: the official image started with its
/// `/mosquitto-no-auth.conf` (anonymous clients on 1883). The module waits for "mosquitto version
/// 2.0.18 running", its own tag's version, which any other version (the pinned 2.0.11, Debian's in
/// the stand-in) never prints: this waits for the part of that line every version prints.
#[cfg(feature = "mqtt")]
pub fn mqtt(image: &ImageRef) -> Result<BrokerContainer, ContainerError> {
    use testcontainers_modules::mosquitto::Mosquitto;
    use testcontainers_modules::testcontainers::core::WaitFor;
    let request = Mosquitto::default()
        .with_name(&image.name)
        .with_tag(&image.tag)
        .with_ready_conditions(vec![WaitFor::message_on_stderr(" running")]);
    let image = image.clone();
    on_runtime(
        async move { start("mqtt", "mosquitto container", request, &image, Reach::Published(&[MQTT_PORT])).await },
    )
}

/// The port RabbitMQ takes AMQP on in its container (the official image's).
pub const AMQP_PORT: u16 = 5672;

/// RabbitMQ through testcontainers-modules' `RabbitMq`: the official `-management` image (its
/// ready line counts that image's four plugins), guest allowed from the published port.
#[cfg(feature = "rabbitmq")]
pub fn rabbitmq(image: &ImageRef) -> Result<BrokerContainer, ContainerError> {
    use testcontainers_modules::rabbitmq::RabbitMq;
    let request = RabbitMq::default().with_name(&image.name).with_tag(&image.tag);
    let image = image.clone();
    on_runtime(
        async move { start("rabbitmq", "RabbitMQ container", request, &image, Reach::Published(&[AMQP_PORT])).await },
    )
}

/// The port Kafka's clients connect to in its container (testcontainers-modules'
/// `apache::KAFKA_PORT`).
pub const KAFKA_PORT: u16 = 9092;

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
#[cfg(feature = "kafka")]
pub fn kafka(image: &ImageRef) -> Result<BrokerContainer, ContainerError> {
    use testcontainers_modules::kafka::apache::Kafka;
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

/// Stops the test binary when the broker container stops while the binary still runs: every cell
/// after that would fail for the broker's sake, not the gateway's, and a binary that ends without
/// libtest's summary leaves the ledger untouched.
fn watchdog(broker: &BrokerContainer, image: &ImageRef) {
    let (id, name, transport, image) = (broker.id.clone(), broker.name, broker.transport, image.clone());
    gateway::blocking::runtime().spawn(async move {
        let Ok(docker) = docker_client_instance().await else { return };
        // Yields once, when the container stops for any reason.
        let outcome = docker.wait_container(&id, None).next().await;
        if exit_hook::exiting() {
            return;
        }
        let how = match outcome {
            Some(Ok(response)) => Death::Exited(response.status_code),
            // bollard reports a non-zero exit as an error; SIGKILL is 137.
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Death::Exited(code),
            Some(Err(error)) => Death::EngineStopped(Box::new(error)),
            None => Death::WaitEnded,
        };
        fatal(transport, &ContainerError::Died { name, short_id: id[..12].to_owned(), image, how });
    });
}

/// The `kill-broker` fault: kills the broker container 250 ms after it is up, while the first
/// cells are running.
fn kill_soon(broker: &BrokerContainer) {
    let id = broker.id.clone();
    gateway::blocking::runtime().spawn(async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        announce(&format!("fault kill-broker: killing container {}", &id[..12]));
        if let Ok(docker) = docker_client_instance().await {
            let _ =
                docker.kill_container(&id, Some(KillContainerOptionsBuilder::new().signal("SIGKILL").build())).await;
        }
    });
}

mod exit_hook {
    //! Removes, at process exit, every container this binary started.
    use super::*;

    static IDS: Mutex<Vec<String>> = Mutex::new(Vec::new());
    static EXITING: AtomicBool = AtomicBool::new(false);

    pub fn exiting() -> bool {
        EXITING.load(Ordering::SeqCst)
    }

    pub fn register(id: &str) {
        static INSTALL: Once = Once::new();
        // SAFETY: `remove_all` is an `extern "C" fn()` that never unwinds (it catches panics).
        INSTALL.call_once(|| unsafe {
            libc::atexit(remove_all);
        });
        IDS.lock().unwrap_or_else(|e| e.into_inner()).push(id.to_owned());
    }

    extern "C" fn remove_all() {
        EXITING.store(true, Ordering::SeqCst);
        let ids = std::mem::take(&mut *IDS.lock().unwrap_or_else(|e| e.into_inner()));
        // A fresh thread and runtime: this may run on a runtime's worker (a `process::exit` from
        // the watchdog), where blocking on a runtime would panic.
        let removal = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            let docker = Docker::connect_with_defaults().ok()?;
            runtime.block_on(async {
                for id in &ids {
                    let options = RemoveContainerOptionsBuilder::new().force(true).v(true).build();
                    if let Err(error) = docker.remove_container(id, Some(options)).await {
                        announce(&format!("could not remove container {id}: {error}"));
                    }
                }
            });
            Some(())
        });
        let _ = removal.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_image_says_which_stand_in_to_build_and_how_to_use_it() {
        let missing = |variable, value| {
            let image = ImageRef::parse(variable, value).unwrap();
            Unusable::ImageMissing { stand_in: stand_in(&image), image }.to_string()
        };
        assert_eq!(
            missing("CONFORMANCE_KAFKA_IMAGE", "apache/kafka:3.9.0"),
            "image apache/kafka:3.9.0 is not in the engine (pull it, or build the stand-in \
             localhost/conformance-kafka:3.9.0 with `cargo xtask brokers images` and set CONFORMANCE_KAFKA_IMAGE to it)"
        );
        assert_eq!(
            missing("CONFORMANCE_ROCKETMQ_IMAGE", "localhost/conformance-rocketmq:5.3.3"),
            "image localhost/conformance-rocketmq:5.3.3 is not in the engine (build it with `cargo xtask brokers images`)"
        );
        assert_eq!(missing("CONFORMANCE_OTHER_IMAGE", "other:1"), "image other:1 is not in the engine (pull it)");
    }

    #[test]
    fn a_container_that_does_not_start_names_the_stand_in_its_variable_may_name() {
        let image = ImageRef::parse("CONFORMANCE_REDIS_IMAGE", "redis:7.0.15").unwrap();
        let error = ContainerError::DidNotStart {
            name: "Redis container",
            stand_in: stand_in(&image),
            image,
            error: Box::new(TestcontainersError::other("no such image")),
        };
        assert!(
            error.to_string().ends_with(
                "Set CONFORMANCE_REDIS_IMAGE to a mirror or to the stand-in localhost/conformance-redis:7.0.15, which \
                 `cargo xtask brokers images` builds"
            ),
            "{error}"
        );
    }
}
