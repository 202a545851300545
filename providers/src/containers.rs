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
    #[error("image {image} is not in the engine (pull it{})", pull_hint(.stand_in))]
    ImageMissing { image: ImageRef, stand_in: Option<&'static str> },
}

/// Why a broker container gives no broker; each names the container and its image or id.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error(
        "the {name} (image {image}) did not start: {error}; is a Docker daemon running, and is the image \
         present or pullable? Set {} to a mirror{}",
        .image.variable,
        start_hint(.stand_in)
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

fn pull_hint(stand_in: &Option<&'static str>) -> String {
    stand_in.map(|how| format!(", or build the stand-in with {how}")).unwrap_or_default()
}

fn start_hint(stand_in: &Option<&'static str>) -> String {
    stand_in.map(|how| format!(" or to the stand-in built by {how}")).unwrap_or_default()
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

/// How to build a stand-in for `image`, where the project has one (the Pub/Sub fake; SQS has none).
fn stand_in(image: &ImageRef) -> Option<&'static str> {
    // The variable, not the image: whatever it names, its stand-in is the one `brokers images` builds.
    (image.variable == "CONFORMANCE_PUBSUB_IMAGE").then_some("`cargo xtask brokers images`")
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

/// Starts `image` (already named and tagged), waits for its ready condition, and hands it to the
/// exit hook and the watchdog.
async fn start<I: Image + 'static>(
    transport: &'static str,
    name: &'static str,
    request: impl Into<testcontainers_modules::testcontainers::ContainerRequest<I>>,
    reference: &ImageRef,
    ports: &'static [u16],
) -> Result<BrokerContainer, ContainerError> {
    let request = request.into().with_host_config_modifier(loopback_only(ports)).with_startup_timeout(STARTUP_CEILING);
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
    let port = container.get_host_port_ipv4(ContainerPort::Tcp(ports[0])).await;
    std::mem::forget(container);
    let port = match port {
        Ok(port) => port,
        Err(error) => return Err(ContainerError::NoPort { name, id, port: ports[0], error: Box::new(error) }),
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
    on_runtime(async move { start("gcp", "Pub/Sub emulator container", request, &image, &[PUBSUB_PORT]).await })
}

/// LocalStack, for SQS and SNS.
pub fn localstack(image: &ImageRef) -> Result<BrokerContainer, ContainerError> {
    let request = LocalStack::default().with_name(&image.name).with_tag(&image.tag).with_env_var("SERVICES", "sqs,sns");
    let image = image.clone();
    on_runtime(async move { start("sqs", "localstack container", request, &image, &[LOCALSTACK_PORT]).await })
}

/// Extension point for the RocketMQ transport (issue: RocketMQ; not implemented here).
///
/// To add it, in this module:
/// 1. pin three images as constants with their override variables, e.g.
///    `ROCKETMQ_IMAGE = "apache/rocketmq:<5.x tag>"` / `CONFORMANCE_ROCKETMQ_IMAGE` (the name
///    server, broker and proxy all run from that image with different commands);
/// 2. write `pub fn rocketmq(image: &ImageRef) -> Result<BrokerContainer, ContainerError>` that creates
///    one network (`ImageExt::with_network`, a unique name), starts the name server
///    (`GenericImage` waiting on its ready line), then the broker pointing at it, then the proxy,
///    each through [`start`] so every container is removed at exit and watched; return the
///    proxy's container with its mapped gRPC port (the other two are watched too, so any of the
///    three dying stops the run);
/// 3. in the provider (`providers/src/rocketmq.rs`), `container: Some(containers::rocketmq)` in its
///    `source::Definition` (today `None`: auto declines containers and `containers` stops, naming it).
///
/// `cargo xtask brokers images` is where a stand-in image would be built if the engine cannot pull.
pub mod rocketmq {}

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
