//! The SQS configurations: `sqs`, `sqs-fifo`, `sns` (SNS to SQS, non-raw envelope), `sns-fifo`.
//!
//! The broker, once per test binary, from the source `source::start` picks: the endpoint in
//! `AWS_ENDPOINT_URL` (with the environment's credentials), LocalStack through testcontainers, or
//! a local server installed by `cargo xtask brokers install sqs`: moto (the reference
//! implementation), or ElasticMQ when `CONFORMANCE_SQS_IMPL=elasticmq` (see `implementation`).

use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::sqs::{SqsConnection, SqsSubscription};
use gateway::{Channel, Producer};

#[cfg(feature = "containers")]
use crate::broker::ImageRef;
use crate::builder::{CellBroker, CellNames, CellPlan};
use crate::cell::Teardown;
use crate::local::{self, LocalError, LocalProcess};
use crate::source::{self, Definition, Running};
use contract::Implementation;

/// The native redrive limit M the provider sets where the cell has a budget (FR-23: R = 3, M = 5).
pub const NATIVE_REDRIVE_LIMIT: u32 = 5;

struct Broker {
    endpoint: String,
    connection: SqsConnection,
    _running: Running,
}

fn start_moto() -> Result<LocalProcess, LocalError> {
    moto(moto_python())
}

/// A moto of its own, its Python threads switching every `interval` (5 ms by default): the test
/// that the launcher keeps moto's thread races out of SQS's semantics makes them likely.
pub fn start_moto_switching_threads_every(interval: Duration) -> Result<LocalProcess, LocalError> {
    let mut python = moto_python();
    python.env("MOTO_SWITCH_INTERVAL", interval.as_secs_f64().to_string());
    moto(python)
}

/// The Python of the virtualenv `cargo xtask brokers install sqs` made, which holds moto.
fn moto_python() -> Command {
    Command::new(local::install_dir("sqs").join("venv/bin/python"))
}

fn moto(mut python: Command) -> Result<LocalProcess, LocalError> {
    let port = local::free_loopback_port();
    python.arg(local::workspace_root().join("providers/brokers/sqs/moto_launcher.py")).arg(port.to_string());
    local::start("moto", "sqs", python, port, "moto listening", Duration::from_secs(60))
}

/// ElasticMQ in a JVM, from the jars and launcher `cargo xtask brokers install sqs --impl
/// elasticmq` puts under `.brokers/sqs/elasticmq`, with the project's config (loopback only).
fn start_elasticmq() -> Result<LocalProcess, LocalError> {
    let install = local::install_dir("sqs").join("elasticmq");
    let launcher = install.join("classes/ElasticMqLauncher.class");
    if !launcher.exists() {
        let install = Implementation::ElasticMq.install_command();
        return Err(LocalError::NotInstalled { name: "elasticmq", missing: launcher, install });
    }
    let port = local::free_loopback_port();
    let config = local::workspace_root().join("providers/brokers/elasticmq/elasticmq.conf");
    let mut command = Command::new("java");
    command
        .args(["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC"])
        .arg(format!("-Dconfig.file={}", config.display()))
        .arg(format!("-Drest-sqs.bind-port={port}"))
        .arg(format!("-Dnode-address.port={port}"))
        .arg("-cp")
        .arg(format!("{}:{}", install.join("lib/*").display(), install.join("classes").display()))
        .arg("ElasticMqLauncher");
    // The JVM and Pekko start in 5 to 15 s on a loaded two-core machine.
    local::start("elasticmq", "sqs", command, port, "elasticmq ready", Duration::from_secs(90))
}

/// The local server of the chosen implementation.
fn start_local() -> Result<LocalProcess, LocalError> {
    match crate::broker::implementation(Implementation::Moto) {
        Implementation::ElasticMq => start_elasticmq(),
        // The environment names only sqs's implementations (the contract checks it).
        _ => start_moto(),
    }
}

/// The SQS / SNS broker in each source (chosen by `source::start`).
fn definition() -> Definition {
    let (endpoint_variable, image) = source::facts("sqs");
    Definition {
        transport: "sqs",
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
        source::refuse_another_implementation_unless_local(&running, Implementation::Moto);
        let connection = match running.loopback_address() {
            Some(address) => SqsConnection::local(&format!("http://{address}")),
            // From the environment: its endpoint and credentials. Loading them is async; a plain
            // thread may block on it whether or not the caller is on a runtime.
            None => std::thread::spawn(|| gateway::blocking::runtime().block_on(SqsConnection::from_environment()))
                .join()
                .expect("loading the AWS configuration panicked"),
        };
        let (client, endpoint) = (connection.sqs_client().clone(), endpoint_of(&running));
        source::require_answer("sqs", &running, &endpoint, async move {
            gateway::GatewayRuntime::shared().call(async move { client.list_queues().send().await }).await.map(drop)
        });
        Broker { endpoint, connection, _running: running }
    })
}

fn endpoint_of(running: &Running) -> String {
    match (running, running.loopback_address()) {
        (Running::Env(url), _) => url.clone(),
        (_, Some(address)) => format!("http://{address}"),
        (_, None) => unreachable!("a started broker has a loopback address"),
    }
}

/// The connection to this binary's SQS broker, for bespoke tests.
pub fn connection() -> &'static SqsConnection {
    &broker().connection
}

/// The URL of this binary's SQS endpoint, for bespoke tests that connect on their own.
pub fn endpoint() -> &'static str {
    &broker().endpoint
}

pub struct SqsConfiguration {
    name: &'static str,
    fifo: bool,
    sns: bool,
}

pub fn sqs() -> &'static SqsConfiguration {
    static CONFIGURATION: SqsConfiguration = SqsConfiguration { name: "sqs", fifo: false, sns: false };
    &CONFIGURATION
}

pub fn sqs_fifo() -> &'static SqsConfiguration {
    static CONFIGURATION: SqsConfiguration = SqsConfiguration { name: "sqs-fifo", fifo: true, sns: false };
    &CONFIGURATION
}

pub fn sns() -> &'static SqsConfiguration {
    static CONFIGURATION: SqsConfiguration = SqsConfiguration { name: "sns", fifo: false, sns: true };
    &CONFIGURATION
}

pub fn sns_fifo() -> &'static SqsConfiguration {
    static CONFIGURATION: SqsConfiguration = SqsConfiguration { name: "sns-fifo", fifo: true, sns: true };
    &CONFIGURATION
}

/// What a cell created, deleted at its end: its queues and its SNS topic.
#[derive(Default)]
pub struct DeleteAll {
    queues: Vec<String>,
    topic: Option<String>,
}

#[async_trait]
impl Teardown for DeleteAll {
    async fn teardown(&self) {
        connection().delete(&self.queues, self.topic.as_deref()).await;
    }
}

#[async_trait]
impl CellBroker for SqsConfiguration {
    type Created = DeleteAll;

    fn configuration(&self) -> &'static str {
        self.name
    }

    /// A queue named as the cell (`.fifo` on a FIFO configuration, and on its destinations);
    /// `sns` publishes to the topic `<cell>-topic` feeding it.
    fn names(&self, base: &str) -> CellNames {
        let suffix = if self.fifo { ".fifo" } else { "" };
        let mut names = CellNames::new(base, format!("{base}{suffix}"));
        names.suffix = suffix;
        if self.sns {
            names.publish_topic = format!("{base}-topic{suffix}");
        }
        names
    }

    async fn channel(&self, plan: &CellPlan, created: &mut DeleteAll) -> Arc<dyn Channel> {
        let queue = &plan.names.routing_key;
        let implementation = crate::broker::implementation(Implementation::Moto);
        // `cargo xtask conformance --impl elasticmq` runs no SNS configuration; by hand, say why
        // the cell cannot run rather than fail on a missing API.
        assert!(
            !self.sns || implementation.serves("sns"),
            "{} has no SNS API: the {} configuration needs moto (unset {})",
            implementation.name(),
            self.name,
            Implementation::Moto.variable()
        );
        let mut subscription = SqsSubscription::new(plan.subscription.clone());
        subscription.fifo = self.fifo;
        subscription.topic = self.sns.then(|| plan.names.publish_topic.clone());
        subscription.visibility_timeout = self.required_lease();
        subscription.redrive_limit =
            (plan.spec.dead_letter && plan.spec.requeue_count > 0).then_some(NATIVE_REDRIVE_LIMIT);
        let channel = connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {queue}: {e}"));
        created.queues.push(queue.clone());
        created.topic = subscription.topic;
        Arc::new(channel)
    }

    async fn reader(&self, queue: &str, created: &mut DeleteAll) -> Arc<dyn Channel> {
        let reader = connection().reader(queue, self.fifo).await.expect("reader");
        created.queues.push(queue.to_owned());
        Arc::new(reader)
    }

    fn producer(&self, _: &CellPlan) -> Arc<dyn Producer> {
        if self.sns {
            Arc::new(connection().sns_producer())
        } else {
            Arc::new(connection().sqs_producer())
        }
    }

    fn teardown(&self, created: DeleteAll) -> Option<Box<dyn Teardown>> {
        Some(Box::new(created))
    }
}

/// LocalStack's edge port, where SQS and SNS answer.
#[cfg(feature = "containers")]
const LOCALSTACK_PORT: u16 = 4566;

/// LocalStack, for SQS and SNS.
#[cfg(feature = "containers")]
pub fn container(image: &ImageRef) -> Result<crate::broker::BrokerContainer, crate::containers::ContainerError> {
    use crate::containers::{on_runtime, start, Reach};
    use testcontainers_modules::localstack::LocalStack;
    use testcontainers_modules::testcontainers::ImageExt;
    let request = LocalStack::default().with_name(&image.name).with_tag(&image.tag).with_env_var("SERVICES", "sqs,sns");
    let image = image.clone();
    on_runtime(async move {
        start("sqs", "localstack container", request, &image, Reach::Published(&[LOCALSTACK_PORT])).await
    })
}
